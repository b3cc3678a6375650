package a2agw

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

func TestCard(t *testing.T) {
	f := newFixture(t)
	cardURL := func(a string) string { return f.base(a) + "/" + cardPath }

	t.Run("a published card is public, cacheable and declares both bindings, streaming and the spec's securityRequirements", func(t *testing.T) {
		st, h, b := f.call(t, http.MethodGet, cardURL("bob"), "", "", "")
		if st != http.StatusOK || h.Get("ETag") == "" || !strings.Contains(h.Get("Cache-Control"), "max-age") || h.Get("Access-Control-Allow-Origin") != "*" {
			t.Fatalf("status %d headers %v", st, h)
		}
		var card map[string]json.RawMessage
		if err := json.Unmarshal(b, &card); err != nil {
			t.Fatal(err)
		}
		want := `[{"schemes":{"bearer":{"list":[]}}},{"schemes":{"oauth2":{"list":[]}}}]`
		if got := string(card["securityRequirements"]); got != want {
			t.Errorf("securityRequirements %s, want %s", got, want)
		}
		var ifaces []a2a.AgentInterface
		_ = json.Unmarshal(card["supportedInterfaces"], &ifaces)
		if len(ifaces) != 2 || ifaces[0].URL != f.base("bob") || ifaces[0].ProtocolBinding != "JSONRPC" ||
			ifaces[1].URL != f.base("bob")+restPrefix || ifaces[1].ProtocolBinding != "HTTP+JSON" || ifaces[1].ProtocolVersion != "1.0" {
			t.Errorf("supportedInterfaces %s", card["supportedInterfaces"])
		}
		if string(card["capabilities"]) != `{"streaming":true,"pushNotifications":false}` || !strings.Contains(string(card["securitySchemes"]), f.g.TokenURL) {
			t.Errorf("capabilities %s schemes %s", card["capabilities"], card["securitySchemes"])
		}
		if string(card["name"]) != `"bob"` {
			t.Errorf("name %s", card["name"])
		}
	})
	t.Run("a client holding the card's ETag gets 304 without the body", func(t *testing.T) {
		_, h, _ := f.call(t, http.MethodGet, cardURL("bob"), "", "", "")
		st, _, b := f.call(t, http.MethodGet, cardURL("bob"), "", "", "", "If-None-Match", h.Get("ETag"))
		if st != http.StatusNotModified || len(b) != 0 {
			t.Errorf("status %d body %q", st, b)
		}
		st, _, _ = f.call(t, http.MethodGet, cardURL("bob"), "", "", "", "If-None-Match", `"other"`)
		if st != http.StatusOK {
			t.Errorf("stale ETag: status %d", st)
		}
	})
	t.Run("an unpublished card and a nonexistent agent answer the same 404", func(t *testing.T) {
		st1, h1, b1 := f.call(t, http.MethodGet, cardURL("dave"), "", "", "")
		st2, h2, b2 := f.call(t, http.MethodGet, cardURL("nobody"), "", "", "")
		if st1 != http.StatusNotFound || st2 != st1 || string(b1) != string(b2) || h1.Get("Content-Type") != h2.Get("Content-Type") {
			t.Errorf("%d %s / %d %s", st1, b1, st2, b2)
		}
		if !json.Valid(b1) {
			t.Errorf("404 body is not JSON: %s", b1)
		}
	})
	t.Run("a2a-go v2.3.1 cannot decode the spec's securityRequirements (its issue 430)", func(t *testing.T) {
		_, _, b := f.call(t, http.MethodGet, cardURL("bob"), "", "", "")
		var card a2a.AgentCard
		if err := json.Unmarshal(b, &card); err == nil {
			t.Log("a2a-go now decodes the spec form: the client-side workaround can go")
		} else if !strings.Contains(err.Error(), "SecuritySchemeScopes") {
			t.Errorf("unexpected decode error: %v", err)
		}
	})
}

