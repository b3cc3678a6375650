package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentmesh/agentmesh/shared/meshclient"
)

// envSDKPython names the Python of the pinned a2a-sdk venv; infra/a2a-sdk.sh
// sets it (make test runs that script after the Go tests).
const envSDKPython = "MESH_A2A_SDK_PYTHON"

// The official A2A Python client, a2a-sdk 1.3.0, does everything a stock
// client does to a mesh agent, given only its card URL, a client id and a
// secret (pytest suite in testdata/a2a_sdk): completes, gets, lists,
// streams, cancels and subscribes over JSON-RPC and HTTP+JSON with OAuth
// client credentials done by Authlib; sees a task sent while meshd was
// stopped complete once it starts; gets the same answers as a stranger, at
// an unpublished card and at a nonexistent agent; a revoked key gets 401.
func TestA2ASDK(t *testing.T) {
	python := os.Getenv(envSDKPython)
	if python == "" {
		t.Skipf("%s is not set: infra/a2a-sdk.sh installs a2a-sdk and runs this test (make test does)", envSDKPython)
	}
	m := startA2AMesh(t)
	keys := m.st.Agents(t, "dave")
	m.st.Befriend(t, "dave", target)
	daveToken := tokenOf(t, m, keys["dave"])
	revokeKey(t, m, "dave", keys["dave"])

	// The meshd of bob, which the suite stops and starts through a control
	// URL (the offline-target scenario); test infrastructure, not client
	// code.
	var mu sync.Mutex
	host := m.startTarget(t)
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/target/stop":
			host.stop()
		case "/target/start":
			select {
			case <-host.ended:
				host = m.startTarget(t)
			default: // already running
			}
		default:
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(control.Close)

	// A real task of alice's with bob, which the others must not see.
	c := m.goClient(t, caller, target, a2a.TransportProtocolJSONRPC)
	res, err := c.SendMessage(callCtx(t), &a2a.SendMessageRequest{Message: textMessage("tck-complete-task-sdk-seed", "seed")})
	if err != nil {
		t.Fatalf("the seed task: %v", err)
	}
	seed, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("the seed SendMessage answered %T, want a Task", res)
	}

	scenario := map[string]any{
		"target_base": m.base(target), "target_id": target,
		"unpublished_base": m.base(unpublished), "unpublished_id": unpublished,
		"nonexistent_base": m.base(nonexistent), "nonexistent_id": nonexistent,
		"caller":   map[string]string{"client_id": caller, "secret": m.keys[caller]},
		"stranger": map[string]string{"client_id": stranger, "secret": m.keys[stranger]},
		"revoked":  map[string]string{"client_id": "dave", "secret": keys["dave"], "token": daveToken},
		"task_id":  string(seed.ID),
		"control":  control.URL,
	}
	path := filepath.Join(t.TempDir(), "scenario.json")
	b, err := json.Marshal(scenario)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	suite, err := filepath.Abs(filepath.Join("testdata", "a2a_sdk"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--rootdir", suite, suite)
	// No __pycache__ left in the source tree.
	cmd.Env = append(os.Environ(), "MESH_A2A_SCENARIO="+path, "PYTHONDONTWRITEBYTECODE=1")
	cmd.Dir = suite
	out, err := cmd.CombinedOutput()
	t.Logf("pytest (a2a-sdk 1.3.0):\n%s", out)
	if err != nil {
		t.Fatalf("the a2a-sdk suite failed: %v\nmesh log:\n%s", err, m.logs.String())
	}
}

// tokenOf is a mesh token got with key.
func tokenOf(t *testing.T, m *a2aMesh, key string) string {
	t.Helper()
	tok, err := meshclient.New(m.st.URL, key).Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

// revokeKey revokes agent's key (its id is the 12 characters after amk_).
func revokeKey(t *testing.T, m *a2aMesh, agent, key string) {
	t.Helper()
	m.st.Call(t, http.MethodDelete, "/v1/admin/agents/"+agent+"/keys/"+key[len("amk_"):len("amk_")+12], m.st.AdminKey, nil, nil)
}
