package a2agw

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// Findings of the A2A TCK, each as the behaviour it asks for.

// historyOf decodes a JSON-RPC Task result (GetTask) and counts its history.
func historyOf(t *testing.T, b []byte) int {
	t.Helper()
	r := decodeRPC(t, b)
	var task wireTask
	if r.Error != nil || json.Unmarshal(r.Result, &task) != nil || task.ID == "" {
		t.Fatalf("not a task: %s", b)
	}
	return len(task.History)
}

// historyLength applies over both bindings, under its JSON name and its
// proto name (history_length, which the TCK's JSON-RPC client sends and
// proto3 JSON parsers accept), to GetTask, SendMessage and ListTasks.
func TestHistoryLength(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	text := []mesh.Part{{Kind: "text", Text: "x"}}
	_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-h1", ""), "configuration": map[string]any{"returnImmediately": true}})
	id := sendResult(t, b).ID
	if _, err := f.ts.Reply(ctx, "bob", id, tasks.ReplyRequest{Parts: text}); err != nil {
		t.Fatal(err)
	}
	_, b = f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-h2", id), "configuration": map[string]any{"returnImmediately": true}})
	sendResult(t, b)
	if _, err := f.ts.Reply(ctx, "bob", id, tasks.ReplyRequest{Parts: text}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name   string
		params map[string]any
		want   int
	}{
		{"GetTask without historyLength gives the whole short history", map[string]any{"id": id}, 4},
		{"GetTask with historyLength 1 gives one message", map[string]any{"id": id, "historyLength": 1}, 1},
		{"GetTask with history_length 1 (the proto name) gives one message", map[string]any{"id": id, "history_length": 1}, 1},
		{"GetTask with history_length 0 gives none", map[string]any{"id": id, "history_length": 0}, 0},
	} {
		t.Run("JSON-RPC: "+c.name, func(t *testing.T) {
			_, b := f.rpc(t, "alice", "bob", "GetTask", c.params)
			if n := historyOf(t, b); n != c.want {
				t.Errorf("%d messages, want %d: %s", n, c.want, b)
			}
		})
	}
	t.Run("JSON-RPC: a field under both its names is invalid params", func(t *testing.T) {
		_, b := f.rpc(t, "alice", "bob", "GetTask", map[string]any{"id": id, "history_length": 1, "historyLength": 2})
		if r := decodeRPC(t, b); r.Error == nil || r.Error.Code != -32602 {
			t.Errorf("%s", b)
		}
	})
	t.Run("HTTP+JSON: GetTask with historyLength 1 gives one message", func(t *testing.T) {
		st, _, b := f.call(t, http.MethodGet, f.base("bob")+restPrefix+"/tasks/"+id+"?historyLength=1", f.tokens["alice"], "", "")
		var task wireTask
		if st != http.StatusOK || json.Unmarshal(b, &task) != nil || len(task.History) != 1 {
			t.Errorf("%d %s", st, b)
		}
	})
	t.Run("SendMessage with configuration.history_length 0 answers the task without history, over both bindings", func(t *testing.T) {
		params := map[string]any{"message": textMessage("m-h3", id), "configuration": map[string]any{"return_immediately": true, "history_length": 0}}
		_, b := f.rpc(t, "alice", "bob", "SendMessage", params)
		if got := sendResult(t, b); len(got.History) != 0 || got.ID != id {
			t.Errorf("%s", b)
		}
		params["message"] = textMessage("m-h4", id)
		st, _, b := f.call(t, http.MethodPost, f.base("bob")+restPrefix+"/message:send", f.tokens["alice"], "application/json", mustJSON(params))
		var out struct {
			Task *wireTask `json:"task"`
		}
		if st != http.StatusOK || json.Unmarshal(b, &out) != nil || out.Task == nil || out.Task.ID != id || len(out.Task.History) != 0 {
			t.Errorf("%d %s", st, b)
		}
	})
	t.Run("ListTasks lists without history, and with history_length 1 with one message each", func(t *testing.T) {
		list := func(params map[string]any) []wireTask {
			_, b := f.rpc(t, "alice", "bob", "ListTasks", params)
			var page struct {
				Tasks []wireTask `json:"tasks"`
			}
			if err := json.Unmarshal(decodeRPC(t, b).Result, &page); err != nil || len(page.Tasks) != 1 {
				t.Fatalf("%s", b)
			}
			return page.Tasks
		}
		if got := list(map[string]any{}); len(got[0].History) != 0 {
			t.Errorf("unasked history: %d messages", len(got[0].History))
		}
		if got := list(map[string]any{"history_length": 1, "page_size": 5}); len(got[0].History) != 1 {
			t.Errorf("%d messages, want 1", len(got[0].History))
		}
	})
}

