package tasks_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"

	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

func TestIdempotencyKeysExpireWithTheRetention(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob")
	f.friends(t, "alice", "bob")
	f.svc.Janitor.Batch = 2 // several batches, so the loop is exercised
	for i := range 5 {
		f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("old"), MessageID: fmt.Sprintf("old-%d", i)})
	}
	f.advance(tasks.DefaultOutboxRetention + time.Hour)
	f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("new"), MessageID: "fresh"})

	if err := taskshttp.Jobs(f.svc)["OutboxJanitorFunction"](context.Background()); err != nil {
		t.Fatal(err)
	}

	t.Run("keys older than the retention are deleted, every batch of them", func(t *testing.T) {
		if n := f.count(t, "SELECT COUNT(*) FROM idempotency_keys WHERE message_id LIKE 'old-%'"); n != 0 {
			t.Fatalf("%d expired keys left", n)
		}
	})
	t.Run("a key inside the retention stays, so its retry still gets the original answer", func(t *testing.T) {
		if n := f.count(t, "SELECT COUNT(*) FROM idempotency_keys WHERE message_id = 'fresh'"); n != 1 {
			t.Fatalf("fresh key count %d, want 1", n)
		}
		before := f.count(t, "SELECT COUNT(*) FROM task_messages")
		f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("new"), MessageID: "fresh"})
		if after := f.count(t, "SELECT COUNT(*) FROM task_messages"); after != before {
			t.Fatalf("a retry inside the retention wrote a message (%d -> %d)", before, after)
		}
	})
	t.Run("the deletion goes through the created_at index", func(t *testing.T) {
		plan := mysqltest.Explain(t, f.db, tasks.OldIdemKeysSQL, t0, 10)
		if len(plan) != 1 || plan[0].Key != "idempotency_keys_age" || plan[0].Type == "ALL" {
			t.Fatalf("oldIdemKeysSQL plan %+v, want a range on idempotency_keys_age", plan)
		}
	})
}

// settle marks every outbox event delivered, as the dispatcher would.
func (f *fixture) settle(t *testing.T) {
	t.Helper()
	if _, err := f.db.Exec("DELETE FROM outbox_queue"); err != nil {
		t.Fatal(err)
	}
}

// finish moves a task to completed, with a note (a message) and an artifact
// before it, so it has rows in every child table.
func (f *fixture) finish(t *testing.T, taskID string) {
	t.Helper()
	if r := f.artifact(t, "bob", taskID, tasks.ArtifactRequest{Name: "out", Parts: text("result")}); r.Status != 201 {
		t.Fatalf("artifact: %d %s", r.Status, r.Body)
	}
	if r := f.status(t, "bob", taskID, map[string]any{"status": "completed", "message": map[string]any{"parts": text("done")}}); r.Status != 200 {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
}

// rowsOf counts the rows of a task in tasks and each child table.
func (f *fixture) rowsOf(t *testing.T, taskID string) int {
	t.Helper()
	return f.count(t, `SELECT (SELECT COUNT(*) FROM tasks WHERE task_id = ?) + (SELECT COUNT(*) FROM task_messages WHERE task_id = ?)
+ (SELECT COUNT(*) FROM task_artifacts WHERE task_id = ?)`, taskID, taskID, taskID)
}

// retainTwoDays is a fixture of friends alice and bob whose task retention
// is two days.
func retainTwoDays(t *testing.T) (*fixture, time.Duration) {
	f := newFixture(t)
	f.agents(t, "alice", "bob")
	f.friends(t, "alice", "bob")
	f.svc.Retention.Policy.Tasks = 48 * time.Hour
	return f, 48 * time.Hour
}

func TestTheJanitorDeletesTerminalTasksPastTheRetentionWithAllTheirRows(t *testing.T) {
	f, retain := retainTwoDays(t)
	var batches []string
	f.svc.Retention.Batch = 2
	f.svc.Retention.AfterBatch = func(table string, n int) {
		batches = append(batches, table)
		if n > 2 {
			t.Errorf("a batch of %s deleted %d rows, more than Batch 2", table, n)
		}
	}
	var old []string
	for i := range 5 {
		res := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("old"), MessageID: fmt.Sprintf("old-%d", i)})
		f.finish(t, res.TaskID)
		old = append(old, res.TaskID)
	}
	open := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("a question"), MessageID: "open"}).TaskID
	if r := f.status(t, "bob", open, map[string]any{"status": "input-required"}); r.Status != 200 {
		t.Fatalf("input-required: %d %s", r.Status, r.Body)
	}
	pending := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("undelivered"), MessageID: "pending"}).TaskID
	f.settle(t)
	f.finish(t, pending) // its completion event stays pending
	f.advance(retain + time.Hour)
	young := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("young"), MessageID: "young"}).TaskID
	f.finish(t, young)
	if _, err := f.db.Exec("DELETE q FROM outbox_queue q JOIN outbox_events e ON e.recipient = q.recipient AND e.seq = q.seq WHERE e.task_id <> ?", pending); err != nil {
		t.Fatal(err)
	}

	if err := taskshttp.Jobs(f.svc)["OutboxJanitorFunction"](context.Background()); err != nil {
		t.Fatal(err)
	}

	t.Run("a terminal task past the retention is deleted with its messages and artifacts", func(t *testing.T) {
		for _, id := range old {
			if n := f.rowsOf(t, id); n != 0 {
				t.Errorf("task %s: %d rows left", id, n)
			}
		}
	})
	t.Run("a terminal task inside the retention stays whole", func(t *testing.T) {
		if n := f.rowsOf(t, young); n != 4 { // task, message, note, artifact
			t.Errorf("young task: %d rows, want 4", n)
		}
	})
	t.Run("an open task stays however old (input-required waits for an answer)", func(t *testing.T) {
		if n := f.count(t, "SELECT COUNT(*) FROM tasks WHERE task_id = ?", open); n != 1 {
			t.Errorf("open task deleted")
		}
	})
	t.Run("a terminal task whose last event is still pending stays", func(t *testing.T) {
		if n := f.rowsOf(t, pending); n != 4 {
			t.Errorf("task with a pending event: %d rows, want 4", n)
		}
	})
	t.Run("every table was deleted from in several bounded batches", func(t *testing.T) {
		seen := map[string]int{}
		for _, b := range batches {
			seen[b]++
		}
		for _, table := range []string{"tasks", "task_messages", "task_artifacts"} {
			if seen[table] < 2 {
				t.Errorf("%s: %d batches, want several (batches %v)", table, seen[table], batches)
			}
		}
	})
}