func TestAuthentication(t *testing.T) {
	f := newFixture(t)
	if _, err := f.db.Exec("UPDATE api_keys SET revoked_at = UTC_TIMESTAMP(6) WHERE agent_id = 'dave'"); err != nil {
		t.Fatal(err)
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}`
	for _, c := range []struct{ name, token string }{
		{"a call without a token gets 401", ""},
		{"a call with a forged token gets 401", "not-a-jwt"},
		{"a call with a revoked key's token gets 401", f.tokens["dave"]},
	} {
		t.Run(c.name+" in the JSON-RPC form", func(t *testing.T) {
			st, h, b := f.call(t, http.MethodPost, f.base("bob"), c.token, "application/json", body)
			r := decodeRPC(t, b)
			if st != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") || r.Error == nil || r.Error.Code != -31401 {
				t.Errorf("status %d %v %s", st, h, b)
			}
		})
		t.Run(c.name+" in the HTTP+JSON form", func(t *testing.T) {
			st, h, b := f.call(t, http.MethodGet, f.base("bob")+"/rest/tasks/x", c.token, "", "")
			if st != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") || !strings.Contains(string(b), `"UNAUTHENTICATED"`) {
				t.Errorf("status %d %v %s", st, h, b)
			}
		})
	}
}

// The refused callers (a stranger, an unpublished agent, a nonexistent one,
// the agent itself) get, on every method of both bindings, the answer a
// missing task gets.
func TestRefusedCallersLookLikeMissingTasks(t *testing.T) {
	f := newFixture(t)
	type call struct {
		name    string
		rpc     string // JSON-RPC method, or "" for a REST call
		params  any
		method  string // REST
		path    string // REST, below /rest
		body    string // REST
		missing bool   // a real missing task of an admitted caller gives the same
	}
	ghost := map[string]any{"id": "no-such-task"}
	send := map[string]any{"message": textMessage("m-deny", "no-such-task")}
	calls := []call{
		{name: "SendMessage", rpc: "SendMessage", params: send, missing: true},
		{name: "SendStreamingMessage", rpc: "SendStreamingMessage", params: send, missing: true},
		{name: "GetTask", rpc: "GetTask", params: ghost, missing: true},
		{name: "ListTasks", rpc: "ListTasks", params: map[string]any{}},
		{name: "CancelTask", rpc: "CancelTask", params: ghost, missing: true},
		{name: "SubscribeToTask", rpc: "SubscribeToTask", params: ghost, missing: true},
		{name: "GetTaskPushNotificationConfig", rpc: "GetTaskPushNotificationConfig", params: map[string]any{"taskId": "no-such-task", "id": "c"}},
		{name: "CreateTaskPushNotificationConfig", rpc: "CreateTaskPushNotificationConfig", params: map[string]any{"taskId": "no-such-task", "url": "https://x.example/h"}},
		{name: "ListTaskPushNotificationConfigs", rpc: "ListTaskPushNotificationConfigs", params: map[string]any{"taskId": "no-such-task"}},
		{name: "DeleteTaskPushNotificationConfig", rpc: "DeleteTaskPushNotificationConfig", params: map[string]any{"taskId": "no-such-task", "id": "c"}},
		{name: "GetExtendedAgentCard", rpc: "GetExtendedAgentCard", params: map[string]any{}},
		{name: "REST message:send", method: http.MethodPost, path: "/message:send", body: mustJSON(send), missing: true},
		{name: "REST message:stream", method: http.MethodPost, path: "/message:stream", body: mustJSON(send), missing: true},
		{name: "REST GET task", method: http.MethodGet, path: "/tasks/no-such-task", missing: true},
		{name: "REST list tasks", method: http.MethodGet, path: "/tasks"},
		{name: "REST cancel", method: http.MethodPost, path: "/tasks/no-such-task:cancel", body: `{}`, missing: true},
		{name: "REST subscribe", method: http.MethodPost, path: "/tasks/no-such-task:subscribe", body: `{}`, missing: true},
		{name: "REST push configs", method: http.MethodGet, path: "/tasks/no-such-task/pushNotificationConfigs"},
		{name: "REST extended card", method: http.MethodGet, path: "/extendedAgentCard"},
	}
	do := func(t *testing.T, c call, target string) (int, string) {
		if c.rpc != "" {
			st, b := f.rpc(t, "alice", target, c.rpc, c.params)
			return st, normalize(b)
		}
		st, _, b := f.call(t, c.method, f.base(target)+restPrefix+c.path, f.tokens["alice"], "application/json", c.body)
		return st, normalize(b)
	}
	for _, c := range calls {
		t.Run(c.name+" answers a stranger, an unpublished agent, a nonexistent one and the caller itself alike", func(t *testing.T) {
			st0, b0 := do(t, c, "carol")
			if !strings.Contains(b0, "TASK_NOT_FOUND") {
				t.Fatalf("stranger: %d %s", st0, b0)
			}
			for _, target := range []string{"dave", "nobody", "alice"} {
				if st, b := do(t, c, target); st != st0 || b != b0 {
					t.Errorf("%s: %d %s\nstranger: %d %s", target, st, b, st0, b0)
				}
			}
			if c.missing {
				if st, b := do(t, c, "bob"); st != st0 || b != b0 {
					t.Errorf("a missing task of bob: %d %s\nstranger: %d %s", st, b, st0, b0)
				}
			}
		})
	}
	t.Run("nothing was written", func(t *testing.T) {
		for _, table := range []string{"tasks", "task_messages", "outbox_events"} {
			if n := f.count(t, table); n != 0 {
				t.Errorf("%s has %d rows", table, n)
			}
		}
	})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestBadInput(t *testing.T) {
	f := newFixture(t)
	f.g.MaxBodyBytes = 64 << 10
	deep := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"data":` +
		strings.Repeat("[", 60) + strings.Repeat("]", 60) + `}]}}}`
	big := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"` +
		strings.Repeat("a", 70<<10) + `"}]}}}`
	manyParts := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[` +
		strings.TrimSuffix(strings.Repeat(`{"text":"a"},`, 101), ",") + `]}}}`
	for _, c := range []struct {
		name, ct, body string
		hdr            []string
		status, code   int
	}{
		{"malformed JSON is a parse error", "application/json", `{"jsonrpc":"2.0",`, nil, 200, -32700},
		{"a batch is refused as an invalid request", "application/json", `[{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}]`, nil, 200, -32600},
		{"an unknown method is method not found", "application/json", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}`, nil, 200, -32601},
		{"a wrong jsonrpc version is an invalid request", "application/json", `{"jsonrpc":"1.0","id":1,"method":"GetTask","params":{"id":"x"}}`, nil, 200, -32600},
		{"a body over the cap is refused with 413", "application/json", big, nil, 413, -32600},
		{"parts nested too deep are an invalid request", "application/json", deep, nil, 200, -32600},
		{"more than 100 parts are invalid params", "application/json", manyParts, nil, 200, -32602},
		{"a non-JSON content type is 415 with content type not supported, never a parse error", "text/plain", `hello`, nil, 415, -32005},
		{"an unsupported A2A-Version is version not supported", "application/json", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}`, []string{"A2A-Version", "0.3"}, 200, -32009},
		{"a message without a messageId is invalid params", "application/json", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","parts":[{"text":"a"}]}}}`, nil, 200, -32602},
		{"duplicate keys are an invalid request", "application/json", `{"jsonrpc":"2.0","id":1,"id":2,"method":"GetTask","params":{"id":"x"}}`, nil, 200, -32600},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _, b := f.call(t, http.MethodPost, f.base("bob"), f.tokens["alice"], c.ct, c.body, c.hdr...)
			r := decodeRPC(t, b)
			if st != c.status || r.Error == nil || r.Error.Code != c.code ||
				(strings.Contains(c.name, "batch") && r.Error.Message != "batch requests are not supported") {
				t.Errorf("status %d body %.300s", st, b)
			}
		})
	}
	for _, c := range []struct {
		name, ct, path, body string
		status               int
	}{
		{"REST: malformed JSON is 400", "application/json", "/message:send", `{"message":`, 400},
		{"REST: a body over the cap is 413", "application/json", "/message:send", strings.Repeat(" ", 70<<10) + "{}", 413},
		{"REST: a non-JSON content type is 415", "text/plain", "/message:send", "hello", 415},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _, b := f.call(t, http.MethodPost, f.base("bob")+restPrefix+c.path, f.tokens["alice"], c.ct, c.body)
			var e struct {
				Error struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if st != c.status || json.Unmarshal(b, &e) != nil || e.Error.Code != c.status {
				t.Errorf("status %d body %.300s", st, b)
			}
		})
	}
	t.Run("nothing was written", func(t *testing.T) {
		for _, table := range []string{"tasks", "task_messages", "outbox_events", "idempotency_keys"} {
			if n := f.count(t, table); n != 0 {
				t.Errorf("%s has %d rows", table, n)
			}
		}
	})
}

