package tasks_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

func TestSendMessage(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob")
	f.friends(t, "alice", "bob")
	parts := []mesh.Part{
		{Kind: tasks.PartText, Text: "translate this"},
		{Kind: tasks.PartData, Data: json.RawMessage(`{ "lang" : "de" }`)},
		{Kind: tasks.PartURL, URL: "https://example.com/notes.md", Name: "notes.md", MediaType: "text/markdown"},
		{Kind: tasks.PartFile, Bytes: "aGVsbG8=", Name: "hello.txt", MediaType: "text/plain"},
	}

	t.Run("a new message creates a submitted task and one event for the recipient", func(t *testing.T) {
		res := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: parts, MessageID: "m-1", ContextID: "trip-42"})
		if res.MessageID != "m-1" || res.ContextID != "trip-42" || res.Status != mesh.TaskSubmitted || res.TaskID == "" {
			t.Fatalf("answer = %+v", res)
		}
		evs := f.events(t, "bob")
		if len(evs) != 1 {
			t.Fatalf("bob has %d events, want 1", len(evs))
		}
		e := evs[0]
		if e.Seq != 1 || e.Type != mesh.EventMessage || e.From != "alice" || e.To != "bob" || e.TaskID != res.TaskID ||
			e.ContextID != "trip-42" || e.GroupID != "" || e.MessageID != "m-1" || e.V != mesh.EnvelopeVersion || e.Delivery != "pending" {
			t.Fatalf("envelope = %+v", e)
		}
		var body tasks.MessageBody
		if err := json.Unmarshal(e.Body, &body); err != nil {
			t.Fatal(err)
		}
		var gotParts []mesh.Part
		_ = json.Unmarshal(body.Message.Parts, &gotParts)
		parts[1].Data = json.RawMessage(`{"lang":"de"}`) // stored compact
		if !reflect.DeepEqual(gotParts, parts) || body.Message.From != "alice" || body.Message.MessageID != "m-1" {
			t.Fatalf("body message = %+v", body.Message)
		}
		want := tasks.TaskRef{TaskID: res.TaskID, ContextID: "trip-42", Initiator: "alice", Recipient: "bob", Status: mesh.TaskSubmitted}
		if body.Task != want {
			t.Fatalf("body task = %+v, want %+v", body.Task, want)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM outbox_events WHERE recipient = 'alice'"); n != 0 {
			t.Fatalf("the sender got %d events", n)
		}
	})

	t.Run("the recipient reads the new task with its message and no artifacts yet", func(t *testing.T) {
		var taskID string
		_ = f.db.QueryRow("SELECT task_id FROM task_messages WHERE message_id = 'm-1'").Scan(&taskID)
		r := f.getTask(t, "bob", taskID)
		var raw map[string]json.RawMessage
		r.decode(t, &raw)
		if r.Status != 200 || string(raw["artifacts"]) != "[]" || !strings.Contains(string(raw["messages"]), `"message_id":"m-1"`) {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})

	t.Run("a message with task_id appends to that task and refreshes its idle clock", func(t *testing.T) {
		first := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("one")})
		var before, after time.Time
		_ = f.db.QueryRow("SELECT updated_at FROM tasks WHERE task_id = ?", first.TaskID).Scan(&before)
		again := f.send(t, "bob", tasks.SendRequest{To: "alice", TaskID: first.TaskID, Parts: text("two")})
		if again.TaskID != first.TaskID || again.ContextID != first.ContextID {
			t.Fatalf("append answered %+v for task %+v", again, first)
		}
		_ = f.db.QueryRow("SELECT updated_at FROM tasks WHERE task_id = ?", first.TaskID).Scan(&after)
		if !after.After(before) {
			t.Fatalf("updated_at %s did not move past %s", after, before)
		}
		evs := f.events(t, "alice")
		if last := evs[len(evs)-1]; last.TaskID != first.TaskID || last.From != "bob" {
			t.Fatalf("alice's last event = %+v", last)
		}
	})

	t.Run("without message_id the server mints one and keeps no idempotency key", func(t *testing.T) {
		keys := f.count(t, "SELECT COUNT(*) FROM idempotency_keys")
		res := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("hi")})
		if !tasks.IDPattern.MatchString(res.MessageID) || len(res.MessageID) != 36 {
			t.Fatalf("minted message_id %q", res.MessageID)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM idempotency_keys"); n != keys {
			t.Fatalf("idempotency keys %d -> %d", keys, n)
		}
	})
}

