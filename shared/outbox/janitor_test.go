package outbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// settle sets a row's delivery state as the dispatcher would.
func settle(t *testing.T, db *mysql.DB, recipient string, seq int64, delivery string, sentAt *time.Time) {
	t.Helper()
	if _, err := db.Exec("UPDATE outbox_events SET delivery = ?, sent_at = ? WHERE recipient = ? AND seq = ?", delivery, sentAt, recipient, seq); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DELETE FROM outbox_queue WHERE recipient = ? AND seq = ?", recipient, seq); err != nil {
		t.Fatal(err)
	}
}

func TestJanitor(t *testing.T) {
	db, _ := mysqltest.New(t)
	identitytest.Agents(t, db, "a", "b")
	now := testT0.Add(30 * 24 * time.Hour)
	old, recent := now.Add(-8*24*time.Hour), now.Add(-6*24*time.Hour)
	var evs []Event
	for i := range 6 {
		evs = append(evs, event("a", fmt.Sprintf("a%d", i+1), `{}`))
	}
	evs = append(evs, event("b", "b1", `{}`), event("b", "b2", `{}`))
	if err := appendIn(t, db, evs); err != nil {
		t.Fatal(err)
	}
	// a1 as rows settled before SentDelivery were, the others as the
	// dispatcher settles them now.
	settle(t, db, "a", 1, "sent", &old)
	for seq := int64(2); seq <= 3; seq++ {
		settle(t, db, "a", seq, SentDelivery, &old)
	}
	settle(t, db, "a", 4, SentDelivery, &recent)
	settle(t, db, "a", 5, "failed", nil) // a dead letter without a settle time
	// a6 stays pending although it is old.
	settle(t, db, "b", 1, "failed", &old) // a dead letter settled long ago
	settle(t, db, "b", 2, SentDelivery, &old)

	j := Janitor{DB: db, Clock: func() time.Time { return now }, Retention: 7 * 24 * time.Hour, Batch: 2}
	remaining := func() string {
		return fmt.Sprint(mysqltest.Strings(t, db, "", "SELECT CONCAT(recipient, seq) FROM outbox_events ORDER BY recipient, seq"))
	}

	t.Run("one batch deletes at most Batch rows and says there may be more", func(t *testing.T) {
		n, more, err := j.RunOnce(context.Background())
		if err != nil || n != 2 || !more {
			t.Fatalf("RunOnce = %d, %v, %v", n, more, err)
		}
	})

	t.Run("a run deletes every settled row older than the retention and nothing else", func(t *testing.T) {
		if err := j.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Kept: a4 (sent 6 days ago), a5 (dead letter without settle time), a6 (pending).
		if got := remaining(); got != "[a4 a5 a6]" {
			t.Fatalf("remaining rows %s", got)
		}
	})

	t.Run("the inbox then starts at the oldest held seq", func(t *testing.T) {
		oldest, err := OldestSeq(context.Background(), db, "a")
		if err != nil || oldest != 4 {
			t.Fatalf("oldest seq of a = %d, %v", oldest, err)
		}
		oldest, err = OldestSeq(context.Background(), db, "b")
		if err != nil || oldest != 3 {
			t.Fatalf("oldest seq of b (nothing held) = %d, %v; want the next seq, 3", oldest, err)
		}
	})

	t.Run("a run with nothing to delete is quiet", func(t *testing.T) {
		n, more, err := j.RunOnce(context.Background())
		if err != nil || n != 0 || more {
			t.Fatalf("RunOnce = %d, %v, %v", n, more, err)
		}
	})

	t.Run("a janitor without a retention refuses to run", func(t *testing.T) {
		if err := (Janitor{DB: db}).Run(context.Background()); err == nil {
			t.Fatal("no error")
		}
	})
}