func TestSendMessage(t *testing.T) {
	f := newFixture(t)
	var bobSeq int64

	t.Run("returnImmediately answers the submitted task at once, and a retry with the same messageId gives the same task", func(t *testing.T) {
		params := map[string]any{"message": textMessage("m-once", ""), "configuration": map[string]any{"returnImmediately": true}}
		_, b := f.rpc(t, "alice", "bob", "SendMessage", params)
		first := sendResult(t, b)
		_, b = f.rpc(t, "alice", "bob", "SendMessage", params)
		again := sendResult(t, b)
		if first.ID == "" || again.ID != first.ID || first.Status.State != "TASK_STATE_SUBMITTED" {
			t.Errorf("first %+v again %+v", first, again)
		}
		ev := f.agentInbox(t, "bob", &bobSeq)
		if ev.MessageID != "m-once" || ev.TaskID != first.ID {
			t.Errorf("bob got %+v", ev)
		}
		if n := f.count(t, "task_messages"); n != 1 {
			t.Errorf("%d messages stored, want 1", n)
		}
		if n := f.count(t, "outbox_events WHERE recipient = 'bob'"); n != 1 {
			t.Errorf("%d events for bob, want 1", n)
		}
	})

	// blocking sends alice's message in the background and lets the test
	// act as bob once bob's inbox shows it.
	blocking := func(t *testing.T, msgID string) (<-chan wireTask, string) {
		done := make(chan wireTask, 1)
		go func() {
			_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage(msgID, "")})
			done <- sendResult(t, b)
		}()
		ev := f.agentInbox(t, "bob", &bobSeq)
		if ev.MessageID != msgID {
			t.Fatalf("bob got %+v", ev)
		}
		return done, ev.TaskID
	}
	t.Run("a blocking send ends when the agent completes the task, with its answer as the status message", func(t *testing.T) {
		done, id := blocking(t, "m-complete")
		if _, err := f.ts.UpdateStatus(context.Background(), "bob", id, tasks.StatusRequest{Status: mesh.TaskCompleted,
			Message: &api.StatusNote{Parts: []mesh.Part{{Kind: "text", Text: "done"}}}}); err != nil {
			t.Fatal(err)
		}
		got := <-done
		if got.ID != id || got.Status.State != "TASK_STATE_COMPLETED" || got.Status.Message == nil || got.Status.Message.Role != "ROLE_AGENT" {
			t.Errorf("%+v", got)
		}
	})
	t.Run("a blocking send ends when the agent asks for input", func(t *testing.T) {
		done, id := blocking(t, "m-input")
		if _, err := f.ts.UpdateStatus(context.Background(), "bob", id, tasks.StatusRequest{Status: mesh.TaskInputRequired}); err != nil {
			t.Fatal(err)
		}
		got := <-done
		if got.Status.State != "TASK_STATE_INPUT_REQUIRED" {
			t.Errorf("%+v", got)
		}
		t.Run("and the caller's answer with the taskId resumes it", func(t *testing.T) {
			_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-answer", id),
				"configuration": map[string]any{"returnImmediately": true}})
			if got := sendResult(t, b); got.Status.State != "TASK_STATE_WORKING" {
				t.Errorf("%+v", got)
			}
			ev := f.agentInbox(t, "bob", &bobSeq)
			if ev.Type != mesh.EventStatus || ev.MessageID != "m-answer" {
				t.Errorf("bob got %+v", ev)
			}
		})
	})
	t.Run("a blocking send answers the task as it stands once SendWait passes", func(t *testing.T) {
		f.g.SendWait = 300 * time.Millisecond
		defer func() { f.g.SendWait = 5 * time.Second }()
		start := time.Now()
		_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-slow", "")})
		got := sendResult(t, b)
		if got.Status.State != "TASK_STATE_SUBMITTED" || time.Since(start) > 4*time.Second {
			t.Errorf("%+v after %v", got, time.Since(start))
		}
		f.agentInbox(t, "bob", &bobSeq)
	})
}