func TestSendRejectsBadInputAndWritesNothing(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob", "carol", "dave")
	f.friends(t, "alice", "bob")
	f.friends(t, "carol", "dave")
	own := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("first"), ContextID: "ctx-1"})
	theirs := f.send(t, "carol", tasks.SendRequest{To: "dave", Parts: text("private")})
	done := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("finished soon")})
	if r := f.status(t, "bob", done.TaskID, map[string]string{"status": "completed"}); r.Status != 200 {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
	f.friends(t, "alice", "carol") // alice may reach carol, but carol's task with dave is not hers

	big := strings.Repeat("x", tasks.DefaultMaxMessageBytes)
	cases := []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"a body that is not JSON is a 400", `{"to":`, 400, "invalid_json"},
		{"an unknown field is a 400", map[string]any{"to": "bob", "parts": text("x"), "urgent": true}, 400, "invalid_json"},
		{"a missing recipient is a 400", tasks.SendRequest{Parts: text("x")}, 400, "invalid_recipient"},
		{"a malformed recipient id is a 400", tasks.SendRequest{To: "bob smith", Parts: text("x")}, 400, "invalid_recipient"},
		{"a message to oneself is a 422", tasks.SendRequest{To: "alice", Parts: text("x")}, 422, "cannot_message_self"},
		{"a message without parts is a 400", tasks.SendRequest{To: "bob"}, 400, "invalid_parts"},
		{"an unknown part kind is a 400", tasks.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: "image"}}}, 400, "invalid_part"},
		{"an empty text part is a 400", tasks.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: tasks.PartText}}}, 400, "invalid_part"},
		{"a text part with a url is a 400", tasks.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: tasks.PartText, Text: "a", URL: "https://x.y"}}}, 400, "invalid_part"},
		{"a data part with null is a 400", tasks.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: tasks.PartData, Data: json.RawMessage("null")}}}, 400, "invalid_part"},
		{"a data part with invalid UTF-8 is a 400", "{\"to\":\"bob\",\"parts\":[{\"kind\":\"data\",\"data\":{\"x\":\"\xff\xfe\"}}]}", 400, "invalid_part"},
		{"a relative url is a 400", tasks.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: tasks.PartURL, URL: "/etc/passwd"}}}, 400, "invalid_part"},
		{"an ftp url is a 400", tasks.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: tasks.PartURL, URL: "ftp://example.com/x"}}}, 400, "invalid_part"},
		{"a file without media_type is a 400", tasks.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: tasks.PartFile, Bytes: "aGk=", Name: "a.txt"}}}, 400, "invalid_part"},
		{"a file without name is a 400", tasks.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: tasks.PartFile, Bytes: "aGk=", MediaType: "text/plain"}}}, 400, "invalid_part"},
		{"a file that is not base64 is a 400", tasks.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: tasks.PartFile, Bytes: "not base64!", Name: "a", MediaType: "text/plain"}}}, 400, "invalid_part"},
		{"a malformed message_id is a 400", tasks.SendRequest{To: "bob", Parts: text("x"), MessageID: "has space"}, 400, "invalid_message_id"},
		{"a message over the size limit is a 413", tasks.SendRequest{To: "bob", Parts: text(big)}, 413, "message_too_large"},
		{"a stranger is not reachable", tasks.SendRequest{To: "dave", Parts: text("x")}, 403, "not_reachable"},
		{"an agent that does not exist looks like a stranger", tasks.SendRequest{To: "nobody", Parts: text("x")}, 403, "not_reachable"},
		{"someone else's task is not found", tasks.SendRequest{To: "carol", TaskID: theirs.TaskID, Parts: text("x")}, 404, "task_not_found"},
		{"a task id that does not exist is not found", tasks.SendRequest{To: "bob", TaskID: "no-such-task", Parts: text("x")}, 404, "task_not_found"},
		{"one's task with another party is a 422", tasks.SendRequest{To: "carol", TaskID: own.TaskID, Parts: text("x")}, 422, "recipient_mismatch"},
		{"a context that is not the task's is a 422", tasks.SendRequest{To: "bob", TaskID: own.TaskID, ContextID: "ctx-2", Parts: text("x")}, 422, "context_mismatch"},
		{"a finished task takes no more messages", tasks.SendRequest{To: "bob", TaskID: done.TaskID, Parts: text("x")}, 409, "task_terminal"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := f.state(t)
			r := f.call(t, req{fn: "SendMessageFunction", caller: "alice", method: "POST", path: "/v1/messages", body: c.body})
			if r.Status != c.status || r.code() != c.code {
				t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, c.status, c.code)
			}
			if r.Headers["Content-Type"] != "application/problem+json" {
				t.Fatalf("content type %q", r.Headers["Content-Type"])
			}
			if after := f.state(t); after != before {
				t.Fatalf("state changed:\n before %+v\n after  %+v", before, after)
			}
		})
	}

	t.Run("a stranger and an unknown agent get the very same answer", func(t *testing.T) {
		a := f.call(t, req{fn: "SendMessageFunction", caller: "alice", method: "POST", path: "/v1/messages", body: tasks.SendRequest{To: "dave", Parts: text("x")}})
		b := f.call(t, req{fn: "SendMessageFunction", caller: "alice", method: "POST", path: "/v1/messages", body: tasks.SendRequest{To: "zed", Parts: text("x")}})
		if a.Status != b.Status || string(a.Body) != string(b.Body) {
			t.Fatalf("stranger: %d %s\nunknown: %d %s", a.Status, a.Body, b.Status, b.Body)
		}
	})
}

