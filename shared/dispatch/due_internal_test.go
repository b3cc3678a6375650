package dispatch

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

// pendingFor inserts n pending events for each recipient, straight into
// the outbox and its queue (these tests look at the due-recipient scan
// alone).
func pendingFor(t *testing.T, db *mysql.DB, recipients []string, n int, at time.Time) {
	t.Helper()
	const cols = "(recipient, seq, event_id, type, sender, task_id, context_id, message_id, key_epoch, body, occurred_at, delivery)"
	for start := 0; start < len(recipients); start += 100 {
		var vals, queued []string
		var args, qargs []any
		for _, r := range recipients[start:min(start+100, len(recipients))] {
			for seq := 1; seq <= n; seq++ {
				vals = append(vals, "(?, ?, ?, 'message', 'sender', 't', 'c', ?, 1, '{}', ?, '"+outbox.SentDelivery+"')")
				args = append(args, r, seq, fmt.Sprintf("%s-%d", r, seq), fmt.Sprintf("m%d", seq), at)
				queued = append(queued, "(?, ?)")
				qargs = append(qargs, r, seq)
			}
		}
		if _, err := db.Exec("INSERT INTO outbox_events "+cols+" VALUES "+strings.Join(vals, ","), args...); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("INSERT INTO outbox_queue (recipient, seq) VALUES "+strings.Join(queued, ","), qargs...); err != nil {
			t.Fatal(err)
		}
	}
}

func recipientIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}

// The due-recipient scan reads one index entry per recipient, whatever the
// backlog: a million pending events must not cost a batch more than fifty
// recipients do.
func TestTheDueRecipientScanSkipsFromRecipientToRecipient(t *testing.T) {
	db, _ := mysqltest.New(t)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pendingFor(t, db, recipientIDs("r", 40), 200, now)
	// A few still marked pending, as a redrive leaves them.
	if _, err := db.Exec("UPDATE outbox_events SET delivery = 'pending' WHERE seq = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("ANALYZE TABLE outbox_events, outbox_queue"); err != nil {
		t.Fatal(err)
	}
	plans := mysqltest.Explain(t, db, pendingAfterSQL, "", 100, "", 100, 100)
	loose := map[string]string{}
	for _, p := range plans {
		if strings.Contains(p.Extra, "index for group-by") {
			loose[p.Table] = p.Key
		}
	}
	if loose["outbox_queue"] != "PRIMARY" || loose["outbox_events"] != "outbox_pending" {
		t.Fatalf("plan %+v, want a loose index scan (Using index for group-by) on outbox_queue's key and on outbox_pending", plans)
	}
}

// Recipients backing off ahead of due ones in key order cost a batch at most
// maxScanned looks, and the cursor moves past them: the due ones are served
// within a few batches, each once per lap, and the lap wraps around.
func TestBackedOffRecipientsDoNotHideDueOnes(t *testing.T) {
	db, _ := mysqltest.New(t)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	all := recipientIDs("r", 300)
	pendingFor(t, db, all, 1, now)
	var vals []string
	var args []any
	for _, r := range all[:250] {
		vals = append(vals, "(?, 3, ?)")
		args = append(args, r, now.Add(time.Hour))
	}
	if _, err := db.Exec("INSERT INTO dispatch_state (recipient, attempts, next_attempt_at) VALUES "+strings.Join(vals, ","), args...); err != nil {
		t.Fatal(err)
	}
	d := &Dispatcher{DB: db, Recipients: 5}
	d.defaults()
	served := map[string]int{}
	calls := 0
	for len(served) < 50 && calls < 30 {
		calls++
		due, _, err := d.dueRecipients(context.Background(), now)
		if err != nil {
			t.Fatal(err)
		}
		if len(due) > d.Recipients {
			t.Fatalf("%d recipients in one batch, want at most %d", len(due), d.Recipients)
		}
		for _, r := range due {
			if r < "r0250" {
				t.Fatalf("%s is backing off but was returned", r)
			}
			served[r]++
		}
	}
	// 250 backed off at 100 looks a batch, then 50 due at 5 a batch.
	if len(served) != 50 || calls > 3+10 {
		t.Fatalf("%d due recipients served in %d batches, want all 50 within 13", len(served), calls)
	}
	for r, n := range served {
		if n != 1 {
			t.Fatalf("%s served %d times in one lap", r, n)
		}
	}
	t.Run("the next lap starts again from the first key", func(t *testing.T) {
		for range 5 {
			due, _, err := d.dueRecipients(context.Background(), now)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range due {
				if r == "r0250" {
					return
				}
			}
		}
		t.Fatal("r0250 not served again within five batches of the next lap")
	})
}
