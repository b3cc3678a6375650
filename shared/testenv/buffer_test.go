package testenv

import (
	"fmt"
	"testing"
	"time"
)

// fatalTB records a Fatal instead of ending the test, so a wait's failure
// at its deadline can be observed.
type fatalTB struct {
	testing.TB
	failed chan string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatal(args ...any) {
	f.failed <- fmt.Sprint(args...)
	select {} // Fatal never returns; the goroutine ends with the test binary
}

func TestWaitForWakesOnTheWriteThatCompletesIt(t *testing.T) {
	var b Buffer
	done := make(chan struct{})
	go func() { b.WaitFor(t, time.Minute, "alpha", "beta"); close(done) }()
	fmt.Fprintln(&b, "alpha")
	fmt.Fprintln(&b, "beta")
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("WaitFor did not return after both words were written")
	}
}

func TestAWaitFailsAtItsDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait func(b *Buffer, tb testing.TB)
	}{
		{"WaitFor fails when a word never comes", func(b *Buffer, tb testing.TB) { b.WaitFor(tb, 10*time.Millisecond, "alpha", "never") }},
		{"WaitLine fails when the parts stand on different lines", func(b *Buffer, tb testing.TB) { b.WaitLine(tb, 10*time.Millisecond, "alpha", "beta") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b Buffer
			fmt.Fprintln(&b, "alpha")
			fmt.Fprintln(&b, "beta")
			tb := &fatalTB{TB: t, failed: make(chan string, 1)}
			returned := make(chan struct{})
			go func() { tc.wait(&b, tb); close(returned) }()
			select {
			case msg := <-tb.failed:
				t.Logf("failed as it should: %s", msg)
			case <-returned:
				t.Fatal("the wait returned as if it had seen what it waited for")
			}
		})
	}
}