func TestRateLimitedWriteRollsBack(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob")
	f.friends(t, "alice", "bob")
	f.freeze(true) // no time passes: only the burst is available
	for i := range 100 {
		r := f.call(t, req{fn: "SendMessageFunction", caller: "alice", method: "POST", path: "/v1/messages", body: tasks.SendRequest{To: "bob", Parts: text("burst")}})
		if r.Status != 202 {
			t.Fatalf("message %d of the burst: %d %s", i+1, r.Status, r.Body)
		}
	}
	before := f.state(t)
	r := f.call(t, req{fn: "SendMessageFunction", caller: "alice", method: "POST", path: "/v1/messages", body: tasks.SendRequest{To: "bob", Parts: text("one too many"), MessageID: "late"}})
	if r.Status != 429 || r.code() != "rate_limited" || r.Headers["Retry-After"] == "" {
		t.Fatalf("101st message: %d %v %s", r.Status, r.Headers, r.Body)
	}
	if after := f.state(t); after != before {
		t.Fatalf("a rate-limited send wrote something:\n before %+v\n after  %+v", before, after)
	}
	f.freeze(false)
	f.advance(3 * time.Second)
	if res := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("one too many"), MessageID: "late"}); res.MessageID != "late" {
		t.Fatalf("retry after the wait: %+v", res)
	}
}

// A send that opens a task without a context is one CALL of the send
// procedure (START TRANSACTION, CALL and COMMIT in one round trip). What the
// procedure does not let through it refuses whole, and the pipe path, which
// knows every refusal, answers it: a procedure that refused a good send
// would cost a rollback and a second transaction here, never a wrong answer
// elsewhere. The pool holds one connection, so the session's statement
// counters are the sends'.
func TestANewTaskSendIsOneCallOfTheSendProcedure(t *testing.T) {
	f := newFixture(t)
	f.db.SetMaxOpenConns(1)
	f.agents(t, "alice", "bob", "carol")
	f.friends(t, "alice", "bob")
	counters := func() (calls, rollbacks int) {
		t.Helper()
		for name, p := range map[string]*int{"Com_call_procedure": &calls, "Com_rollback": &rollbacks} {
			var k string
			if err := f.db.QueryRow("SHOW SESSION STATUS LIKE '"+name+"'").Scan(&k, p); err != nil {
				t.Fatal(err)
			}
		}
		return calls, rollbacks
	}
	tests := []struct {
		name             string
		from             string
		body             tasks.SendRequest
		status           int
		calls, rollbacks int
	}{
		{"a send to a friend goes through in the call and rolls nothing back", "alice",
			tasks.SendRequest{To: "bob", Parts: text("hi")}, 202, 1, 0},
		{"a send with a client message_id writes its idempotency row in the same call", "alice",
			tasks.SendRequest{To: "bob", Parts: text("hi"), MessageID: "one-call-1"}, 202, 1, 0},
		{"a send to a stranger is refused by the call, rolled back and answered by the pipe", "alice",
			tasks.SendRequest{To: "carol", Parts: text("hi")}, 403, 1, 2},
		{"a send naming a context takes the pipe, which claims it", "alice",
			tasks.SendRequest{To: "bob", Parts: text("hi"), ContextID: "ctx-one-call"}, 202, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls0, rollbacks0 := counters()
			r := f.call(t, req{fn: "SendMessageFunction", caller: tc.from, method: "POST", path: "/v1/messages", body: tc.body})
			if r.Status != tc.status {
				t.Fatalf("status %d %s, want %d", r.Status, r.Body, tc.status)
			}
			calls, rollbacks := counters()
			if calls-calls0 != tc.calls || rollbacks-rollbacks0 != tc.rollbacks {
				t.Fatalf("%d CALLs and %d ROLLBACKs, want %d and %d", calls-calls0, rollbacks-rollbacks0, tc.calls, tc.rollbacks)
			}
		})
	}
	if n := f.count(t, "SELECT COUNT(*) FROM idempotency_keys WHERE sender = 'alice' AND message_id = 'one-call-1'"); n != 1 {
		t.Fatalf("%d idempotency rows for one-call-1, want 1", n)
	}
}
