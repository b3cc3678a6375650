package testenv

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer safe for concurrent writers: tests hand it to
// loggers and processes that write from several goroutines while the test
// reads what was written so far, or waits for something to be written
// instead of sleeping and hoping. The zero value is ready to use.
type Buffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

// Write appends p and wakes every waiter.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.changed != nil {
		close(b.changed)
	}
	b.changed = make(chan struct{})
	return n, err
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// WaitFor waits until everything in want was written, anywhere, and fails
// the test when d passes first.
func (b *Buffer) WaitFor(t testing.TB, d time.Duration, want ...string) {
	t.Helper()
	b.wait(t, d, func(text string) bool { return containsAll(text, want) },
		func(text string) string { return "not written within " + d.String() + ": " + quote(want) + "\n" + text })
}

// WaitLine waits until one line holds every one of parts, and fails the
// test when d passes first.
func (b *Buffer) WaitLine(t testing.TB, d time.Duration, parts ...string) {
	t.Helper()
	b.wait(t, d, func(text string) bool {
		for _, line := range strings.Split(text, "\n") {
			if containsAll(line, parts) {
				return true
			}
		}
		return false
	}, func(text string) string {
		return "no line with " + quote(parts) + " within " + d.String() + ":\n" + text
	})
}

func (b *Buffer) wait(t testing.TB, d time.Duration, done func(string) bool, failure func(string) string) {
	t.Helper()
	deadline := time.After(d)
	for {
		b.mu.Lock()
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		text, changed := b.buf.String(), b.changed
		b.mu.Unlock()
		if done(text) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal(failure(text))
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func quote(parts []string) string {
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = "\"" + p + "\""
	}
	return "[" + strings.Join(q, " ") + "]"
}
