package outbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

func TestInboxWait(t *testing.T) {
	db, _ := mysqltest.New(t)
	withAgents(t, db, "r", "other")
	if err := appendIn(t, db, []Event{event("r", "1", `{"n":1}`), event("r", "2", `{"n":2}`), event("other", "x", `{}`)}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("events after the cursor come at once, up to the limit", func(t *testing.T) {
		p, err := Inbox{DB: db}.Wait(ctx, "r", 0, 1, 5*time.Second)
		if err != nil || len(p.Events) != 1 || p.Events[0].Seq != 1 || p.NextAfter != 1 || p.OldestSeq != 1 || string(p.Events[0].Body) != `{"n":1}` {
			t.Fatalf("page %+v, %v", p, err)
		}
	})

	t.Run("an idle wait polls with a doubling pause capped at MaxPoll", func(t *testing.T) {
		var pauses []time.Duration
		in := Inbox{DB: db, MinPoll: 100 * time.Millisecond, MaxPoll: time.Second, Sleep: func(ctx context.Context, d time.Duration) error {
			pauses = append(pauses, d)
			return sleepCtx(ctx, d)
		}}
		start := time.Now()
		p, err := in.Wait(ctx, "r", 2, 10, 2500*time.Millisecond)
		took := time.Since(start)
		if err != nil || len(p.Events) != 0 || p.NextAfter != 2 {
			t.Fatalf("page %+v, %v", p, err)
		}
		// 100, 200, 400, 800, 1000 ms: 5 pauses, 6 queries in 2.5 s (a fixed
		// 100 ms poll would make 25).
		want := []time.Duration{100, 200, 400, 800}
		for i, w := range want {
			if i >= len(pauses) || pauses[i] != w*time.Millisecond {
				t.Fatalf("pauses %v, want them to start %v ms", pauses, want)
			}
		}
		if len(pauses) > 6 || took < 2500*time.Millisecond || took > 3500*time.Millisecond {
			t.Fatalf("%d pauses %v in %v", len(pauses), pauses, took)
		}
	})

	t.Run("a wait canceled by the client answers at once with an empty page", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(300*time.Millisecond, cancel)
		start := time.Now()
		p, err := Inbox{DB: db}.Wait(cctx, "r", 2, 10, 10*time.Second)
		took := time.Since(start)
		if err != nil || len(p.Events) != 0 || p.OldestSeq != 1 || took < 300*time.Millisecond || took > time.Second {
			t.Fatalf("page %+v, %v after %v", p, err, took)
		}
	})

	t.Run("a wait ends a second before the function's deadline", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		p, err := Inbox{DB: db}.Wait(dctx, "r", 2, 10, 10*time.Second)
		took := time.Since(start)
		if err != nil || len(p.Events) != 0 || took < 400*time.Millisecond || took > 1200*time.Millisecond {
			t.Fatalf("page %+v, %v after %v", p, err, took)
		}
	})

	t.Run("an unknown agent has no inbox", func(t *testing.T) {
		if _, err := OldestSeq(ctx, db, "nobody"); err == nil {
			t.Fatal("no error")
		}
	})
}

// The inbox and janitor statements must use their indexes on a table that
// holds many recipients, never a table scan.
func TestQueriesUseTheirIndexes(t *testing.T) {
	db, _ := mysqltest.New(t)
	rs := ids("q", 200)
	withAgents(t, db, rs...)
	var evs []Event
	for _, r := range rs {
		for i := range 10 {
			evs = append(evs, event(r, fmt.Sprint(i), `{}`))
		}
	}
	if err := appendIn(t, db, evs); err != nil {
		t.Fatal(err)
	}
	sent := testT0.Add(-time.Hour)
	if _, err := db.Exec("UPDATE outbox_events SET delivery = 'sent', sent_at = ? WHERE seq <= 5", sent); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("ANALYZE TABLE outbox_events, inbox_counters"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		query string
		args  []any
		key   string
	}{
		{"the inbox read ranges over (recipient, seq)", readInboxSQL, []any{"q0100", 3, 100}, "outbox_recipient_seq"},
		{"the janitor's sent select walks (delivery, sent_at)", oldSentSQL, []any{testT0, 500}, "outbox_sent_age"},
		{"the janitor's dead-letter select walks (delivery, sent_at)", oldFailedSQL, []any{testT0, 500}, "outbox_sent_age"},
		{"the janitor's delete goes by primary key", expand(deleteSettled, 3), []any{1, 2, 3, testT0}, "PRIMARY"},
		{"the counter lock ranges over the primary key", expand(lockCountersSQL, 3), []any{"q0001", 1, "q0002", 1, "q0003", 1, "q0001", "q0002", "q0003"}, "PRIMARY"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plans := mysqltest.Explain(t, db, c.query, c.args...)
			if len(plans) == 0 || plans[0].Key != c.key || plans[0].Type == "ALL" || plans[0].Type == "index" {
				t.Fatalf("plan %+v, want a range or ref on %s", plans, c.key)
			}
		})
	}
	t.Run("oldest_seq reads one recipient's index prefix", func(t *testing.T) {
		for _, p := range mysqltest.Explain(t, db, oldestSeqSQL, "q0100", "q0100") {
			if p.Type == "ALL" || p.Type == "index" {
				t.Fatalf("a scan in %+v", p)
			}
		}
	})
}

func TestInboxReadAcrossBatches(t *testing.T) {
	db, _ := mysqltest.New(t)
	withAgents(t, db, "r")
	var evs []Event
	for i := range 3*inboxReadBatch + 5 {
		evs = append(evs, event("r", fmt.Sprint("m", i), fmt.Sprintf(`{"n":%d}`, i)))
	}
	if err := appendIn(t, db, evs); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		after int64
		limit int
		want  int
	}{
		{0, 500, len(evs)},
		{0, inboxReadBatch + 1, inboxReadBatch + 1},
		{inboxReadBatch - 1, 2 * inboxReadBatch, 2 * inboxReadBatch},
		{int64(len(evs)) - 3, 500, 3},
	} {
		t.Run(fmt.Sprintf("after %d with limit %d reads %d gapless events", c.after, c.limit, c.want), func(t *testing.T) {
			got, err := Inbox{DB: db}.Read(context.Background(), "r", c.after, c.limit)
			if err != nil || len(got) != c.want {
				t.Fatalf("%d events, %v", len(got), err)
			}
			for i, e := range got {
				if e.Seq != c.after+int64(i)+1 {
					t.Fatalf("event %d has seq %d", i, e.Seq)
				}
			}
		})
	}
}
