package tasks

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

func TestInboxAPI(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob", "carol")
	f.friends(t, "alice", "bob")
	f.friends(t, "alice", "carol")
	for i := range 5 {
		f.send(t, "alice", SendRequest{To: "bob", Parts: text(fmt.Sprintf("m%d", i)), MessageID: fmt.Sprintf("m%d", i)})
	}
	f.send(t, "alice", SendRequest{To: "carol", Parts: text("for carol only")})

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
		if _, err := f.db.Exec("UPDATE outbox_events SET delivery = 'sent', sent_at = ? WHERE recipient = 'bob' AND seq = 1", t0); err != nil {
			t.Fatal(err)
		}
		evs := f.events(t, "bob")
		if len(evs) != 5 || evs[0].Delivery != "sent" || evs[1].Delivery != "failed" || evs[2].Delivery != "pending" {
			t.Fatalf("deliveries: %+v", evs)
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

func TestInboxLongPoll(t *testing.T) {
	f := newFixture(t)
	f.svc.Clock = mesh.SystemClock // the poll waits in real time
	f.agents(t, "alice", "bob")
	f.friends(t, "alice", "bob")

	t.Run("a waiting request returns as soon as an event arrives", func(t *testing.T) {
		go func() {
			time.Sleep(400 * time.Millisecond)
			r := f.call(t, req{fn: "SendMessageFunction", caller: "alice", method: "POST", path: "/v1/messages",
				body: SendRequest{To: "bob", Parts: text("wake up"), MessageID: "wake"}})
			if r.Status != 202 {
				t.Errorf("send: %d %s", r.Status, r.Body)
			}
		}()
		start := time.Now()
		r := f.inbox(t, "bob", map[string]string{"after": "0", "wait": "10"})
		took := time.Since(start)
		var p inboxPage
		r.decode(t, &p)
		if r.Status != 200 || len(p.Events) != 1 || p.Events[0].MessageID != "wake" {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		// The backoff is at most 1 s, so the event is seen within ~1 s of arriving.
		if took < 400*time.Millisecond || took > 2500*time.Millisecond {
			t.Fatalf("took %v", took)
		}
	})

	t.Run("an idle wait ends empty after the wait", func(t *testing.T) {
		start := time.Now()
		r := f.inbox(t, "bob", map[string]string{"after": "1", "wait": "1"})
		took := time.Since(start)
		var p inboxPage
		r.decode(t, &p)
		if r.Status != 200 || len(p.Events) != 0 || p.NextAfter != 1 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		if took < time.Second || took > 2*time.Second {
			t.Fatalf("took %v", took)
		}
	})
}