// A subscription to a task that is input-required when it opens stays open
// past the snapshot: the caller's answer resumes the task (a move that
// reaches the agent's inbox, not the caller's) and the stream ends with
// the agent's completion, its last event (TCK STREAM-SUB-002).
func TestSubscriptionToAnInputRequiredTaskEndsAtTheAgentsCompletion(t *testing.T) {
	f := newFixture(t)
	f.g.StreamMax = time.Hour
	ctx := context.Background()
	for i, binding := range []string{"JSON-RPC", "HTTP+JSON"} {
		t.Run(binding, func(t *testing.T) {
			n := itoa(i)
			_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-ir-"+n, ""), "configuration": map[string]any{"returnImmediately": true}})
			id := sendResult(t, b).ID
			if _, err := f.ts.UpdateStatus(ctx, "bob", id, tasks.StatusRequest{Status: mesh.TaskInputRequired,
				Message: &api.StatusNote{Parts: []mesh.Part{{Kind: "text", Text: "which one?"}}}}); err != nil {
				t.Fatal(err)
			}
			var events <-chan []byte
			name := kind
			if binding == "JSON-RPC" {
				events = f.stream(t, "bob", "SubscribeToTask", map[string]any{"id": id})
			} else {
				events = f.restStream(t, "/tasks/"+id+":subscribe", "{}")
				name = restKind
			}
			if k := name(t, <-events); k != "task" {
				t.Fatalf("first event %s", k)
			}
			_, b = f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage("m-ir-answer-"+n, id), "configuration": map[string]any{"returnImmediately": true}})
			if got := sendResult(t, b); got.Status.State != "TASK_STATE_WORKING" {
				t.Fatalf("the answer left the task %s", got.Status.State)
			}
			if _, err := f.ts.UpdateStatus(ctx, "bob", id, tasks.StatusRequest{Status: mesh.TaskCompleted}); err != nil {
				t.Fatal(err)
			}
			var got []string
			for d := range closing(t, events) {
				got = append(got, name(t, d))
			}
			if len(got) == 0 || got[len(got)-1] != "statusUpdate:TASK_STATE_COMPLETED" {
				t.Errorf("events after the snapshot %v, want the last one completed", got)
			}
		})
	}
}

// restStream opens an HTTP+JSON SSE call as alice to bob.
func (f *fixture) restStream(t *testing.T, path, body string) <-chan []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.base("bob")+restPrefix+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
	req.Header.Set("Content-Type", "application/json")
	return sseData(t, req)
}

