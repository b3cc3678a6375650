package a2agw

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// restError is the part of an HTTP+JSON error body the tests read.
type restError struct {
	Error struct {
		Code    int    `json:"code"`
		Status  string `json:"status"`
		Details []struct {
			Reason string `json:"reason"`
		} `json:"details"`
	} `json:"error"`
}

func decodeREST(t *testing.T, b []byte) restError {
	t.Helper()
	var e restError
	if err := json.Unmarshal(b, &e); err != nil || len(e.Error.Details) == 0 {
		t.Fatalf("not an HTTP+JSON error: %v: %s", err, b)
	}
	return e
}

// completedTask has alice send bob a task that bob completes at once.
func (f *fixture) completedTask(t *testing.T, msgID string) string {
	t.Helper()
	_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage(msgID, ""), "configuration": map[string]any{"returnImmediately": true}})
	id := sendResult(t, b).ID
	if _, err := f.ts.UpdateStatus(context.Background(), "bob", id, tasks.StatusRequest{Status: mesh.TaskCompleted}); err != nil {
		t.Fatal(err)
	}
	return id
}

// An error a stream meets before its first event is answered as the same
// error of a non-streaming call of the binding: over HTTP+JSON its status
// and JSON body, which is all a2a-sdk's REST client reads; over JSON-RPC a
// plain JSON-RPC error response (application/json, HTTP 200, ErrorInfo),
// which is all the A2A TCK's JSON-RPC client reads (it skips error events
// of a text/event-stream answer).
func TestStreamErrorsBeforeTheFirstEvent(t *testing.T) {
	f := newFixture(t)
	done := f.completedTask(t, "m-done")
	rest := func(target, path, body string, hdr ...string) (int, http.Header, string) {
		st, h, b := f.call(t, http.MethodPost, f.base(target)+restPrefix+path, f.tokens["alice"], "application/json", body, hdr...)
		return st, h, normalize(b)
	}
	send := mustJSON(map[string]any{"message": textMessage("m-ghost", "no-such-task")})
	for _, target := range []string{"carol", "dave", "nobody", "bob"} {
		t.Run("a streamed send to "+target+" about a task the caller cannot see answers as message:send does, with 404", func(t *testing.T) {
			st, h, b := rest(target, "/message:stream", send)
			st0, _, b0 := rest(target, "/message:send", send)
			if st != http.StatusNotFound || st != st0 || b != b0 || h.Get("Content-Type") != "application/json" {
				t.Errorf("stream %d %s %s\nsend %d %s", st, h.Get("Content-Type"), b, st0, b0)
			}
		})
		t.Run("subscribing at "+target+" to a task the caller cannot see answers 404 TASK_NOT_FOUND", func(t *testing.T) {
			st, h, b := rest(target, "/tasks/no-such-task:subscribe", "{}")
			if e := decodeREST(t, []byte(b)); st != http.StatusNotFound || e.Error.Details[0].Reason != "TASK_NOT_FOUND" || h.Get("Content-Type") != "application/json" {
				t.Errorf("%d %s %s", st, h.Get("Content-Type"), b)
			}
		})
	}
	t.Run("subscribing to a completed task answers 400 UNSUPPORTED_OPERATION", func(t *testing.T) {
		st, _, b := rest("bob", "/tasks/"+done+":subscribe", "{}")
		if e := decodeREST(t, []byte(b)); st != http.StatusBadRequest || e.Error.Status != "FAILED_PRECONDITION" || e.Error.Details[0].Reason != "UNSUPPORTED_OPERATION" {
			t.Errorf("%d %s", st, b)
		}
	})
	t.Run("a streamed send without a messageId answers 400 as message:send does", func(t *testing.T) {
		bad := `{"message":{"role":"ROLE_USER","parts":[{"text":"a"}]}}`
		st, _, b := rest("bob", "/message:stream", bad)
		st0, _, b0 := rest("bob", "/message:send", bad)
		if st != http.StatusBadRequest || st != st0 || b != b0 {
			t.Errorf("stream %d %s\nsend %d %s", st, b, st0, b0)
		}
	})
	t.Run("an unsupported A2A-Version answers 400 FAILED_PRECONDITION over HTTP+JSON", func(t *testing.T) {
		st, _, b := rest("bob", "/message:stream", send, "A2A-Version", "0.3")
		if e := decodeREST(t, []byte(b)); st != http.StatusBadRequest || e.Error.Status != "FAILED_PRECONDITION" || e.Error.Details[0].Reason != "VERSION_NOT_SUPPORTED" {
			t.Errorf("%d %s", st, b)
		}
	})

	// JSON-RPC: the raw answer, compared with the non-streaming method's
	// answer to the same mistake where there is one.
	rpc := func(target, method string, params any, hdr ...string) (int, http.Header, string) {
		body := `{"jsonrpc":"2.0","id":"e1","method":"` + method + `","params":` + mustJSON(params) + `}`
		st, h, b := f.call(t, http.MethodPost, f.base(target), f.tokens["alice"], "application/json", body, hdr...)
		return st, h, normalize(b)
	}
	plainError := func(t *testing.T, st int, h http.Header, b string, code int, reason string) {
		t.Helper()
		var r struct {
			ID    any `json:"id"`
			Error *struct {
				Code int `json:"code"`
				Data []struct {
					Reason string `json:"reason"`
				} `json:"data"`
			} `json:"error"`
		}
		if st != http.StatusOK || h.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(b), &r) != nil ||
			r.ID != "e1" || r.Error == nil || r.Error.Code != code || len(r.Error.Data) == 0 || r.Error.Data[0].Reason != reason {
			t.Errorf("%d %s %s, want a plain JSON-RPC error %d %s", st, h.Get("Content-Type"), b, code, reason)
		}
	}
	ghost := map[string]any{"message": textMessage("m-ghost-rpc", "no-such-task")}
	for _, target := range []string{"carol", "dave", "nobody", "bob"} {
		t.Run("JSON-RPC: a streamed send to "+target+" about a task the caller cannot see answers as SendMessage does, as plain JSON", func(t *testing.T) {
			st, h, b := rpc(target, "SendStreamingMessage", ghost)
			plainError(t, st, h, b, -32001, "TASK_NOT_FOUND")
			if _, _, b0 := rpc(target, "SendMessage", ghost); b != b0 {
				t.Errorf("stream %s\nsend %s", b, b0)
			}
		})
		t.Run("JSON-RPC: subscribing at "+target+" to a task the caller cannot see answers TaskNotFound as plain JSON", func(t *testing.T) {
			st, h, b := rpc(target, "SubscribeToTask", map[string]any{"id": "no-such-task"})
			plainError(t, st, h, b, -32001, "TASK_NOT_FOUND")
		})
	}
	t.Run("JSON-RPC: subscribing to a completed task answers UnsupportedOperation as plain JSON", func(t *testing.T) {
		st, h, b := rpc("bob", "SubscribeToTask", map[string]any{"id": done})
		plainError(t, st, h, b, -32004, "UNSUPPORTED_OPERATION")
	})
	t.Run("JSON-RPC: a streamed send without a messageId answers InvalidParams as SendMessage does, as plain JSON", func(t *testing.T) {
		bad := map[string]any{"message": map[string]any{"role": "ROLE_USER", "parts": []any{map[string]any{"text": "a"}}}}
		st, h, b := rpc("bob", "SendStreamingMessage", bad)
		plainError(t, st, h, b, -32602, "INVALID_PARAMS")
		if _, _, b0 := rpc("bob", "SendMessage", bad); b != b0 {
			t.Errorf("stream %s\nsend %s", b, b0)
		}
	})
	for _, method := range []string{"SendStreamingMessage", "SubscribeToTask"} {
		t.Run("JSON-RPC: "+method+" with an unsupported A2A-Version answers VersionNotSupported as plain JSON", func(t *testing.T) {
			st, h, b := rpc("bob", method, map[string]any{"id": done, "message": textMessage("m-v", "")}, "A2A-Version", "0.3")
			plainError(t, st, h, b, -32009, "VERSION_NOT_SUPPORTED")
		})
	}

	// The a2a-go client, as a stock client sees it: over HTTP+JSON only.
	// a2a-go v2.3.1's JSON-RPC client reads a streaming call's plain JSON
	// answer as an empty stream (its limitation: it parses only SSE), so
	// over JSON-RPC the raw answers above are what is asserted.
	restURL, _ := url.Parse(f.base("bob") + restPrefix)
	clients := map[string]a2aclient.Transport{
		"HTTP+JSON": a2aclient.NewRESTTransport(restURL, http.DefaultClient),
	}
	first := func(seq func(func(a2a.Event, error) bool)) error {
		var got error = errors.New("the stream ended without an error")
		seq(func(ev a2a.Event, err error) bool {
			if err == nil {
				got = errors.New("an event before the error")
			} else {
				got = err
			}
			return false
		})
		return got
	}
	for name, c := range clients {
		auth := a2aclient.ServiceParams{"Authorization": {"Bearer " + f.tokens["alice"]}}
		t.Run("a2a-go's "+name+" client gets UnsupportedOperation subscribing to a completed task", func(t *testing.T) {
			err := first(c.SubscribeToTask(context.Background(), auth, &a2a.SubscribeToTaskRequest{ID: a2a.TaskID(done)}))
			if !errors.Is(err, a2a.ErrUnsupportedOperation) {
				t.Errorf("%v", err)
			}
		})
		t.Run("a2a-go's "+name+" client gets TaskNotFound streaming to a task it cannot see", func(t *testing.T) {
			err := first(c.SendStreamingMessage(context.Background(), auth, &a2a.SendMessageRequest{Message: &a2a.Message{
				ID: "m-ghost-2", TaskID: "no-such-task", Role: a2a.MessageRoleUser, Parts: a2a.ContentParts{a2a.NewTextPart("hi")}}}))
			if !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Errorf("%v", err)
			}
		})
		t.Run("a2a-go's "+name+" client gets VersionNotSupported on a stream with an unsupported A2A-Version", func(t *testing.T) {
			p := a2aclient.ServiceParams{"Authorization": auth["Authorization"], "A2A-Version": {"0.3"}}
			err := first(c.SubscribeToTask(context.Background(), p, &a2a.SubscribeToTaskRequest{ID: a2a.TaskID(done)}))
			if !errors.Is(err, a2a.ErrVersionNotSupported) {
				t.Errorf("%v", err)
			}
		})
	}
}

