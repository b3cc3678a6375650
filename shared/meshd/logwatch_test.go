package meshd_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// logWatch is the fixture's log: safe for concurrent writers, and a test
// can wait on what Run logs instead of sleeping and hoping.
type logWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newLogWatch() *logWatch { return &logWatch{changed: make(chan struct{})} }

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	close(w.changed)
	w.changed = make(chan struct{})
	return n, err
}

func (w *logWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitLine waits until a log line holds every one of parts, failing the
// test at the deadline.
func (w *logWatch) waitLine(t testing.TB, d time.Duration, parts ...string) {
	t.Helper()
	deadline := time.After(d)
	for {
		w.mu.Lock()
		text, changed := w.buf.String(), w.changed
		w.mu.Unlock()
		for _, line := range strings.Split(text, "\n") {
			if containsAll(line, parts) {
				return
			}
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no log line with %q within %v:\n%s", parts, d, text)
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
