package backoff

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestDelay(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       Policy
		attempt int
		want    time.Duration
	}{
		{"the first attempt waits the base", Policy{Base: 5 * time.Second}, 1, 5 * time.Second},
		{"an attempt below one counts as the first", Policy{Base: 5 * time.Second}, 0, 5 * time.Second},
		{"each attempt doubles the wait", Policy{Base: 5 * time.Second}, 4, 40 * time.Second},
		{"the wait never passes the cap", Policy{Base: time.Second, Max: 10 * time.Second}, 9, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Delay(tc.attempt); got != tc.want {
				t.Fatalf("Delay(%d) = %v, want %v", tc.attempt, got, tc.want)
			}
		})
	}
}

func TestAHugeAttemptWithoutACapDoesNotOverflow(t *testing.T) {
	p := Policy{Base: time.Second}
	if a, b := p.Delay(499), p.Delay(500); a <= 0 || b < a {
		t.Fatalf("Delay(499) = %v, Delay(500) = %v: the schedule overflowed", a, b)
	}
}

func TestJitterStaysWithinItsShare(t *testing.T) {
	p := Policy{Base: time.Second, Max: 8 * time.Second, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for range 200 {
		d := p.Delay(3) // 4 s before jitter
		if d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("jittered delay %v outside [2s, 4s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 2 {
		t.Fatalf("200 jittered delays were all %v: no jitter", seen)
	}
}

func TestWaitEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan bool)
		go func() { done <- Wait(ctx, time.Hour) }()
		synctest.Wait()
		cancel()
		if <-done {
			t.Fatal("Wait reported a full sleep after its context was cancelled")
		}
		start := time.Now()
		if !Wait(t.Context(), time.Minute) {
			t.Fatal("Wait gave up on a live context")
		}
		if got := time.Since(start); got != time.Minute {
			t.Fatalf("Wait slept %v (fake clock), want 1m", got)
		}
	})
}