func TestAConversationOutlivesTheTaskThatNamedIt(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob", "carol")
	f.friends(t, "alice", "bob")
	f.friends(t, "carol", "bob")
	retain := 48 * time.Hour
	f.svc.Retention.Policy.Tasks = retain
	first := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("first"), MessageID: "first"})
	f.finish(t, first.TaskID)
	f.advance(retain + time.Hour)
	// A later task in the conversation the first one's id names.
	later := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("later"), MessageID: "later", ContextID: first.ContextID})
	// A conversation named by the client, registered long ago, with an
	// open task in it.
	if _, err := f.db.Exec("INSERT INTO task_contexts (context_id, party_a, party_b, created_at) VALUES ('named', 'alice', 'bob', ?)", t0); err != nil {
		t.Fatal(err)
	}
	f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("in a named one"), MessageID: "named", ContextID: "named"})
	f.settle(t)

	if err := taskshttp.Jobs(f.svc)["OutboxJanitorFunction"](context.Background()); err != nil {
		t.Fatal(err)
	}

	t.Run("the first task is deleted though its id is the conversation's", func(t *testing.T) {
		if n := f.rowsOf(t, first.TaskID); n != 0 {
			t.Fatalf("first task: %d rows left", n)
		}
	})
	t.Run("the conversation stays the two agents': a third agent naming it is refused", func(t *testing.T) {
		r := f.call(t, req{fn: "SendMessageFunction", caller: "carol", method: "POST", path: "/v1/messages",
			body: tasks.SendRequest{To: "bob", Parts: text("sneak in"), MessageID: "sneak", ContextID: first.ContextID}})
		if r.Status != 422 || r.code() != "context_mismatch" {
			t.Fatalf("carol naming the context: %d %s, want 422 context_mismatch", r.Status, r.Body)
		}
	})
	t.Run("an old registration with a task left in it stays, and still refuses a third agent", func(t *testing.T) {
		if n := f.count(t, "SELECT COUNT(*) FROM task_contexts WHERE context_id = 'named'"); n != 1 {
			t.Fatalf("the registration of a conversation with an open task was deleted")
		}
		r := f.call(t, req{fn: "SendMessageFunction", caller: "carol", method: "POST", path: "/v1/messages",
			body: tasks.SendRequest{To: "bob", Parts: text("sneak in"), MessageID: "sneak-named", ContextID: "named"}})
		if r.Status != 422 {
			t.Fatalf("carol naming it: %d %s, want 422", r.Status, r.Body)
		}
	})
	t.Run("its two agents go on in it", func(t *testing.T) {
		f.send(t, "bob", tasks.SendRequest{To: "alice", Parts: text("again"), MessageID: "again", ContextID: first.ContextID})
	})
	t.Run("once its last task is gone and it is old, its registration goes too", func(t *testing.T) {
		if n := f.count(t, "SELECT COUNT(*) FROM task_contexts WHERE context_id = ?", first.ContextID); n != 1 {
			t.Fatalf("registration rows %d, want 1 while tasks remain", n)
		}
		if _, err := f.db.Exec("UPDATE tasks SET status = 'canceled' WHERE context_id = ?", first.ContextID); err != nil {
			t.Fatal(err)
		}
		f.settle(t)
		f.advance(retain + time.Hour)
		if err := taskshttp.Jobs(f.svc)["OutboxJanitorFunction"](context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM tasks WHERE context_id = ?", first.ContextID); n != 0 {
			t.Fatalf("%d tasks left in the conversation (later %s)", n, later.TaskID)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM task_contexts WHERE context_id = ?", first.ContextID); n != 0 {
			t.Fatalf("registration of an empty old conversation kept")
		}
	})
}

