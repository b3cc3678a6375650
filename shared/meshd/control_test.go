package meshd_test

import (
	"os"
	"path/filepath"
	"strings"
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
	started := filepath.Join(t.TempDir(), "started")
	// The shell starts a child (sleep) in the handler's process group: the
	// interrupt must reach it too, or the handler's output pipe stays open.
	h := meshd.CommandHandler{Command: []string{"sh", "-c", "touch " + started + "; sleep 60; echo never"}, Timeout: time.Hour}
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
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the handler did not start\n%s", f.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.cancel()
	deadline = time.Now().Add(5 * time.Second)
	for !strings.Contains(f.logs.String(), "stopping: waiting for the handler to finish its event") {
		if time.Now().After(deadline) {
			t.Fatalf("the stop did not say what it waits for:\n%s", f.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
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
