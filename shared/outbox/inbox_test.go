package outbox

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// fakeTime is a clock that moves only when a poll sleeps, so Wait's pauses
// and deadline are exact whatever the machine's load.
type fakeTime struct {
	mu     sync.Mutex
	now    time.Time
	pauses []time.Duration
}

func (f *fakeTime) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeTime) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, d)
	f.now = f.now.Add(d)
	return nil
}

// waitResult runs in.Wait in the background; the test reads its answer with
// answer, which fails at the test's deadline rather than waiting for ever.
type waitResult struct {
	page Page
	err  error
}

func startWait(ctx context.Context, in Inbox, recipient string, after int64, wait time.Duration) <-chan waitResult {
	done := make(chan waitResult, 1)
	go func() {
		p, err := in.Wait(ctx, recipient, after, 10, wait)
		done <- waitResult{p, err}
	}()
	return done
}

// answerWithin is far shorter than the waits it guards (an hour), so a Wait
// that ends by its own timeout instead of the event it is tested for fails.
const answerWithin = 20 * time.Second

func answer(t *testing.T, done <-chan waitResult, what string) waitResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(answerWithin):
		t.Fatalf("no answer %v after %s", answerWithin, what)
		return waitResult{}
	}
}

// polling returns a Sleep that really sleeps and closes entered on its
// first call: the request has found nothing and is waiting.
func polling(entered chan struct{}) func(context.Context, time.Duration) error {
	var once sync.Once
	return func(ctx context.Context, d time.Duration) error {
		once.Do(func() { close(entered) })
		return sleepCtx(ctx, d)
	}
}

// waitingFor starts an hour's Wait for recipient's events after after and
// returns once it has found nothing and is polling, so what the test does
// next happens during the wait. It fails the test if the wait answers
// before it polls.
func waitingFor(t *testing.T, ctx context.Context, db *mysql.DB, recipient string, after int64) <-chan waitResult {
	t.Helper()
	entered := make(chan struct{})
	done := startWait(ctx, Inbox{DB: db, Sleep: polling(entered)}, recipient, after, time.Hour)
	select {
	case <-entered:
	case r := <-done:
		t.Fatalf("the wait answered %+v, %v before it polled", r.page, r.err)
	case <-time.After(answerWithin):
		t.Fatalf("the wait never polled within %v", answerWithin)
	}
	return done
}

func TestInboxWait(t *testing.T) {
	db, _ := mysqltest.New(t)
	identitytest.Agents(t, db, "r", "other", "late")
	if err := appendIn(t, db, []Event{event("r", "1", `{"n":1}`), event("r", "2", `{"n":2}`), event("other", "x", `{}`)}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("events after the cursor come at once, up to the limit", func(t *testing.T) {
		clock := &fakeTime{now: testT0}
		p, err := Inbox{DB: db, Clock: clock.Now, Sleep: clock.Sleep}.Wait(ctx, "r", 0, 1, 5*time.Second)
		if err != nil || len(p.Events) != 1 || p.Events[0].Seq != 1 || p.NextAfter != 1 || p.OldestSeq != 1 || string(p.Events[0].Body) != `{"n":1}` {
			t.Fatalf("page %+v, %v", p, err)
		}
		if len(clock.pauses) != 0 {
			t.Fatalf("a request with events waited %v", clock.pauses)
		}
	})

	t.Run("an idle wait polls with a doubling pause capped at MaxPoll until its wait is over", func(t *testing.T) {
		clock := &fakeTime{now: testT0}
		in := Inbox{DB: db, MinPoll: 100 * time.Millisecond, MaxPoll: time.Second, Clock: clock.Now, Sleep: clock.Sleep}
		p, err := in.Wait(ctx, "r", 2, 10, 2500*time.Millisecond)
		if err != nil || len(p.Events) != 0 || p.NextAfter != 2 {
			t.Fatalf("page %+v, %v", p, err)
		}
		// 5 pauses, 6 queries in 2.5 s (a fixed 100 ms poll would make 25),
		// the last one cut to what is left of the wait.
		want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second}
		if fmt.Sprint(clock.pauses) != fmt.Sprint(want) {
			t.Fatalf("pauses %v, want %v", clock.pauses, want)
		}
		if waited := clock.Now().Sub(testT0); waited != 2500*time.Millisecond {
			t.Fatalf("the wait answered after %v of its 2.5 s", waited)
		}
	})

	t.Run("a wait ends a second before the function's deadline", func(t *testing.T) {
		// The deadline is an hour away on the real clock, so it never fires
		// during the test; the wait (two hours) is cut by it on the fake one.
		start := time.Now()
		dctx, cancel := context.WithDeadline(ctx, start.Add(time.Hour))
		defer cancel()
		clock := &fakeTime{now: start}
		in := Inbox{DB: db, MinPoll: 100 * time.Millisecond, MaxPoll: 10 * time.Minute, Clock: clock.Now, Sleep: clock.Sleep}
		p, err := in.Wait(dctx, "r", 2, 10, 2*time.Hour)
		if err != nil || len(p.Events) != 0 {
			t.Fatalf("page %+v, %v", p, err)
		}
		if end, want := clock.Now(), start.Add(time.Hour-time.Second); !end.Equal(want) {
			t.Fatalf("the wait answered %v after it started, want %v (a second before the deadline)", end.Sub(start), want.Sub(start))
		}
	})

	t.Run("a wait canceled by the client answers with an empty page", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := waitingFor(t, cctx, db, "r", 2)
		cancel()
		r := answer(t, done, "the client canceled")
		if r.err != nil || len(r.page.Events) != 0 || r.page.NextAfter != 2 || r.page.OldestSeq != 1 {
			t.Fatalf("page %+v, %v", r.page, r.err)
		}
	})

	t.Run("a waiting request answers with an event that arrives during the wait", func(t *testing.T) {
		done := waitingFor(t, ctx, db, "late", 0)
		if err := appendIn(t, db, []Event{event("late", "1", `{"n":"late"}`)}); err != nil {
			t.Fatal(err)
		}
		r := answer(t, done, "an event arrived")
		if r.err != nil || len(r.page.Events) != 1 || r.page.Events[0].Seq != 1 || string(r.page.Events[0].Body) != `{"n":"late"}` {
			t.Fatalf("page %+v, %v", r.page, r.err)
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
	identitytest.Agents(t, db, rs...)
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
	identitytest.Agents(t, db, "r")
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
