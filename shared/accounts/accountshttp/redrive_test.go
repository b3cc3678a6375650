package accountshttp

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
)

func TestRedriveRequeuesDeadLettersBeforeLaterEventsAndAuditsIt(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	op := f.account("ops@example.org", true)
	plain := f.account("ada@example.org", false)
	now := f.clock.Now()
	// bob's seq 1 and 3 were dead-lettered, 2 was sent, 4 is pending behind
	// a backed-off recipient.
	for _, e := range []struct {
		seq      int
		delivery string
	}{{1, "failed"}, {2, "sent"}, {3, "failed"}, {4, "pending"}} {
		if _, err := f.s.DB.ExecContext(ctx, `INSERT INTO outbox_events (recipient, seq, event_id, type, sender, task_id, context_id, message_id, key_epoch, body, occurred_at, delivery, last_error, sent_at)
VALUES ('bob', ?, ?, 'message', 'alice', 't1', 'c1', ?, 1, '{}', ?, ?, 'broker said no', ?)`, e.seq, fmt.Sprintf("ev-%d", e.seq), fmt.Sprintf("m-%d", e.seq), now, e.delivery, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.s.DB.ExecContext(ctx, "INSERT INTO dispatch_state (recipient, attempts, next_attempt_at, last_error) VALUES ('bob', 7, ?, 'x')", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	t.Run("an account that is not the operator's may not redrive", func(t *testing.T) {
		r := f.call(req{fn: "AccountRedriveFunction", method: http.MethodPost, cookie: plain.token, csrf: plain.csrf})
		if r.status != http.StatusForbidden || r.code() != "operator_only" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("the health page counts them", func(t *testing.T) {
		h, err := f.s.Health(ctx)
		if err != nil || h.DeadLetters != 2 || h.Pending != 1 || len(h.Recent) != 2 || len(h.Backlog) != 1 {
			t.Fatalf("%+v %v", h, err)
		}
	})
	t.Run("the operator's redrive puts them back to pending, seq order intact, backoff reset", func(t *testing.T) {
		r := f.call(req{fn: "AccountRedriveFunction", method: http.MethodPost, cookie: op.token, csrf: op.csrf})
		if r.status != http.StatusOK || !contains(r.body, `"requeued":2`) {
			t.Fatalf("%d %s", r.status, r.body)
		}
		// What the dispatcher reads next: bob's pending events by seq.
		rows, err := f.s.DB.QueryContext(ctx, "SELECT seq FROM outbox_events WHERE delivery = 'pending' AND recipient = 'bob' ORDER BY seq")
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int
		for rows.Next() {
			var s int
			_ = rows.Scan(&s)
			seqs = append(seqs, s)
		}
		rows.Close()
		if fmt.Sprint(seqs) != "[1 3 4]" {
			t.Fatalf("pending seqs %v", seqs)
		}
		var attempts int
		var next time.Time
		if err := f.s.DB.QueryRowContext(ctx, "SELECT attempts, next_attempt_at FROM dispatch_state WHERE recipient = 'bob'").Scan(&attempts, &next); err != nil || attempts != 0 || next.After(now) {
			t.Fatalf("dispatch_state %d %v %v", attempts, next, err)
		}
		if n := auditRows(t, f, identity.AuditOutboxRedriven, "bob", identity.ActorAccount); n != 1 {
			t.Fatalf("audit rows %d", n)
		}
	})
	t.Run("the admin route redrives too, and a second redrive finds nothing", func(t *testing.T) {
		r := f.call(req{fn: "AdminRedriveFunction", method: http.MethodPost, admin: true, body: map[string]string{"recipient": "bob"}})
		if r.status != http.StatusOK || !contains(r.body, `"requeued":0`) {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
}
