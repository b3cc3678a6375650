package testenv

import (
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	t.Run("a new clock stands at the fixed start", func(t *testing.T) {
		if got := NewClock().Now(); !got.Equal(ClockStart) {
			t.Fatalf("Now() = %v, want %v", got, ClockStart)
		}
	})
	t.Run("a clock made at an instant stands there", func(t *testing.T) {
		start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
		if got := NewClockAt(start).Now(); !got.Equal(start) {
			t.Fatalf("Now() = %v, want %v", got, start)
		}
	})
	t.Run("time moves only when advanced", func(t *testing.T) {
		c := NewClock()
		if !c.Now().Equal(c.Now()) {
			t.Fatal("two readings without Advance differ")
		}
		c.Advance(90 * time.Second)
		if got := c.Now(); !got.Equal(ClockStart.Add(90 * time.Second)) {
			t.Fatalf("after Advance(90s) Now() = %v", got)
		}
	})
}
