package tasks_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

func TestInboxAPI(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob", "carol")
	f.friends(t, "alice", "bob")
	f.friends(t, "alice", "carol")
	for i := range 5 {
		f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text(fmt.Sprintf("m%d", i)), MessageID: fmt.Sprintf("m%d", i)})
	}
	f.send(t, "alice", tasks.SendRequest{To: "carol", Parts: text("for carol only")})

	t.Run("pages follow seq order from the cursor", func(t *testing.T) {
		var got []string
		after := "0"
		for range 4 {
			r := f.inbox(t, "bob", map[string]string{"after": after, "limit": "2"})
			if r.Status != 200 {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			var p inboxPage
			r.decode(t, &p)
			page := ""
			for _, e := range p.Events {
				page += fmt.Sprintf("%d:%s ", e.Seq, e.MessageID)
			}
			got = append(got, fmt.Sprintf("[%s] next=%d oldest=%d", page, p.NextAfter, p.OldestSeq))
			after = fmt.Sprint(p.NextAfter)
		}
		want := "[[1:m0 2:m1 ] next=2 oldest=1 [3:m2 4:m3 ] next=4 oldest=1 [5:m4 ] next=5 oldest=1 [] next=5 oldest=1]"
		if fmt.Sprint(got) != want {
			t.Fatalf("pages\n got  %s\n want %s", fmt.Sprint(got), want)
		}
	})

	t.Run("the default page starts at the beginning", func(t *testing.T) {
		r := f.inbox(t, "bob", nil)
		var p inboxPage
		r.decode(t, &p)
		if r.Status != 200 || len(p.Events) != 5 || p.Events[0].Seq != 1 || p.NextAfter != 5 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})

	t.Run("an agent sees only its own events", func(t *testing.T) {
		evs := f.events(t, "carol")
		if len(evs) != 1 || evs[0].To != "carol" || evs[0].Seq != 1 {
			t.Fatalf("carol's inbox: %+v", evs)
		}
		if evs := f.events(t, "alice"); len(evs) != 0 {
			t.Fatalf("the sender's inbox has %d events", len(evs))
		}
	})

	t.Run("events are full envelopes with the body opened and no sealed field", func(t *testing.T) {
		r := f.inbox(t, "carol", nil)
		var raw struct {
			Events []map[string]any `json:"events"`
		}
		r.decode(t, &raw)
		e := raw.Events[0]
		for _, k := range []string{"v", "event_id", "seq", "type", "to", "from", "task_id", "context_id", "message_id", "occurred_at", "key_epoch", "body", "delivery"} {
			if _, ok := e[k]; !ok {
				t.Errorf("envelope lacks %q: %v", k, e)
			}
		}
		if _, ok := e["sealed"]; ok {
			t.Errorf("envelope has sealed: %v", e)
		}
		if body, ok := e["body"].(map[string]any); !ok || body["message"] == nil || body["task"] == nil {
			t.Errorf("body is not the opened event body: %v", e["body"])
		}
	})

	t.Run("dead-lettered and sent events are served with their delivery state", func(t *testing.T) {
		if _, err := f.db.Exec("UPDATE outbox_events SET delivery = 'failed', last_error = 'broker down' WHERE recipient = 'bob' AND seq = 2"); err != nil {
			t.Fatal(err)
		}
		// seq 1 as rows settled before outbox.SentDelivery were, seq 3 as the
		// dispatcher settles them now: both are served as "sent".
		if _, err := f.db.Exec("UPDATE outbox_events SET delivery = 'sent', sent_at = ? WHERE recipient = 'bob' AND seq = 1", t0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.Exec("UPDATE outbox_events SET delivery = ?, sent_at = ? WHERE recipient = 'bob' AND seq = 3", outbox.SentDelivery, t0); err != nil {
			t.Fatal(err)
		}
		// Settled events are out of the queue; seq 4 stays in it.
		if _, err := f.db.Exec("DELETE FROM outbox_queue WHERE recipient = 'bob' AND seq <= 3"); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range f.events(t, "bob") {
			got = append(got, e.Delivery)
		}
		if want := []string{"sent", "failed", "sent", "pending", "pending"}; !slices.Equal(got, want) {
			t.Fatalf("deliveries %q, want %q", got, want)
		}
	})

	t.Run("oldest_seq says what the retention still holds", func(t *testing.T) {
		if _, err := f.db.Exec("DELETE FROM outbox_events WHERE recipient = 'bob' AND seq <= 2"); err != nil {
			t.Fatal(err)
		}
		p := f.inboxAfter(t, "bob", 0)
		if p.OldestSeq != 3 || len(p.Events) != 3 || p.Events[0].Seq != 3 {
			t.Fatalf("oldest %d, %d events from seq %d", p.OldestSeq, len(p.Events), p.Events[0].Seq)
		}
		if _, err := f.db.Exec("DELETE FROM outbox_events WHERE recipient = 'bob'"); err != nil {
			t.Fatal(err)
		}
		if p := f.inboxAfter(t, "bob", 0); p.OldestSeq != 6 || len(p.Events) != 0 {
			t.Fatalf("with nothing held: oldest %d (want the next seq, 6), %d events", p.OldestSeq, len(p.Events))
		}
	})

	bad := []struct {
		name  string
		query map[string]string
	}{
		{"a negative cursor", map[string]string{"after": "-1"}},
		{"a cursor that is not a number", map[string]string{"after": "latest"}},
		{"a limit of 0", map[string]string{"limit": "0"}},
		{"a limit over 500", map[string]string{"limit": "501"}},
		{"a wait over 20 s", map[string]string{"wait": "21"}},
		{"a wait in fractions", map[string]string{"wait": "1.5"}},
		{"a negative wait", map[string]string{"wait": "-1"}},
		{"a wait whose duration overflows", map[string]string{"wait": "9223372037"}},
	}
	for _, c := range bad {
		t.Run(c.name+" is a 400", func(t *testing.T) {
			if r := f.inbox(t, "bob", c.query); r.Status != 400 || r.code() != "invalid_query" {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
		})
	}
}

// pausedPoll drives a long poll's pauses by hand: the poll's clock only
// moves when the test lets a pause end, so what the poll does at each point
// of its wait is checked without waiting in real time or asserting one.
type pausedPoll struct {
	mu     sync.Mutex
	now    time.Time
	pauses chan pollPause
}

type pollPause struct {
	d    time.Duration
	done chan struct{}
}

func newPausedPoll(f *fixture) *pausedPoll {
	p := &pausedPoll{now: t0, pauses: make(chan pollPause)}
	f.svc.Inbox.Clock = func() time.Time {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.now
	}
	f.svc.Inbox.Sleep = func(ctx context.Context, d time.Duration) error {
		pp := pollPause{d: d, done: make(chan struct{})}
		select {
		case p.pauses <- pp:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-pp.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return p
}

// next waits for the poll's next pause; it fails the test at its deadline.
func (p *pausedPoll) next(t *testing.T) pollPause {
	t.Helper()
	select {
	case pp := <-p.pauses:
		return pp
	case <-time.After(raceDeadline):
		t.Fatal("the poll never paused")
		return pollPause{}
	}
}

// end lets the pause pp end, its time passed on the poll's clock.
func (p *pausedPoll) end(pp pollPause) {
	p.mu.Lock()
	p.now = p.now.Add(pp.d)
	p.mu.Unlock()
	close(pp.done)
}

func TestInboxLongPoll(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob")
	f.friends(t, "alice", "bob")
	poll := newPausedPoll(f)
	answer := func(query map[string]string) <-chan response {
		ch := make(chan response, 1)
		go func() { ch <- f.inbox(t, "bob", query) }()
		return ch
	}
	// got waits for the poll's answer, failing at the deadline; a pause
	// instead of the answer is a failure too.
	got := func(t *testing.T, ch <-chan response) inboxPage {
		t.Helper()
		select {
		case r := <-ch:
			var p inboxPage
			r.decode(t, &p)
			if r.Status != 200 {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			return p
		case pp := <-poll.pauses:
			t.Fatalf("the poll paused again (%v) instead of answering", pp.d)
		case <-time.After(raceDeadline):
			t.Fatal("the poll never answered")
		}
		return inboxPage{}
	}

	t.Run("a waiting request returns at its next poll after an event arrives", func(t *testing.T) {
		ch := answer(map[string]string{"after": "0", "wait": "10"})
		first := poll.next(t) // the inbox was empty: the request waits
		f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("wake up"), MessageID: "wake"})
		poll.end(first)
		p := got(t, ch)
		if len(p.Events) != 1 || p.Events[0].MessageID != "wake" {
			t.Fatalf("%+v", p)
		}
	})

	t.Run("an idle wait pauses at most a second at a time and ends empty at its deadline", func(t *testing.T) {
		ch := answer(map[string]string{"after": "1", "wait": "3"})
		var waited time.Duration
		var pauses []time.Duration
		for waited < 3*time.Second {
			pp := poll.next(t)
			if pp.d <= 0 || pp.d > time.Second {
				t.Fatalf("a pause of %v; pauses are from 100 ms up to 1 s", pp.d)
			}
			pauses = append(pauses, pp.d)
			waited += pp.d
			poll.end(pp)
		}
		p := got(t, ch)
		if len(p.Events) != 0 || p.NextAfter != 1 {
			t.Fatalf("%+v", p)
		}
		if waited != 3*time.Second {
			t.Fatalf("the pauses %v add up to %v, want the 3 s asked for", pauses, waited)
		}
	})
}
