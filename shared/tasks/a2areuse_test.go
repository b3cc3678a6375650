package tasks_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// A reused A2A messageId is a retry (the first answer, nothing written)
// unless it cannot be one: a different message, or the same new-task
// message after the caller acted on the task it opened. Then it is a new
// message, and a retry of that reuse is again a retry.
func TestAReusedA2AMessageID(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.agents(t, "ann", "bob")
	f.friends(t, "ann", "bob")
	const id = "tck-input-required-1234"
	send := func(t *testing.T, req tasks.SendRequest) tasks.SendResult {
		t.Helper()
		f.refill(t, "ann")
		res, err := f.svc.SendA2A(ctx, "ann", req)
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		return res
	}
	first := tasks.SendRequest{To: "bob", MessageID: id, Parts: text("TCK prerequisite task creation")}
	countTasks := func() int { return f.count(t, "SELECT COUNT(*) FROM tasks") }

	t.Run("the same message again is a retry: the same task, nothing written", func(t *testing.T) {
		a := send(t, first)
		before := f.state(t)
		b := send(t, first)
		if b.TaskID != a.TaskID {
			t.Errorf("the retry opened task %s, want %s", b.TaskID, a.TaskID)
		}
		f.unchanged(t, before, "a retry")
	})
	t.Run("a retry after the recipient finished the task is still a retry", func(t *testing.T) {
		a := send(t, first)
		if r := f.status(t, "bob", a.TaskID, map[string]any{"status": mesh.TaskCompleted}); r.Status != 200 {
			t.Fatalf("complete: %d %s", r.Status, r.Body)
		}
		before := countTasks()
		if b := send(t, first); b.TaskID != a.TaskID || countTasks() != before {
			t.Errorf("a retry after completion opened task %s (tasks %d -> %d), want %s", b.TaskID, before, countTasks(), a.TaskID)
		}
	})

	f2 := newFixture(t)
	f2.agents(t, "ann", "bob")
	f2.friends(t, "ann", "bob")
	f = f2
	t.Run("a different message under a used id is a new task, and its retry a retry", func(t *testing.T) {
		a := send(t, first)
		other := first
		other.Parts = text("another message")
		b := send(t, other)
		if b.TaskID == a.TaskID {
			t.Fatalf("the different message was answered with the first one's task %s", a.TaskID)
		}
		if !strings.HasPrefix(b.MessageID, id+":") {
			t.Errorf("the new message's id is %s, want the client's id %s, a colon and more", b.MessageID, id)
		}
		before := countTasks()
		if c := send(t, other); c.TaskID != b.TaskID || countTasks() != before {
			t.Errorf("the retry of the reuse opened task %s, want %s", c.TaskID, b.TaskID)
		}
	})
	t.Run("a different message into the task under a used id is one more message", func(t *testing.T) {
		a := send(t, tasks.SendRequest{To: "bob", MessageID: "multi-1", Parts: text("start")})
		in := tasks.SendRequest{To: "bob", TaskID: a.TaskID, MessageID: "multi-1", Parts: text("more")}
		b := send(t, in)
		if b.TaskID != a.TaskID {
			t.Fatalf("the message went to task %s, want %s", b.TaskID, a.TaskID)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM task_messages WHERE task_id = ?", a.TaskID); n != 2 {
			t.Errorf("the task has %d messages, want 2", n)
		}
		send(t, in)
		if n := f.count(t, "SELECT COUNT(*) FROM task_messages WHERE task_id = ?", a.TaskID); n != 2 {
			t.Errorf("a retry of it added a message: %d, want 2", n)
		}
	})
	t.Run("the same message after the caller answered its task is a new task", func(t *testing.T) {
		a := send(t, first)
		if r := f.status(t, "bob", a.TaskID, map[string]any{"status": mesh.TaskInputRequired}); r.Status != 200 {
			t.Fatalf("ask: %d %s", r.Status, r.Body)
		}
		send(t, tasks.SendRequest{To: "bob", TaskID: a.TaskID, MessageID: "answer-1", Parts: text("the answer")})
		b := send(t, first)
		if b.TaskID == a.TaskID {
			t.Fatalf("answered with the task the caller already answered (%s)", a.TaskID)
		}
		if !strings.HasPrefix(b.MessageID, id+":") {
			t.Errorf("the new task's message id is %s, want the client's id %s first (an agent may act on it)", b.MessageID, id)
		}
		before := countTasks()
		if c := send(t, first); c.TaskID != b.TaskID || countTasks() != before {
			t.Errorf("the retry opened task %s, want %s", c.TaskID, b.TaskID)
		}
	})
	t.Run("the same message after the caller canceled its task through the gateway is a new task", func(t *testing.T) {
		a := send(t, first)
		if _, err := f.svc.UpdateStatus(ctx, "ann", a.TaskID, tasks.StatusRequest{Status: mesh.TaskCanceled, MessageID: tasks.A2ACancelID(a.TaskID)}); err != nil {
			t.Fatal(err)
		}
		if b := send(t, first); b.TaskID == a.TaskID {
			t.Fatalf("answered with the task the caller canceled (%s)", a.TaskID)
		}
	})
	t.Run("the same message after the recipient canceled its task is a retry", func(t *testing.T) {
		a := send(t, first)
		if r := f.status(t, "bob", a.TaskID, map[string]any{"status": mesh.TaskCanceled}); r.Status != 200 {
			t.Fatalf("cancel: %d %s", r.Status, r.Body)
		}
		if b := send(t, first); b.TaskID != a.TaskID {
			t.Errorf("a retry opened task %s, want %s", b.TaskID, a.TaskID)
		}
	})
	t.Run("a reuse of a 64-character id gets a valid id of its own", func(t *testing.T) {
		long := tasks.SendRequest{To: "bob", MessageID: strings.Repeat("x", 64), Parts: text("one")}
		send(t, long)
		long.Parts = text("two")
		b := send(t, long)
		if len(b.MessageID) > 64 || !tasks.IDPattern.MatchString(b.MessageID) || b.MessageID == long.MessageID {
			t.Errorf("the reuse's id is %q", b.MessageID)
		}
	})
	t.Run("a chain of reuses is bounded", func(t *testing.T) {
		defer tasks.SetMaxA2AReuses(3)()
		req := tasks.SendRequest{To: "bob", MessageID: "chain-1", Parts: text("again")}
		var err error
		for i := 0; i < 4 && err == nil; i++ {
			f.refill(t, "ann")
			var res tasks.SendResult
			if res, err = f.svc.SendA2A(ctx, "ann", req); err == nil {
				_, err = f.svc.UpdateStatus(ctx, "ann", res.TaskID, tasks.StatusRequest{Status: mesh.TaskCanceled, MessageID: tasks.A2ACancelID(res.TaskID)})
			}
		}
		var me *mesh.Error
		if !errors.As(err, &me) || me.Code != "message_id_reused" {
			t.Fatalf("got %v, want message_id_reused after 3 reuses", err)
		}
	})
}
