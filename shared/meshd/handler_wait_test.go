//go:build unix

package meshd

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

// A handler that exits but leaves a process holding its stderr does not
// hold the next event: the leftover gets handlerWaitDelay to close it, then
// the run fails (transient, exec.ErrWaitDelay as os/exec reports it).
func TestALeftoverHoldingStderrIsWaitedForOnlyTheWaitDelay(t *testing.T) {
	defer func(d time.Duration) { handlerWaitDelay = d }(handlerWaitDelay)
	handlerWaitDelay = 200 * time.Millisecond
	pgidFile := filepath.Join(t.TempDir(), "pgid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pgidFile); err == nil {
			if pgid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(-pgid, syscall.SIGKILL) // the leftover sleep
			}
		}
	})
	h := CommandHandler{Command: []string{"sh", "-c", `echo $$ > "$PGID_FILE"; sleep 60 & exit 0`},
		Env: []string{"PGID_FILE=" + pgidFile}, Timeout: 30 * time.Second}
	start := time.Now()
	err := h.Handle(context.Background(), mesh.Envelope{Seq: 1, EventID: "ev-1"})
	if !errors.Is(err, exec.ErrWaitDelay) || IsPermanent(err) {
		t.Errorf("err = %v, want a transient %v", err, exec.ErrWaitDelay)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v: the run waited for the leftover", took)
	}
}

// A handler run adds no goroutine to the one that runs it (os/exec adds
// one per non-file stdin, stdout or stderr, and one to watch a context):
// each would be a wake-up to wait for at every event. (A run longer than
// stderrQuiet gets one to copy its stderr: not this one.)
func TestAHandlerRunAddsNoGoroutine(t *testing.T) {
	defer func(d time.Duration) { stderrQuiet = d }(stderrQuiet)
	stderrQuiet = time.Hour
	dir := t.TempDir()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")
	for _, p := range []string{started, release} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := CommandHandler{Command: []string{"sh", "-c", `echo > "$STARTED"; read x < "$RELEASE"; echo 'on stderr' >&2`},
		Env: []string{"STARTED=" + started, "RELEASE=" + release}, Timeout: 30 * time.Second}
	before := runtime.NumGoroutine()
	done := make(chan error, 1)
	go func() { done <- h.Handle(context.Background(), mesh.Envelope{Seq: 1, EventID: "ev-1"}) }()
	// The command runs once it wrote to started.
	b, err := os.ReadFile(started)
	if err != nil || len(b) == 0 {
		t.Fatalf("the command did not start: %v", err)
	}
	during := runtime.NumGoroutine()
	if err := os.WriteFile(release, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// At most: a goroutine of an earlier test may have ended meanwhile.
	if during > before+1 {
		t.Errorf("%d goroutines while the command ran, want at most %d (the caller's alone)", during, before+1)
	}
}

// Under Config.Interrupt (always set by cmd/meshd) a handler's context
// adds no goroutine either: it follows Run's interrupt context, which one
// watcher per Run cancels. Cancelling that context still cancels the
// handler's, and a finished handler's context is released from it.
func TestAHandlersContextUnderInterruptAddsNoGoroutine(t *testing.T) {
	ictx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	r := &runner{cfg: Config{Interrupt: make(chan struct{})}, interrupt: ictx}

	before := runtime.NumGoroutine()
	hctx, done := r.handlerContext(context.Background())
	during := runtime.NumGoroutine()
	done()
	if during > before {
		t.Errorf("%d goroutines with a handler's context open, want at most %d", during, before)
	}
	if hctx.Err() == nil {
		t.Error("the handler's context is not canceled once its handler is done")
	}

	hctx, done = r.handlerContext(context.Background())
	defer done()
	interrupt() // what Run's watcher does when Config.Interrupt closes
	select {
	case <-hctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the interrupt did not cancel the running handler's context")
	}
}