func TestCancelAndList(t *testing.T) {
	f := newFixture(t)
	send := func(id string) string {
		_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage(id, ""), "configuration": map[string]any{"returnImmediately": true}})
		return sendResult(t, b).ID
	}
	a, b := send("m-a"), send("m-b")
	t.Run("cancel moves a live task to canceled", func(t *testing.T) {
		_, out := f.rpc(t, "alice", "bob", "CancelTask", map[string]any{"id": a})
		r := decodeRPC(t, out)
		var task wireTask
		if r.Error != nil || json.Unmarshal(r.Result, &task) != nil || task.Status.State != "TASK_STATE_CANCELED" {
			t.Errorf("%s", out)
		}
	})
	t.Run("cancel of a terminal task is TaskNotCancelable in both bindings", func(t *testing.T) {
		_, out := f.rpc(t, "alice", "bob", "CancelTask", map[string]any{"id": a})
		if r := decodeRPC(t, out); r.Error == nil || r.Error.Code != -32002 {
			t.Errorf("%s", out)
		}
		st, _, body := f.call(t, http.MethodPost, f.base("bob")+"/rest/tasks/"+a+":cancel", f.tokens["alice"], "application/json", "{}")
		if st != http.StatusBadRequest || !strings.Contains(string(body), "TASK_NOT_CANCELABLE") {
			t.Errorf("%d %s", st, body)
		}
	})
	t.Run("list pages through the caller's tasks with this agent", func(t *testing.T) {
		_, out := f.rpc(t, "alice", "bob", "ListTasks", map[string]any{"pageSize": 1})
		var page struct {
			Tasks     []wireTask `json:"tasks"`
			Total     int        `json:"totalSize"`
			NextToken string     `json:"nextPageToken"`
		}
		if err := json.Unmarshal(decodeRPC(t, out).Result, &page); err != nil || len(page.Tasks) != 1 || page.Total != 2 || page.NextToken == "" {
			t.Fatalf("%s", out)
		}
		_, out = f.rpc(t, "alice", "bob", "ListTasks", map[string]any{"pageSize": 1, "pageToken": page.NextToken})
		var second struct {
			Tasks     []wireTask `json:"tasks"`
			NextToken string     `json:"nextPageToken"`
		}
		if err := json.Unmarshal(decodeRPC(t, out).Result, &second); err != nil || len(second.Tasks) != 1 || second.NextToken != "" ||
			second.Tasks[0].ID == page.Tasks[0].ID || (second.Tasks[0].ID != a && second.Tasks[0].ID != b) {
			t.Errorf("%s", out)
		}
	})
	t.Run("the same message again after the caller's cancel opens a new task (the caller had the answer: not a retry)", func(t *testing.T) {
		if again := send("m-a"); again == a || again == "" {
			t.Errorf("the message id of the canceled task answered task %q, want a new one", again)
		}
	})
	t.Run("the same message again while its task is live is a retry", func(t *testing.T) {
		if again := send("m-b"); again != b {
			t.Errorf("a retry answered task %q, want %q", again, b)
		}
	})
	t.Run("the task is not bob's to see as a task of his own endpoint", func(t *testing.T) {
		// bob is a stranger-free friend of alice but did not publish... alice
		// did not publish either: bob calling alice's endpoint is refused.
		_, out := f.rpc(t, "bob", "alice", "GetTask", map[string]any{"id": a})
		if r := decodeRPC(t, out); r.Error == nil || r.Error.Code != -32001 {
			t.Errorf("%s", out)
		}
	})
}

