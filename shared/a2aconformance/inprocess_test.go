package a2aconformance_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/a2aconformance"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// flakyOps fails the first move to completed once, after the earlier steps
// of the plan went through: a handler that dies halfway.
type flakyOps struct {
	*meshclient.Client
	mu     sync.Mutex
	failed bool
}

func (f *flakyOps) UpdateStatus(ctx context.Context, taskID string, req meshclient.StatusRequest) (meshclient.StatusResult, error) {
	f.mu.Lock()
	fail := req.Status == mesh.TaskCompleted && !f.failed
	f.failed = f.failed || fail
	f.mu.Unlock()
	if fail {
		return meshclient.StatusResult{}, errors.New("the handler died before its last step")
	}
	return f.Client.UpdateStatus(ctx, taskID, req)
}

// TestTheAgentEmbeddedInMeshdOverTheAPIClient runs the agent as an
// in-process meshd.Handler over a *meshclient.Client against the real
// mesh (HTTP routes, MariaDB).
func TestTheAgentEmbeddedInMeshdOverTheAPIClient(t *testing.T) {
	st := localstacktest.Start(t, localstacktest.Options{})
	keys := st.Agents(t, "alice", "bob")
	st.Befriend(t, "alice", "bob")
	bob := meshclient.New(st.URL, keys["bob"])
	alice := meshclient.New(st.URL, keys["alice"])
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- meshd.Run(ctx, meshd.Config{API: bob, StateDir: t.TempDir(), Mode: meshd.ModePoll, PollWait: time.Second, Log: slog.New(slog.DiscardHandler),
			Handler: a2aconformance.Handler(&flakyOps{Client: bob}), HandlerBackoff: 10 * time.Millisecond})
	}()
	t.Cleanup(func() { cancel(); <-done })

	settled := func(t *testing.T, taskID, state string) meshclient.TaskDetail {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			task, err := alice.GetTask(context.Background(), taskID)
			if err == nil && task.Status == state {
				return task
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s is %q (%v), not %s within 30 s", taskID, task.Status, err, state)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	res, err := alice.Send(context.Background(), meshclient.SendRequest{To: "bob", MessageID: "tck-stream-artifact-file-1",
		Parts: []mesh.Part{{Kind: "text", Text: "go"}}})
	if err != nil {
		t.Fatal(err)
	}
	task := settled(t, res.TaskID, mesh.TaskCompleted)
	// Only tck-stream-artifact-file's plan adds output.txt: the message id
	// reached the agent unchanged.
	t.Run("the event retried after a failure halfway adds its artifact once", func(t *testing.T) {
		if len(task.Artifacts) != 1 || task.Artifacts[0].Name != a2aconformance.FileName ||
			len(task.Artifacts[0].Parts) != 1 || task.Artifacts[0].Parts[0].Bytes != "dGNr" {
			t.Errorf("artifacts %+v", task.Artifacts)
		}
	})
}
