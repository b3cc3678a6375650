package mesh

import "time"

// Clock gives the current time; tests inject a fixed or stepping clock so
// time-based behaviour (presence, task timeouts, rate limits) is testable.
type Clock func() time.Time

// SystemClock is the real clock, in UTC with microsecond precision to match
// DATETIME(6) columns.
func SystemClock() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