// stream opens an SSE call and returns a channel of its data payloads
// (closed when the stream ends).
func (f *fixture) stream(t *testing.T, target, method string, params any) <-chan []byte {
	t.Helper()
	p, _ := json.Marshal(params)
	req, _ := http.NewRequest(http.MethodPost, f.base(target), strings.NewReader(`{"jsonrpc":"2.0","id":"s","method":"`+method+`","params":`+string(p)+`}`))
	req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
	req.Header.Set("Content-Type", "application/json")
	return sseData(t, req)
}

// sseData sends req and returns a channel of the data payloads of its SSE
// answer (closed when it ends).
func sseData(t *testing.T, req *http.Request) <-chan []byte {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan []byte, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			if d, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
				out <- bytes.Clone(d)
			}
		}
	}()
	return out
}

// kind names a stream event: "task", "statusUpdate:<state>" or
// "artifactUpdate", or the JSON-RPC error code.
func kind(t *testing.T, d []byte) string {
	t.Helper()
	r := decodeRPC(t, d)
	if r.Error != nil {
		return "error:" + itoa(r.Error.Code)
	}
	var ev map[string]json.RawMessage
	if err := json.Unmarshal(r.Result, &ev); err != nil {
		t.Fatal(err)
	}
	for k, v := range ev {
		if k == "statusUpdate" {
			var su struct {
				Status struct {
					State   string          `json:"state"`
					Message json.RawMessage `json:"message"`
				} `json:"status"`
			}
			_ = json.Unmarshal(v, &su)
			if len(su.Status.Message) > 0 {
				return k + ":" + su.Status.State + "+message"
			}
			return k + ":" + su.Status.State
		}
		return k
	}
	return "?"
}

