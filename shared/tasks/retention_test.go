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
