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
// of the plan went through: a handler that dies halfway. Each move to
// completed that the mesh accepted is sent on completed, which the test
// waits on instead of polling the task.
type flakyOps struct {
	*meshclient.Client
	mu        sync.Mutex
	failed    bool
	completed chan string // task ids; buffered
}

func (f *flakyOps) UpdateStatus(ctx context.Context, taskID string, req meshclient.StatusRequest) (meshclient.StatusResult, error) {
	f.mu.Lock()
	fail := req.Status == mesh.TaskCompleted && !f.failed
	f.failed = f.failed || fail
	f.mu.Unlock()
	if fail {
		return meshclient.StatusResult{}, errors.New("the handler died before its last step")
	}
	res, err := f.Client.UpdateStatus(ctx, taskID, req)
	if err == nil && req.Status == mesh.TaskCompleted {
		select {
		case f.completed <- taskID:
		default: // the test reads one; never block the handler
		}
	}
	return res, err
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
	ops := &flakyOps{Client: bob, completed: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	ended := make(chan struct{}) // closed when meshd.Run returned runErr
	go func() {
		defer close(ended)
		runErr = meshd.Run(ctx, meshd.Config{API: bob, StateDir: t.TempDir(), Mode: meshd.ModePoll, PollWait: time.Second, Log: slog.New(slog.DiscardHandler),
			Handler: a2aconformance.Handler(ops), HandlerBackoff: 10 * time.Millisecond})
	}()
	t.Cleanup(func() { cancel(); <-ended })

	res, err := alice.Send(context.Background(), meshclient.SendRequest{To: "bob", MessageID: "tck-stream-artifact-file-1",
		Parts: []mesh.Part{{Kind: "text", Text: "go"}}})
	if err != nil {
		t.Fatal(err)
	}
	const wait = 30 * time.Second
	select {
	case id := <-ops.completed:
		if id != res.TaskID {
			t.Fatalf("the handler completed task %s, want %s", id, res.TaskID)
		}
	case <-ended:
		t.Fatalf("meshd stopped before the task completed: %v", runErr)
	case <-time.After(wait):
		t.Fatalf("the handler did not complete task %s within %s", res.TaskID, wait)
	}
	task, err := alice.GetTask(context.Background(), res.TaskID)
	if err != nil || task.Status != mesh.TaskCompleted {
		t.Fatalf("task %s is %q (%v), want completed", res.TaskID, task.Status, err)
	}
	// Only tck-stream-artifact-file's plan adds output.txt: the message id
	// reached the agent unchanged.
	t.Run("the event retried after a failure halfway adds its artifact once", func(t *testing.T) {
		if len(task.Artifacts) != 1 || task.Artifacts[0].Name != a2aconformance.FileName ||
			len(task.Artifacts[0].Parts) != 1 || task.Artifacts[0].Parts[0].Bytes != "dGNr" {
			t.Errorf("artifacts %+v", task.Artifacts)
		}
	})
}
