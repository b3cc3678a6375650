package a2agw

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/tasks/taskstest"
)

// fixture is a gateway on a fresh database with these agents:
//
//	alice  the caller (friend of bob and dave)
//	bob    published card, alice's friend: the target
//	carol  published card, no relation to alice: a stranger
//	dave   alice's friend, card never published
//
// and "nobody", which does not exist.
type fixture struct {
	db     *mysql.DB
	ts     *tasks.Service
	g      *Gateway
	srv    *httptest.Server
	tokens map[string]string
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ids, _, _ := identitytest.NewService(t)
	db := ids.DB
	f := &fixture{db: db, tokens: map[string]string{}}
	for _, a := range []string{"alice", "bob", "carol", "dave"} {
		_, f.tokens[a] = identitytest.NewAgent(t, ids, a)
	}
	taskstest.Friends(t, db, "alice", "bob")
	taskstest.Friends(t, db, "alice", "dave")
	f.ts = (&tasks.Service{DB: db, Clock: mesh.SystemClock, Log: quiet}).WithDefaults()
	cs := &cards.Service{DB: db}
	for _, a := range []string{"bob", "carol"} {
		if _, err := cs.Put(context.Background(), a, api.A2ACardRequest{Published: new(true), Description: a + " helps",
			Skills: []api.A2ASkill{{ID: "help", Name: "Help", Description: "helps", Tags: []string{"t"}}}}); err != nil {
			t.Fatalf("publish %s: %v", a, err)
		}
	}
	f.g = &Gateway{Tasks: f.ts, Identity: ids, Cards: cs, TokenURL: "https://api.example/v1/oauth/token",
		SendWait: 5 * time.Second, StreamMax: 10 * time.Second, Log: quiet}
	f.srv = httptest.NewServer(f.g.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) base(agent string) string { return f.srv.URL + pathPrefix + agent }

// call sends one request and returns its status, headers and body.
func (f *fixture) call(t *testing.T, method, url, token, contentType, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// rpc posts a JSON-RPC request from caller to target's endpoint.
func (f *fixture) rpc(t *testing.T, caller, target, method string, params any) (int, []byte) {
	t.Helper()
	p, _ := json.Marshal(params)
	body := `{"jsonrpc":"2.0","id":7,"method":"` + method + `","params":` + string(p) + `}`
	st, _, b := f.call(t, http.MethodPost, f.base(target), f.tokens[caller], "application/json", body)
	return st, b
}

// rpcResult is a JSON-RPC response.
type rpcResult struct {
	ID     any             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeRPC(t *testing.T, b []byte) rpcResult {
	t.Helper()
	var r rpcResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("not a JSON-RPC response: %v: %s", err, b)
	}
	return r
}

// wireTask is the part of an A2A Task the tests read.
type wireTask struct {
	ID        string `json:"id"`
	ContextID string `json:"contextId"`
	Status    struct {
		State   string `json:"state"`
		Message *struct {
			Role  string            `json:"role"`
			Parts []json.RawMessage `json:"parts"`
		} `json:"message"`
	} `json:"status"`
	History   []json.RawMessage `json:"history"`
	Artifacts []json.RawMessage `json:"artifacts"`
}

// sendResult decodes SendMessage's {"task": {...}} result.
func sendResult(t *testing.T, b []byte) wireTask {
	t.Helper()
	r := decodeRPC(t, b)
	if r.Error != nil {
		t.Fatalf("error %d %s", r.Error.Code, r.Error.Message)
	}
	var out struct {
		Task *wireTask `json:"task"`
	}
	if err := json.Unmarshal(r.Result, &out); err != nil || out.Task == nil {
		t.Fatalf("result is not a task: %s", r.Result)
	}
	return *out.Task
}

func textMessage(id, taskID string) map[string]any {
	m := map[string]any{"messageId": id, "role": "ROLE_USER", "parts": []any{map[string]any{"text": "hello"}}}
	if taskID != "" {
		m["taskId"] = taskID
	}
	return m
}

// agentInbox waits (long poll, no sleeping) for bob's next event after
// *after and returns it.
func (f *fixture) agentInbox(t *testing.T, agent string, after *int64) mesh.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		page, err := f.ts.Inbox.Wait(ctx, agent, *after, 1, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) > 0 {
			*after = page.Events[0].Seq
			return page.Events[0]
		}
	}
	t.Fatalf("no event for %s", agent)
	return mesh.Envelope{}
}

// count returns the rows of table.
func (f *fixture) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := f.db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var volatile = regexp.MustCompile(`"timestamp":"[^"]*"`)

// normalize removes what may differ between two equal answers: error
// timestamps and SSE event ids.
func normalize(b []byte) string {
	s := volatile.ReplaceAllString(string(b), `"timestamp":"T"`)
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "id:") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}