// A blocking SendMessage whose wait ends with the agent's plain reply (a
// reply, then completed with no note and no artifact) is answered with
// that reply as a Message; every other ending answers the Task (TCK
// DM-MSG-001).
func TestBlockingSendAnswersTheAgentsPlainReplyAsAMessage(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var bobSeq int64
	text := []mesh.Part{{Kind: "text", Text: "Direct message response"}}
	// blocking sends alice's message in the background, lets agent act as
	// bob once bob's inbox shows it, and returns the raw result.
	blocking := func(t *testing.T, msgID string, agent func(id string)) json.RawMessage {
		t.Helper()
		done := make(chan []byte, 1)
		go func() {
			_, b := f.rpc(t, "alice", "bob", "SendMessage", map[string]any{"message": textMessage(msgID, "")})
			done <- b
		}()
		ev := f.agentInbox(t, "bob", &bobSeq)
		agent(ev.TaskID)
		b := <-done
		r := decodeRPC(t, b)
		if r.Error != nil {
			t.Fatalf("%s", b)
		}
		return r.Result
	}
	reply := func(id string) string {
		res, err := f.ts.Reply(ctx, "bob", id, tasks.ReplyRequest{Parts: text})
		if err != nil {
			t.Fatal(err)
		}
		return res.MessageID
	}
	complete := func(id string, note bool) {
		req := tasks.StatusRequest{Status: mesh.TaskCompleted}
		if note {
			req.Message = &api.StatusNote{Parts: text}
		}
		if _, err := f.ts.UpdateStatus(ctx, "bob", id, req); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a reply, then completed without a note, answers the reply as a Message", func(t *testing.T) {
		var taskID, replyID string
		res := blocking(t, "m-dm-1", func(id string) { taskID, replyID = id, reply(id); complete(id, false) })
		var out struct {
			Message *struct {
				MessageID string            `json:"messageId"`
				TaskID    string            `json:"taskId"`
				ContextID string            `json:"contextId"`
				Role      string            `json:"role"`
				Parts     []json.RawMessage `json:"parts"`
			} `json:"message"`
			Task json.RawMessage `json:"task"`
		}
		if err := json.Unmarshal(res, &out); err != nil || out.Message == nil || out.Task != nil {
			t.Fatalf("result %s, want a Message", res)
		}
		m := out.Message
		if m.Role != "ROLE_AGENT" || m.TaskID != taskID || m.ContextID == "" || m.MessageID != replyID || !strings.Contains(string(res), "Direct message response") {
			t.Errorf("message %s, want bob's reply %s of task %s", res, replyID, taskID)
		}
	})
	for i, c := range []struct {
		name  string
		agent func(id string)
	}{
		{"completed with a note answers the Task", func(id string) { complete(id, true) }},
		{"a reply, then completed with a note, answers the Task", func(id string) { reply(id); complete(id, true) }},
		{"a reply and an artifact, then completed, answers the Task", func(id string) {
			reply(id)
			if _, err := f.ts.AddArtifact(ctx, "bob", id, tasks.ArtifactRequest{Name: "out", Parts: text}); err != nil {
				t.Fatal(err)
			}
			complete(id, false)
		}},
		{"a reply, then input-required, answers the Task", func(id string) {
			reply(id)
			if _, err := f.ts.UpdateStatus(ctx, "bob", id, tasks.StatusRequest{Status: mesh.TaskInputRequired}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := blocking(t, "m-dm-task-"+itoa(i), c.agent)
			if !strings.HasPrefix(string(res), `{"task":`) {
				t.Errorf("result %s, want the Task", res)
			}
		})
	}
}

// A write whose rate unit is gone by the time its own transaction spends
// it (the budget ran out between the front's check and the write) answers
// the front's 429 in each binding's form, never a 500 (the one mapping of
// the mesh's rate_limited).
func TestRateLimitInsideTheWriteAnswers429(t *testing.T) {
	f := newFixture(t)
	f.g.afterRateCheck = func(caller string) { f.setRate(t, caller, time.Now().Add(30*time.Second).UnixMicro()) }
	send := func(id string) map[string]any {
		return map[string]any{"message": textMessage(id, ""), "configuration": map[string]any{"returnImmediately": true}}
	}
	for _, c := range []struct {
		name, rpc, path string
		params          map[string]any
	}{
		{name: "JSON-RPC SendMessage", rpc: "SendMessage", params: send("m-rl-1")},
		{name: "JSON-RPC SendStreamingMessage", rpc: "SendStreamingMessage", params: send("m-rl-2")},
		{name: "HTTP+JSON message:send", path: "/message:send", params: send("m-rl-3")},
		{name: "HTTP+JSON message:stream", path: "/message:stream", params: send("m-rl-4")},
	} {
		t.Run(c.name+" answers 429 with Retry-After in the binding's form", func(t *testing.T) {
			f.setRate(t, "alice", time.Now().UnixMicro())
			var st int
			var h http.Header
			var b []byte
			if c.rpc != "" {
				st, h, b = f.call(t, http.MethodPost, f.base("bob"), f.tokens["alice"], "application/json",
					`{"jsonrpc":"2.0","id":7,"method":"`+c.rpc+`","params":`+mustJSON(c.params)+`}`)
				if r := decodeRPC(t, b); r.Error == nil || r.Error.Code != -32000 || r.ID != float64(7) || !strings.HasPrefix(r.Error.Message, "rate limited") {
					t.Errorf("body %s", b)
				}
			} else {
				st, h, b = f.call(t, http.MethodPost, f.base("bob")+restPrefix+c.path, f.tokens["alice"], "application/json", mustJSON(c.params))
				if e := decodeREST(t, b); e.Error.Code != 429 || e.Error.Status != "RESOURCE_EXHAUSTED" {
					t.Errorf("body %s", b)
				}
			}
			if st != http.StatusTooManyRequests || h.Get("Retry-After") == "" || h.Get("Content-Type") != "application/json" {
				t.Errorf("status %d headers %v body %s", st, h, b)
			}
		})
	}
	t.Run("nothing was written", func(t *testing.T) {
		if n := f.count(t, "tasks"); n != 0 {
			t.Errorf("%d tasks", n)
		}
	})
}
