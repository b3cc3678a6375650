package tasks_test

import (
	"sync"
	"testing"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

func TestIdempotentWrites(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob")
	f.friends(t, "alice", "bob")
	body := tasks.SendRequest{To: "bob", Parts: text("exactly once"), MessageID: "retry-me"}

	t.Run("50 parallel retries of one send make one message and one event, and all get the same answer", func(t *testing.T) {
		const n = 50
		answers := make([]response, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				answers[i] = f.call(t, req{fn: "SendMessageFunction", caller: "alice", method: "POST", path: "/v1/messages", body: body})
			})
		}
		wg.Wait()
		for i, a := range answers {
			if a.Status != 202 || string(a.Body) != string(answers[0].Body) {
				t.Fatalf("answer %d: %d %s; answer 0: %s", i, a.Status, a.Body, answers[0].Body)
			}
		}
		f.counts(t, map[string]int{
			"SELECT COUNT(*) FROM tasks":                                             1,
			"SELECT COUNT(*) FROM task_messages WHERE message_id = 'retry-me'":       1,
			"SELECT COUNT(*) FROM outbox_events WHERE message_id = 'retry-me'":       1,
			"SELECT COUNT(*) FROM idempotency_keys WHERE message_id = 'retry-me'":    1,
			"SELECT last_seq FROM inbox_counters WHERE recipient = 'bob'":            1,
			"SELECT COUNT(*) FROM outbox_events WHERE recipient = 'bob' AND seq = 1": 1,
			"SELECT COUNT(*) FROM outbox_events WHERE recipient = 'alice'":           0,
		})
	})

	t.Run("the same message_id with other content is a 409 that writes nothing", func(t *testing.T) {
		before := f.state(t)
		other := body
		other.Parts = text("something else")
		r := f.call(t, req{fn: "SendMessageFunction", caller: "alice", method: "POST", path: "/v1/messages", body: other})
		if r.Status != 409 || r.code() != "message_id_conflict" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		f.unchanged(t, before, "state changed")
	})

	t.Run("the same message_id on another route is a 409", func(t *testing.T) {
		var orig tasks.SendResult
		_ = f.db.QueryRow("SELECT task_id FROM task_messages WHERE message_id = 'retry-me'").Scan(&orig.TaskID)
		r := f.reply(t, "alice", orig.TaskID, tasks.ReplyRequest{Parts: text("exactly once"), MessageID: "retry-me"})
		if r.Status != 409 || r.code() != "message_id_conflict" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})

	t.Run("another sender's equal message_id is a different message", func(t *testing.T) {
		res := f.send(t, "bob", tasks.SendRequest{To: "alice", Parts: text("exactly once"), MessageID: "retry-me"})
		if n := f.count(t, "SELECT COUNT(*) FROM task_messages WHERE message_id = 'retry-me'"); n != 2 {
			t.Fatalf("%d messages with the id, want 2 (one per sender)", n)
		}
		if evs := f.events(t, "alice"); len(evs) != 1 || evs[0].TaskID != res.TaskID {
			t.Fatalf("alice's events: %+v", evs)
		}
	})

	t.Run("a retry after the task moved on still returns the original answer", func(t *testing.T) {
		first := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("late retry"), MessageID: "late-retry"})
		if r := f.status(t, "bob", first.TaskID, map[string]string{"status": "rejected"}); r.Status != 200 {
			t.Fatalf("reject: %d %s", r.Status, r.Body)
		}
		again := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("late retry"), MessageID: "late-retry"})
		if again != first {
			t.Fatalf("retry answered %+v, first answer %+v", again, first)
		}
	})

	t.Run("a retry after the recipient blocked the sender still returns the original answer, and a new send is 403", func(t *testing.T) {
		first := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("before the block"), MessageID: "pre-block"})
		if _, err := f.db.Exec("INSERT INTO agent_blocks (agent_id, blocked_id, created_at) VALUES ('bob', 'alice', ?)", f.clock()); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if _, err := f.db.Exec("DELETE FROM agent_blocks WHERE agent_id = 'bob' AND blocked_id = 'alice'"); err != nil {
				t.Fatal(err)
			}
		}()
		again := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("before the block"), MessageID: "pre-block"})
		if again != first {
			t.Fatalf("retry answered %+v, first answer %+v", again, first)
		}
		r := f.call(t, req{fn: "SendMessageFunction", caller: "alice", method: "POST", path: "/v1/messages",
			body: tasks.SendRequest{To: "bob", Parts: text("after the block"), MessageID: "post-block"}})
		if r.Status != 403 || r.code() != "not_reachable" {
			t.Fatalf("a new send after the block: %d %s", r.Status, r.Body)
		}
	})

	t.Run("a retried status move answers the same and emits one event", func(t *testing.T) {
		task := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("work")})
		move := map[string]string{"status": "working", "message_id": "start-1"}
		a := f.status(t, "bob", task.TaskID, move)
		b := f.status(t, "bob", task.TaskID, move)
		if a.Status != 200 || b.Status != 200 || string(a.Body) != string(b.Body) {
			t.Fatalf("first %d %s, retry %d %s", a.Status, a.Body, b.Status, b.Body)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM outbox_events WHERE message_id = 'start-1'"); n != 1 {
			t.Fatalf("%d status events, want 1", n)
		}
	})
}
