//go:build unix

package meshd_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// TestABatchRunsCapabilityActsOnItsEventsTasksOnly runs one batch of three
// events through a shell handler that hands the test its stdin and
// environment, then waits to be released, so the test acts as the batch.
func TestABatchRunsCapabilityActsOnItsEventsTasksOnly(t *testing.T) {
	f := newFixture(t, false)
	api := &replyAPI{fakeAPI: f.api}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	for _, text := range []string{"one", "two", "three"} {
		f.api.add(mesh.EventMessage, "alice", text)
	}
	fifos := t.TempDir()
	envFIFO, goFIFO := filepath.Join(fifos, "env"), filepath.Join(fifos, "go")
	for _, p := range []string{envFIFO, goFIFO} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := meshd.CommandHandler{
		Command: []string{"sh", "-c", `{ env; echo STDIN_LINES=$(wc -l); } > "$ENV_FIFO"; read x < "$GO_FIFO"`},
		Env:     []string{"ENV_FIFO=" + envFIFO, "GO_FIFO=" + goFIFO},
		Timeout: time.Minute,
	}
	r := f.start(h, func(c *meshd.Config) {
		c.Mode, c.Batch = meshd.ModePoll, 10
		c.API = meshclient.New(srv.URL, "amk_test")
	})
	var out []byte
	within(t, 30*time.Second, "the batch run", func() (err error) { out, err = os.ReadFile(envFIFO); return err })
	env := envMap(string(out))
	if env["MESH_BATCH"] != "3" || strings.TrimSpace(env["STDIN_LINES"]) != "3" {
		t.Fatalf("MESH_BATCH=%q with %q stdin lines, want one batch of 3", env["MESH_BATCH"], env["STDIN_LINES"])
	}
	hc, ok := meshd.HandlerClientFromEnv(func(k string) string { return env[k] })
	if !ok {
		t.Fatal("no control channel in the batch's environment")
	}
	ctx := context.Background()
	cases := []struct {
		name string
		task string
		ok   bool
	}{
		{"the first event's task is served", "task-1", true},
		{"a later event's task is served", "task-3", true},
		{"a task of no event of the batch is refused for good", "task-9", false},
		{"an empty task is refused", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := hc.Reply(ctx, c.task, meshclient.ReplyRequest{Parts: textParts("x")})
			if c.ok && err != nil {
				t.Errorf("reply to %s: %v", c.task, err)
			}
			if !c.ok && (!meshclient.IsStatus(err, 403) || !meshclient.IsPermanent(err)) {
				t.Errorf("reply to %q: %v, want 403 %s", c.task, err, meshd.CodeTaskNotThisEvent)
			}
		})
	}
	within(t, 30*time.Second, "release the batch", func() error { return os.WriteFile(goFIFO, []byte("go\n"), 0o600) })
	waitUntil(t, "the batch is marked", 30*time.Second, func() bool { return f.state().LastSeq == 3 })
	if _, err := hc.Reply(ctx, "task-1", meshclient.ReplyRequest{Parts: textParts("late")}); !meshclient.IsStatus(err, 401) {
		t.Errorf("a reply after the batch ended: %v, want 401", err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
