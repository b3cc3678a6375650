package meshd

import (
	"testing"
	"time"
)

func TestPushReconnectBackoffIsJitteredAndBounded(t *testing.T) {
	p := pushBackoff(DefaultPushRetryBase, DefaultPushRetryMax)
	t.Run("the first reconnect is spread over the whole window", func(t *testing.T) {
		lo, hi := DefaultPushRetryBase, time.Duration(0)
		for range 1000 {
			d := p.Delay(1)
			if d < 0 || d > DefaultPushRetryBase {
				t.Fatalf("first reconnect after %v, outside [0, %v]", d, DefaultPushRetryBase)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// 10,000 hosts dropped together must not come back together.
		if hi-lo < DefaultPushRetryBase/2 {
			t.Errorf("1000 first reconnects all within [%v, %v]: not spread over the %v window", lo, hi, DefaultPushRetryBase)
		}
	})
	t.Run("later reconnects never wait longer than the cap", func(t *testing.T) {
		for attempt := 1; attempt <= 100; attempt++ {
			if d := p.Delay(attempt); d > DefaultPushRetryMax {
				t.Fatalf("attempt %d waits %v, over the cap %v", attempt, d, DefaultPushRetryMax)
			}
		}
	})
	t.Run("the window doubles per failure", func(t *testing.T) {
		var top time.Duration
		for range 1000 {
			top = max(top, p.Delay(3))
		}
		if top <= DefaultPushRetryBase {
			t.Errorf("the third attempt never waited beyond the first window (%v): no backoff", top)
		}
	})
}

func TestPushHandshakesAreCappedPerMinute(t *testing.T) {
	l := dialLimiter{per: 3, window: time.Minute}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		now := t0.Add(time.Duration(i) * time.Second)
		if w := l.wait(now); w != 0 {
			t.Fatalf("handshake %d had to wait %v within the budget", i+1, w)
		}
		l.record(now)
	}
	t.Run("one more within the minute waits until the oldest is a minute old", func(t *testing.T) {
		if w := l.wait(t0.Add(10 * time.Second)); w != 50*time.Second {
			t.Errorf("wait %v, want 50s", w)
		}
	})
	t.Run("a minute after the oldest another is allowed", func(t *testing.T) {
		now := t0.Add(time.Minute)
		if w := l.wait(now); w > 0 {
			t.Errorf("wait %v, want none", w)
		}
		l.record(now)
		if len(l.times) != 3 {
			t.Errorf("the limiter keeps %d times, want 3 (bounded)", len(l.times))
		}
	})
}
