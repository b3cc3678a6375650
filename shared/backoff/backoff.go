// Package backoff is the one retry schedule of the mesh: a delay that
// doubles per attempt from a base up to a cap, optionally jittered, and a
// wait that gives up when its context ends. The database's transaction
// retries, the dispatcher's per-recipient schedule, meshd's API and handler
// retries and meshclient all take their delays from here, so "doubling,
// capped" means the same thing everywhere.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is an exponential schedule: attempt 1 waits Base, each later
// attempt twice the one before, never more than Max (no cap when Max <= 0).
type Policy struct {
	Base time.Duration
	Max  time.Duration
	// Jitter, from 0 to 1, is the share of each delay that is random: 0.5
	// waits between half the delay and all of it, so clients retrying
	// together spread out. 0 is exact, as a persisted schedule needs.
	Jitter float64
}

// Delay is the wait before retrying after the given failed attempt (1 for
// the first failure). An attempt below 1 counts as 1.
func (p Policy) Delay(attempt int) time.Duration {
	d := p.Base
	for i := 1; i < attempt && (p.Max <= 0 || d < p.Max); i++ {
		if d > (1<<62)/2 { // doubling again would overflow
			break
		}
		d *= 2
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	if p.Jitter > 0 && d > 0 {
		j := min(p.Jitter, 1)
		fixed := time.Duration(float64(d) * (1 - j))
		d = fixed + rand.N(d-fixed+1)
	}
	return d
}

// Wait sleeps d and reports true, or returns false as soon as ctx ends.
func Wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
