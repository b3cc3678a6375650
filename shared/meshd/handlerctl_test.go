//go:build unix

package meshd_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// replyAPI adds the reply and artifact routes to the fake API and records
// the calls with the credential they carried.
type replyAPI struct {
	*fakeAPI
	mu    sync.Mutex
	calls []string // "POST /v1/tasks/task-1/messages Bearer tok"
}

func (a *replyAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/tasks/") &&
		(strings.HasSuffix(r.URL.Path, "/messages") || strings.HasSuffix(r.URL.Path, "/artifacts")) {
		a.mu.Lock()
		a.calls = append(a.calls, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		a.mu.Unlock()
		task := strings.Split(r.URL.Path, "/")[3]
		writeJSON(w, 200, map[string]string{"task_id": task, "message_id": "m", "artifact_id": "a"})
		return
	}
	a.fakeAPI.ServeHTTP(w, r)
}

func (a *replyAPI) recorded() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

// within runs f and fails the test if it does not return by d (f blocks
// on a FIFO the handler opens: the handler's own signal).
func within(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}

// envMap parses `env` output (values with newlines are not expected here).
func envMap(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// TestTheHandlerRepliesThroughMeshdWithACapabilityThatDiesWithItsRun runs
// two events through a shell handler that hands its environment to the
// test and then waits to be released, so the test can act as the handler
// while it runs and after it ended.
func TestTheHandlerRepliesThroughMeshdWithACapabilityThatDiesWithItsRun(t *testing.T) {
	const secret = "amk_secret_in_meshds_env"
	t.Setenv("MESH_API_KEY", secret)
	t.Setenv("MESH_CONFIG", "/home/bob/.config/meshd/config.toml")
	f := newFixture(t, false)
	api := &replyAPI{fakeAPI: f.api}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	f.api.add(mesh.EventMessage, "alice", "one")
	f.api.add(mesh.EventMessage, "alice", "two")

	fifos := t.TempDir()
	envFIFO, goFIFO := filepath.Join(fifos, "env"), filepath.Join(fifos, "go")
	for _, p := range []string{envFIFO, goFIFO} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := meshd.CommandHandler{
		Command: []string{"sh", "-c", `env > "$ENV_FIFO"; read x < "$GO_FIFO"`},
		Env:     []string{"ENV_FIFO=" + envFIFO, "GO_FIFO=" + goFIFO},
		Timeout: time.Minute, // a failed test does not leave it waiting forever
	}
	r := f.start(h, func(c *meshd.Config) {
		c.Mode = meshd.ModePoll
		c.API = meshclient.New(srv.URL, "amk_test")
	})
	// handlerEnv waits for the next handler run and returns its environment.
	handlerEnv := func(what string) map[string]string {
		var out []byte
		within(t, 30*time.Second, what, func() (err error) { out, err = os.ReadFile(envFIFO); return err })
		return envMap(string(out))
	}
	release := func(what string) {
		within(t, 30*time.Second, what, func() error { return os.WriteFile(goFIFO, []byte("go\n"), 0o600) })
	}
	ctx := context.Background()

	first := handlerEnv("the first handler run")
	t.Run("the handler's environment holds no credential, only the control channel", func(t *testing.T) {
		for k, v := range first {
			if strings.Contains(v, secret) || k == "MESH_API_KEY" || k == "MESH_CONFIG" {
				t.Errorf("the handler sees %s=%s", k, v)
			}
		}
		if first[meshd.EnvHandlerSocket] == "" || len(first[meshd.EnvHandlerToken]) < 32 || first["MESH_TASK_ID"] != "task-1" {
			t.Errorf("control channel %q %q for task %q", first[meshd.EnvHandlerSocket], first[meshd.EnvHandlerToken], first["MESH_TASK_ID"])
		}
		fi, err := os.Stat(first[meshd.EnvHandlerSocket])
		if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
			t.Errorf("socket %v %v, want a socket with mode 0600", fi, err)
		}
	})
	hc, ok := meshd.HandlerClientFromEnv(func(k string) string { return first[k] })
	if !ok {
		t.Fatal("no control channel in the handler's environment")
	}
	t.Run("a reply, a status move and an artifact for the event's task go out with meshd's credential", func(t *testing.T) {
		if _, err := hc.Reply(ctx, "task-1", meshclient.ReplyRequest{Parts: textParts("pong"), MessageID: "reply-ev-1"}); err != nil {
			t.Errorf("reply: %v", err)
		}
		if res, err := hc.UpdateStatus(ctx, "task-1", meshclient.StatusRequest{Status: mesh.TaskWorking}); err != nil || res.Status != mesh.TaskWorking {
			t.Errorf("status: %+v %v", res, err)
		}
		if _, err := hc.AddArtifact(ctx, "task-1", "out.txt", textParts("42"), ""); err != nil {
			t.Errorf("artifact: %v", err)
		}
		want := []string{"POST /v1/tasks/task-1/messages Bearer tok", "POST /v1/tasks/task-1/artifacts Bearer tok"}
		if got := api.recorded(); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("API calls %q, want %q", got, want)
		}
		if calls := f.api.statusCalls(); len(calls) != 1 || calls[0].TaskID != "task-1" || calls[0].Req.Status != mesh.TaskWorking {
			t.Errorf("status calls %+v", calls)
		}
	})
	refusals := []struct {
		name   string
		client *meshd.HandlerClient
		task   string
		status int
		code   string
	}{
		{"another task than the event's is refused for good", hc, "task-2", 403, meshd.CodeTaskNotThisEvent},
		{"a guessed token is refused for good", meshd.NewHandlerClient(first[meshd.EnvHandlerSocket], strings.Repeat("0", 64)), "task-1", 401, meshd.CodeCapabilityInvalid},
		{"an empty token is refused for good", meshd.NewHandlerClient(first[meshd.EnvHandlerSocket], ""), "task-1", 401, meshd.CodeCapabilityInvalid},
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.client.Reply(ctx, c.task, meshclient.ReplyRequest{Parts: textParts("x")})
			var ae *meshclient.APIError
			if !errors.As(err, &ae) || ae.Status != c.status || ae.Code != c.code || !meshclient.IsPermanent(err) {
				t.Errorf("err %v, want %d %s", err, c.status, c.code)
			}
		})
	}
	release("release the first handler run")

	second := handlerEnv("the second handler run")
	t.Run("the capability of an ended run is refused, even while the next run's is live", func(t *testing.T) {
		if second[meshd.EnvHandlerToken] == first[meshd.EnvHandlerToken] || second[meshd.EnvHandlerToken] == "" {
			t.Fatalf("the second run got token %q, the first had %q", second[meshd.EnvHandlerToken], first[meshd.EnvHandlerToken])
		}
		for _, task := range []string{"task-1", "task-2"} {
			_, err := hc.Reply(ctx, task, meshclient.ReplyRequest{Parts: textParts("late")})
			if !meshclient.IsStatus(err, 401) {
				t.Errorf("a reply to %s with the ended run's capability: %v, want 401", task, err)
			}
		}
		if got := api.recorded(); len(got) != 2 {
			t.Errorf("API calls %q: a refused capability reached the API", got)
		}
	})
	release("release the second handler run")
	// Marked after the handler returned: its capability is gone by then.
	f.logs.WaitLine(t, 30*time.Second, `"msg":"event handled"`, `"seq":2`)
	t.Run("the capability is refused once its run ended, while Run still serves", func(t *testing.T) {
		last, _ := meshd.HandlerClientFromEnv(func(k string) string { return second[k] })
		if _, err := last.Reply(ctx, "task-2", meshclient.ReplyRequest{Parts: textParts("late")}); !meshclient.IsStatus(err, 401) {
			t.Errorf("a reply after the run ended: %v, want 401", err)
		}
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	t.Run("after Run ends, the socket is gone and nothing answers", func(t *testing.T) {
		if _, err := os.Stat(second[meshd.EnvHandlerSocket]); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket after Run: %v", err)
		}
		last, _ := meshd.HandlerClientFromEnv(func(k string) string { return second[k] })
		if _, err := last.Reply(ctx, "task-2", meshclient.ReplyRequest{Parts: textParts("late")}); err == nil {
			t.Error("a reply after Run ended succeeded")
		}
	})
	if st := f.state(); st.LastSeq != 2 {
		t.Errorf("state %+v, want both events handled", st)
	}
}

func textParts(s string) []mesh.Part { return []mesh.Part{{Kind: "text", Text: s}} }

// The control channel's request bodies are the mesh API's own, with the
// task id: keep them JSON-compatible with meshclient's requests.
func TestControlRequestsCarryTheTaskAndTheAPIRequest(t *testing.T) {
	b, _ := json.Marshal(meshd.ControlStatus{TaskID: "t1", StatusRequest: meshclient.StatusRequest{Status: "completed", MessageID: "m1"}})
	if string(b) != `{"task_id":"t1","status":"completed","message_id":"m1"}` {
		t.Errorf("status request %s", b)
	}
}
