package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
// secret (pytest suite in testdata/a2a_sdk, then the README's snippet):
// completes, gets, lists, streams, cancels and subscribes over JSON-RPC and
// HTTP+JSON with OAuth client credentials done by Authlib; sees a task sent while meshd was
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
	t.Run("the README's snippet completes a task as written and closes its clients", func(t *testing.T) {
		mu.Lock()
		select {
		case <-host.ended: // the suite left bob's meshd stopped
			host = m.startTarget(t)
		default:
		}
		mu.Unlock()
		runReadmeSnippet(t, python, m)
	})
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

// runReadmeSnippet runs the a2a-sdk snippet of the README's "Reach a mesh
// agent from any A2A client" as written (only its base URL and secret
// replaced by m's) with python: it must complete a task with bob over
// OAuth client credentials and exit cleanly, so a snippet that drifts from
// a2a-sdk 1.3.0 or leaves a client open fails. Bob's meshd must run.
func runReadmeSnippet(t *testing.T, python string, m *a2aMesh) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Reach a mesh agent from any A2A client\n")
	_, code, ok2 := strings.Cut(section, "\n```python\n")
	code, _, ok3 := strings.Cut(code, "\n```\n")
	const base, secret = `"http://127.0.0.1:8080/a2a/agents/bob"`, `"amk_..."`
	if !ok || !ok2 || !ok3 || strings.Count(code, base) != 1 || strings.Count(code, secret) != 1 {
		t.Fatalf("no python snippet with the base %s and the secret %s in the README's section", base, secret)
	}
	code = strings.Replace(code, base, strconv.Quote(m.base(target)), 1)
	code = strings.Replace(code, secret, strconv.Quote(m.keys[caller]), 1)
	path := filepath.Join(t.TempDir(), "snippet.py")
	if err := os.WriteFile(path, []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// -W error::ResourceWarning: a client left open fails the run.
	cmd := exec.CommandContext(ctx, python, "-X", "dev", "-W", "error::ResourceWarning", path)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "TASK_STATE_COMPLETED") || !strings.Contains(string(out), "hello bob") {
		t.Fatalf("the README snippet: %v\n%s\nmesh log:\n%s", err, out, m.logs.String())
	}
	if strings.Contains(string(out), "ResourceWarning") || strings.Contains(string(out), "Unclosed") {
		t.Fatalf("the README snippet leaves a resource open:\n%s", out)
	}
}