// closing passes s on and fails the test if s is still open 10 s after
// its last event: a stream must close at the state that ends it, long
// before StreamMax (an hour here).
func closing(t *testing.T, s <-chan []byte) <-chan []byte {
	out := make(chan []byte)
	go func() {
		defer close(out)
		for {
			select {
			case d, ok := <-s:
				if !ok {
					return
				}
				out <- d
			case <-time.After(10 * time.Second):
				t.Error("the stream did not close")
				return
			}
		}
	}()
	return out
}

func TestStreams(t *testing.T) {
	f := newFixture(t)
	f.g.StreamMax = time.Hour
	var bobSeq int64
	ctx := context.Background()
	text := func(s string) []mesh.Part { return []mesh.Part{{Kind: "text", Text: s}} }

	t.Run("a streamed send gives the task, then the agent's updates in order, replies inside status updates, and closes at completion", func(t *testing.T) {
		events := f.stream(t, "bob", "SendStreamingMessage", map[string]any{"message": textMessage("m-stream", "")})
		if k := kind(t, <-events); k != "task" {
			t.Fatalf("first event %s", k)
		}
		id := f.agentInbox(t, "bob", &bobSeq).TaskID
		if _, err := f.ts.UpdateStatus(ctx, "bob", id, tasks.StatusRequest{Status: mesh.TaskWorking}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ts.Reply(ctx, "bob", id, tasks.ReplyRequest{Parts: text("thinking")}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ts.AddArtifact(ctx, "bob", id, tasks.ArtifactRequest{Name: "out", Parts: text("result")}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ts.UpdateStatus(ctx, "bob", id, tasks.StatusRequest{Status: mesh.TaskCompleted}); err != nil {
			t.Fatal(err)
		}
		var got []string
		for d := range closing(t, events) {
			got = append(got, kind(t, d))
		}
		want := []string{"statusUpdate:TASK_STATE_WORKING", "statusUpdate:TASK_STATE_WORKING+message", "artifactUpdate", "statusUpdate:TASK_STATE_COMPLETED"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("events %v, want %v", got, want)
		}
		t.Run("and subscribing to the completed task is UnsupportedOperation", func(t *testing.T) {
			_, ev := f.rpc(t, "alice", "bob", "SubscribeToTask", map[string]any{"id": id})
			if r := decodeRPC(t, ev); r.Error == nil || r.Error.Code != -32004 {
				t.Errorf("%s", ev)
			}
		})
	})
	t.Run("concurrent subscribers of one task get the same events and both close at input-required", func(t *testing.T) {
		_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-sub", ""), "configuration": map[string]any{"returnImmediately": true}})
		id := sendResult(t, b).ID
		f.agentInbox(t, "bob", &bobSeq)
		s1 := f.stream(t, "bob", "SubscribeToTask", map[string]any{"id": id})
		s2 := f.stream(t, "bob", "SubscribeToTask", map[string]any{"id": id})
		// Each stream's first event (the task) is read after it noted the
		// inbox position: from here on both see everything.
		if k1, k2 := kind(t, <-s1), kind(t, <-s2); k1 != "task" || k2 != "task" {
			t.Fatalf("first events %s %s", k1, k2)
		}
		if _, err := f.ts.UpdateStatus(ctx, "bob", id, tasks.StatusRequest{Status: mesh.TaskWorking}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ts.UpdateStatus(ctx, "bob", id, tasks.StatusRequest{Status: mesh.TaskInputRequired,
			Message: &api.StatusNote{Parts: text("which one?")}}); err != nil {
			t.Fatal(err)
		}
		var got [2][]string
		for i, s := range []<-chan []byte{s1, s2} {
			for d := range closing(t, s) {
				got[i] = append(got[i], kind(t, d))
			}
		}
		want := "statusUpdate:TASK_STATE_WORKING statusUpdate:TASK_STATE_INPUT_REQUIRED+message"
		if strings.Join(got[0], " ") != want || strings.Join(got[1], " ") != want {
			t.Errorf("streams %v / %v, want %s", got[0], got[1], want)
		}
	})
}

func TestAStreamEndsAtStreamMaxAndTheClientResumesWithSubscribeToTask(t *testing.T) {
	f := newFixture(t)
	f.g.StreamMax = 300 * time.Millisecond
	_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-quiet", ""), "configuration": map[string]any{"returnImmediately": true}})
	id := sendResult(t, b).ID
	for round := 1; round <= 2; round++ {
		// Nothing moves the task: each stream gives the task, then ends at
		// its bound, long before this client gives up on it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.base("bob"),
			strings.NewReader(`{"jsonrpc":"2.0","id":"s","method":"SubscribeToTask","params":{"id":"`+id+`"}}`))
		req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
		req.Header.Set("Content-Type", "application/json")
		var got []string
		for d := range sseData(t, req) {
			got = append(got, kind(t, d))
		}
		if ctx.Err() != nil {
			t.Errorf("stream %d was still open after 10 s; StreamMax is 300 ms", round)
		}
		cancel()
		if strings.Join(got, " ") != "task" {
			t.Errorf("stream %d: events %v, want the task alone", round, got)
		}
	}
}

func TestAWaitingCallTakesNoneOfTheCallersLongPollSlots(t *testing.T) {
	f := newFixture(t)
	f.g.SendWait = 2 * time.Second
	// bob never answers: the blocking send waits its whole SendWait,
	// following alice's inbox, while the test looks at her slots.
	done := make(chan []byte)
	go func() {
		_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-slots", "")})
		done <- b
	}()
	for looks := 0; ; looks++ {
		var held int
		if err := f.db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM inbox_polls WHERE agent_id = 'alice'").Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held != 0 {
			t.Fatalf("alice holds %d long-poll slots while her A2A call waits: her meshd could not poll", held)
		}
		select {
		case b := <-done:
			if got := sendResult(t, b); got.Status.State != "TASK_STATE_SUBMITTED" || looks == 0 {
				t.Errorf("%+v after %d looks", got, looks)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}