func TestSendsGoOnWhileTheJanitorHoldsABatchOfTasks(t *testing.T) {
	f, retain := retainTwoDays(t)
	f.svc.Retention.Batch = 50
	var firstCtx string
	for i := range 50 {
		res := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("old"), MessageID: fmt.Sprintf("old-%d", i)})
		f.finish(t, res.TaskID)
		if i == 0 {
			firstCtx = res.ContextID
		}
	}
	f.advance(retain + time.Hour)
	live := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("live"), MessageID: "live"}).TaskID
	f.settle(t)
	sent := 0
	inOld := make(chan response, 1)
	f.svc.Retention.InTx = func(context.Context) {
		// The batch's task rows are locked and deleted, not yet committed.
		// Each write below would wait for the commit (and fail on its
		// 10 s deadline) if the janitor's locks were in its way.
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		writes := []req{
			{fn: "SendMessageFunction", caller: "alice", method: "POST", path: "/v1/messages",
				body: tasks.SendRequest{To: "bob", Parts: text("new"), MessageID: fmt.Sprintf("new-%d", sent)}},
			{fn: "ReplyFunction", caller: "bob", method: "POST", path: "/v1/tasks/" + live + "/messages",
				params: map[string]string{"id": live}, body: tasks.ReplyRequest{Parts: text("reply"), MessageID: fmt.Sprintf("reply-%d", sent)}},
		}
		for _, w := range writes {
			done := make(chan response, 1)
			go func() { done <- f.call(t, w) }()
			select {
			case r := <-done:
				if r.Status != 202 {
					t.Errorf("%s while the janitor holds its batch: %d %s", w.fn, r.Status, r.Body)
				}
			case <-wctx.Done():
				t.Fatalf("%s waited on the janitor's locks", w.fn)
			}
			sent++
		}
		if sent == len(writes) {
			// A send in the conversation whose first task is in this batch
			// reads that task with a shared lock: it waits for this commit
			// (one short transaction), then registers the conversation anew.
			// Last: bob's later writes would queue behind it on his rate row.
			go func() {
				inOld <- f.call(t, req{fn: "SendMessageFunction", caller: "bob", method: "POST", path: "/v1/messages",
					body: tasks.SendRequest{To: "alice", Parts: text("in the old conversation"), MessageID: "ctx", ContextID: firstCtx}})
			}()
		}
	}
	if err := taskshttp.Jobs(f.svc)["OutboxJanitorFunction"](context.Background()); err != nil {
		t.Fatal(err)
	}
	if sent == 0 {
		t.Fatal("the janitor deleted no batch of tasks")
	}
	t.Run("a send in the conversation of a task being deleted goes through after the batch", func(t *testing.T) {
		if r := <-inOld; r.Status != 202 {
			t.Fatalf("send in the old conversation: %d %s", r.Status, r.Body)
		}
	})
	t.Run("every write made during the batch committed, and the old tasks are gone", func(t *testing.T) {
		if n := f.count(t, "SELECT COUNT(*) FROM task_messages WHERE message_id LIKE 'new-%' OR message_id LIKE 'reply-%'"); n != sent {
			t.Errorf("%d messages written during the batch, want %d", n, sent)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM task_messages WHERE message_id LIKE 'old-%'"); n != 0 {
			t.Errorf("%d old messages left", n)
		}
	})
}
