package testenv

import (
	"sync"
	"time"
)

// ClockStart is where a NewClock starts: a fixed instant, so timestamps in
// failures and fixtures read the same on every run.
var ClockStart = time.Date(2026, 3, 12, 10, 0, 0, 0, time.UTC)

// Clock is a settable clock for tests of code that takes a
// func() time.Time: time moves only when the test calls Advance, so expiry,
// presence and rate limits are tested without sleeping. It is safe for
// concurrent use; pass its Now method as the clock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock standing at ClockStart.
func NewClock() *Clock { return NewClockAt(ClockStart) }

// NewClockAt returns a Clock standing at start.
func NewClockAt(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