// restKind names an HTTP+JSON stream event as kind does a JSON-RPC one.
func restKind(t *testing.T, d []byte) string {
	t.Helper()
	return kind(t, []byte(`{"jsonrpc":"2.0","id":"s","result":`+string(d)+`}`))
}

func TestRESTStreams(t *testing.T) {
	f := newFixture(t)
	f.g.StreamMax = time.Hour
	var bobSeq int64
	ctx := context.Background()
	text := func(s string) []mesh.Part { return []mesh.Part{{Kind: "text", Text: s}} }
	open := func(t *testing.T, path, body string) (<-chan []byte, string) {
		req, _ := http.NewRequest(http.MethodPost, f.base("bob")+restPrefix+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
		req.Header.Set("Content-Type", "application/json")
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
		return out, resp.Header.Get("Content-Type")
	}

	t.Run("a streamed send over HTTP+JSON gives the task, then the agent's updates in order, and closes at completion", func(t *testing.T) {
		events, ct := open(t, "/message:stream", mustJSON(map[string]any{"message": textMessage("m-rest-stream", "")}))
		if ct != "text/event-stream" {
			t.Fatalf("content type %q", ct)
		}
		if k := restKind(t, <-events); k != "task" {
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
			got = append(got, restKind(t, d))
		}
		want := "statusUpdate:TASK_STATE_WORKING statusUpdate:TASK_STATE_WORKING+message artifactUpdate statusUpdate:TASK_STATE_COMPLETED"
		if strings.Join(got, " ") != want {
			t.Errorf("events %v, want %s", got, want)
		}
	})
	t.Run("a subscription over HTTP+JSON gives the task, then its updates, and closes at input-required", func(t *testing.T) {
		_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-rest-sub", ""), "configuration": map[string]any{"returnImmediately": true}})
		id := sendResult(t, b).ID
		f.agentInbox(t, "bob", &bobSeq)
		events, _ := open(t, "/tasks/"+id+":subscribe", "{}")
		if k := restKind(t, <-events); k != "task" {
			t.Fatalf("first event %s", k)
		}
		if _, err := f.ts.UpdateStatus(ctx, "bob", id, tasks.StatusRequest{Status: mesh.TaskInputRequired, Message: &api.StatusNote{Parts: text("which?")}}); err != nil {
			t.Fatal(err)
		}
		var got []string
		for d := range closing(t, events) {
			got = append(got, restKind(t, d))
		}
		if strings.Join(got, " ") != "statusUpdate:TASK_STATE_INPUT_REQUIRED+message" {
			t.Errorf("events %v", got)
		}
	})
}

// rateState reads alice's GCRA state (the theoretical arrival time, µs).
func (f *fixture) rateState(t *testing.T, agent string) int64 {
	t.Helper()
	var tat int64
	if err := f.db.QueryRow("SELECT tat_us FROM rate_limits WHERE agent_id = ?", agent).Scan(&tat); err != nil {
		t.Fatal(err)
	}
	return tat
}

func (f *fixture) setRate(t *testing.T, agent string, tat int64) {
	t.Helper()
	if _, err := f.db.Exec("UPDATE rate_limits SET tat_us = ? WHERE agent_id = ?", tat, agent); err != nil {
		t.Fatal(err)
	}
}

// One A2A call costs one unit of the caller's budget, as one HTTP API
// request does; a spent budget answers 429 with Retry-After in each
// binding's form, to every caller alike, and writes nothing.
func TestRateLimits(t *testing.T) {
	f := newFixture(t)
	unit := int64(time.Second/time.Microsecond) / identity.RatePerSecond
	_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-seed", ""), "configuration": map[string]any{"returnImmediately": true}})
	seed := sendResult(t, b).ID

	for _, c := range []struct {
		name   string
		method string
		params any
	}{
		{"a read (GetTask)", "GetTask", map[string]any{"id": seed}},
		{"a write (SendMessage)", "SendMessage", map[string]any{"message": textMessage("m-unit", ""), "configuration": map[string]any{"returnImmediately": true}}},
		{"a write (CancelTask)", "CancelTask", map[string]any{"id": seed}},
	} {
		t.Run(c.name+" spends exactly one unit", func(t *testing.T) {
			// A state one second ahead: within the burst, and later than
			// the clock, so the spend adds exactly its cost to it.
			start := time.Now().Add(time.Second).UnixMicro()
			f.setRate(t, "alice", start)
			if _, b := f.rpc(t, "alice", "bob", c.method, c.params); decodeRPC(t, b).Error != nil {
				t.Fatalf("%s", b)
			}
			if got := f.rateState(t, "alice") - start; got != unit {
				t.Errorf("spent %d µs of budget, want one unit (%d)", got, unit)
			}
		})
	}

	before := map[string]int{}
	tables := []string{"tasks", "task_messages", "outbox_events", "idempotency_keys"}
	for _, table := range tables {
		before[table] = f.count(t, table)
	}
	spent := func(t *testing.T, agent string) { f.setRate(t, agent, time.Now().Add(30*time.Second).UnixMicro()) }
	send := func(id string) map[string]any {
		return map[string]any{"message": textMessage(id, ""), "configuration": map[string]any{"returnImmediately": true}}
	}
	for _, c := range []struct {
		name, rpc    string
		params       any
		method, path string
		body         string
	}{
		{name: "JSON-RPC GetTask", rpc: "GetTask", params: map[string]any{"id": seed}},
		{name: "JSON-RPC SendMessage", rpc: "SendMessage", params: send("m-limited-1")},
		{name: "JSON-RPC SendStreamingMessage", rpc: "SendStreamingMessage", params: send("m-limited-2")},
		{name: "JSON-RPC SubscribeToTask", rpc: "SubscribeToTask", params: map[string]any{"id": seed}},
		{name: "HTTP+JSON GET task", method: http.MethodGet, path: "/tasks/" + seed},
		{name: "HTTP+JSON message:send", method: http.MethodPost, path: "/message:send", body: mustJSON(send("m-limited-3"))},
		{name: "HTTP+JSON message:stream", method: http.MethodPost, path: "/message:stream", body: mustJSON(send("m-limited-4"))},
	} {
		for _, target := range []string{"bob", "carol"} {
			t.Run(c.name+" to "+target+" with the budget spent answers 429 with Retry-After in the binding's form", func(t *testing.T) {
				spent(t, "alice")
				var st int
				var h http.Header
				var b []byte
				if c.rpc != "" {
					p, _ := json.Marshal(c.params)
					st, h, b = f.call(t, http.MethodPost, f.base(target), f.tokens["alice"], "application/json",
						`{"jsonrpc":"2.0","id":7,"method":"`+c.rpc+`","params":`+string(p)+`}`)
					if r := decodeRPC(t, b); r.Error == nil || r.Error.Code != -32000 || r.ID != float64(7) {
						t.Errorf("body %s", b)
					}
				} else {
					st, h, b = f.call(t, c.method, f.base(target)+restPrefix+c.path, f.tokens["alice"], "application/json", c.body)
					if e := decodeREST(t, b); e.Error.Code != 429 || e.Error.Status != "RESOURCE_EXHAUSTED" {
						t.Errorf("body %s", b)
					}
				}
				if st != http.StatusTooManyRequests || h.Get("Retry-After") == "" || h.Get("Content-Type") != "application/json" {
					t.Errorf("status %d headers %v", st, h)
				}
			})
		}
	}
	t.Run("the refused writes wrote nothing", func(t *testing.T) {
		for _, table := range tables {
			if n := f.count(t, table); n != before[table] {
				t.Errorf("%s has %d rows, had %d", table, n, before[table])
			}
		}
	})
}

// syncBuffer is a log sink the handler's goroutine writes while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A panic while a call is served (here in the write's transaction, through
// the tasks failpoint) is logged with the Lambda request id and answered
// as an internal error in the binding's form; the handler runs under
// lambdaurl.Wrap, as on AWS, where an escaped panic would end the test
// binary.
func TestPanicsAnswerInternalErrorsAndKeepTheProcess(t *testing.T) {
	f := newFixture(t)
	logs := &syncBuffer{}
	f.g.Log = slog.New(slog.NewJSONHandler(logs, nil))
	f.ts.Failpoint = func(context.Context, string) error { panic("injected failure") }
	h := lambdaurl.Wrap(f.g.Handler())
	invoke := func(t *testing.T, requestID, method, path, body string) (int, string, string) {
		t.Helper()
		resp, err := h(context.Background(), &events.LambdaFunctionURLRequest{
			RawPath: path, Body: body,
			Headers: map[string]string{"authorization": "Bearer " + f.tokens["alice"], "content-type": "application/json"},
			RequestContext: events.LambdaFunctionURLRequestContext{RequestID: requestID, DomainName: "a2a.example",
				HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{Method: method, SourceIP: "192.0.2.1"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Headers["Content-Type"], string(b)
	}
	base := pathPrefix + "bob"
	msg := func(id string) string { return mustJSON(map[string]any{"message": textMessage(id, "")}) }
	rpc := func(method, id string) string {
		return `{"jsonrpc":"2.0","id":7,"method":"` + method + `","params":` + msg(id) + `}`
	}
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"HTTP+JSON message:send answers 500 INTERNAL", http.MethodPost, base + "/rest/message:send", msg("m-p1"), 500, `"status":"INTERNAL"`},
		{"HTTP+JSON message:stream answers 500 INTERNAL before the stream starts", http.MethodPost, base + "/rest/message:stream", msg("m-p2"), 500, `"status":"INTERNAL"`},
		{"JSON-RPC SendMessage answers the internal error", http.MethodPost, base, rpc("SendMessage", "m-p3"), 200, `"code":-32603`},
		{"JSON-RPC SendStreamingMessage ends its stream with the internal error", http.MethodPost, base, rpc("SendStreamingMessage", "m-p4"), 200, `"code":-32603`},
	} {
		t.Run(c.name, func(t *testing.T) {
			rid := "req-" + strings.ReplaceAll(c.name, " ", "-")
			st, _, b := invoke(t, rid, c.method, c.path, c.body)
			if st != c.status || !strings.Contains(b, c.want) || strings.Contains(b, "injected") {
				t.Errorf("status %d body %s", st, b)
			}
			if l := logs.String(); !strings.Contains(l, `"request_id":"`+rid+`"`) || !strings.Contains(l, "injected failure") {
				t.Errorf("the panic is not logged with the request id: %s", l)
			}
		})
	}
	t.Run("the gateway still serves after the panics", func(t *testing.T) {
		f.ts.Failpoint = nil
		if st, _, b := invoke(t, "req-after", http.MethodGet, base+"/rest/tasks", ""); st != http.StatusOK {
			t.Errorf("status %d %s", st, b)
		}
	})
	t.Run("nothing was written", func(t *testing.T) {
		for _, table := range []string{"tasks", "task_messages", "outbox_events"} {
			if n := f.count(t, table); n != 0 {
				t.Errorf("%s has %d rows", table, n)
			}
		}
	})
}

// A message with the taskId of a task the caller received from the target
// (the roles reversed) is about a task the caller did not start with this
// endpoint: TaskNotFound, and nothing is written.
func TestSendMessageToATaskOfTheReversedPairIsTaskNotFound(t *testing.T) {
	f := newFixture(t)
	res, err := f.ts.Send(context.Background(), "bob", tasks.SendRequest{To: "alice", MessageID: "m-bob", Parts: []mesh.Part{{Kind: "text", Text: "hi alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := f.count(t, "task_messages")
	_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-reversed", res.TaskID),
		"configuration": map[string]any{"returnImmediately": true}})
	if r := decodeRPC(t, b); r.Error == nil || r.Error.Code != -32001 {
		t.Errorf("%s", b)
	}
	if n := f.count(t, "task_messages"); n != msgs {
		t.Errorf("%d messages, had %d", n, msgs)
	}
}

func TestListTasksStatusTimestampAfter(t *testing.T) {
	f := newFixture(t)
	send := func(id string) string {
		_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage(id, ""), "configuration": map[string]any{"returnImmediately": true}})
		return sendResult(t, b).ID
	}
	old := send("m-old")
	var cut time.Time
	if err := f.db.QueryRow("SELECT updated_at FROM tasks WHERE task_id = ?", old).Scan(&cut); err != nil {
		t.Fatal(err)
	}
	fresh := send("m-new")
	list := func(t *testing.T, params map[string]any) (ids []string, total int) {
		_, out := f.rpc(t, "alice", "bob", "ListTasks", params)
		var page struct {
			Tasks []wireTask `json:"tasks"`
			Total int        `json:"totalSize"`
		}
		if err := json.Unmarshal(decodeRPC(t, out).Result, &page); err != nil {
			t.Fatalf("%s", out)
		}
		for _, x := range page.Tasks {
			ids = append(ids, x.ID)
		}
		return ids, page.Total
	}
	t.Run("only the tasks changed after statusTimestampAfter are listed and counted", func(t *testing.T) {
		ids, total := list(t, map[string]any{"statusTimestampAfter": cut.UTC().Format(time.RFC3339Nano)})
		if len(ids) != 1 || ids[0] != fresh || total != 1 {
			t.Errorf("ids %v total %d, want [%s] 1", ids, total, fresh)
		}
	})
	t.Run("without it every task is listed", func(t *testing.T) {
		if ids, total := list(t, map[string]any{}); len(ids) != 2 || total != 2 {
			t.Errorf("ids %v total %d", ids, total)
		}
	})
	t.Run("over HTTP+JSON too", func(t *testing.T) {
		st, _, b := f.call(t, http.MethodGet, f.base("bob")+restPrefix+"/tasks?statusTimestampAfter="+url.QueryEscape(cut.UTC().Format(time.RFC3339Nano)), f.tokens["alice"], "", "")
		if st != http.StatusOK || !strings.Contains(string(b), fresh) || strings.Contains(string(b), old) {
			t.Errorf("%d %s", st, b)
		}
	})
}
