//go:build unix

package meshd_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// A stop while the handler runs says what it waits for; Interrupt (the
// second Ctrl-C) then kills the handler's process group and the event is
// not marked, so it comes again at the next start.
func TestAStopSaysWhatItWaitsForAndASecondInterruptKillsTheHandler(t *testing.T) {
	f := newFixture(t, false)
	f.api.add(mesh.EventMessage, "alice", "slow")
	// The handler says it started through a FIFO: opening it blocks until
	// the test reads.
	started := filepath.Join(t.TempDir(), "started")
	if err := syscall.Mkfifo(started, 0o600); err != nil {
		t.Fatal(err)
	}
	// The shell starts a child (sleep) in the handler's process group: the
	// interrupt must reach it too, or the handler's output pipe stays open.
	h := meshd.CommandHandler{Command: []string{"sh", "-c", "echo started > " + started + "; sleep 60; echo never"}, Timeout: time.Hour}
	interrupt := make(chan struct{})
	var modes []string
	r := f.start(h, func(c *meshd.Config) {
		c.Mode = meshd.ModePoll
		c.Interrupt = interrupt
		// One attempt: a killed handler must not count as its event's last
		// failure (parked, its task failed).
		c.HandlerAttempts = 1
		c.OnMode = func(agent, mode string) { modes = append(modes, agent+":"+mode) }
	})
	within(t, 20*time.Second, "the handler starts", func() error { _, err := os.ReadFile(started); return err })
	r.cancel()
	f.logs.WaitLine(t, 10*time.Second, "stopping: waiting for the handler to finish its event")
	if !strings.Contains(f.logs.String(), `"seq":1`) {
		t.Errorf("the stop message does not name the seq:\n%s", f.logs.String())
	}
	select {
	case err := <-r.done:
		t.Fatalf("Run returned (%v) while the handler ran: the first stop must wait for it", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(interrupt)
	select {
	case err := <-r.done:
		r.done <- err
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not return within 10 s of the interrupt\n%s", f.logs.String())
	}
	st, err := meshd.LoadState(f.dir, "bob")
	if err != nil || st.LastSeq != 0 {
		t.Errorf("state %+v %v: the interrupted event must not be marked handled", st, err)
	}
	if len(modes) == 0 || modes[0] != "bob:poll" {
		t.Errorf("OnMode calls %v, want bob:poll first", modes)
	}
}
