package tasks_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"

	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

// parkedSleeps makes every waiting long poll of the given services block
// in its pause until release is called, so a test sees exactly which
// requests are being held, without timing anything.
type parkedSleeps struct {
	in      atomic.Int32
	release chan struct{}
	once    sync.Once
}

func parkSleeps(svcs ...*tasks.Service) *parkedSleeps {
	p := &parkedSleeps{release: make(chan struct{})}
	for _, s := range svcs {
		s.Inbox.Sleep = func(ctx context.Context, d time.Duration) error {
			p.in.Add(1)
			defer p.in.Add(-1)
			select {
			case <-p.release:
				return context.Canceled // ends the poll: it answers what it has
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return p
}

func (p *parkedSleeps) free() { p.once.Do(func() { close(p.release) }) }

// eventually polls cond until it holds or 10 s pass; what describes the
// state when it does not.
func eventually(t *testing.T, what func() string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what())
		}
	}
}

func TestConcurrentLongPollsOfOneAgentAreCapped(t *testing.T) {
	for _, c := range []struct {
		name    string
		max     int // Inbox.MaxPolls (0: the default)
		want    int
		callers int
	}{
		{"10 long polls by one agent hold the default 2 and answer the other 8 at once", 0, 2, 10},
		{"with the cap set to 3, 3 of 10 are held", 3, 3, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.agents(t, "ann")
			// Two function instances on one database: the cap is the
			// agent's, not an instance's.
			other := &tasks.Service{DB: f.db, Clock: f.clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			otherEps := taskshttp.Endpoints(other)
			f.svc.Inbox.MaxPolls, other.Inbox.MaxPolls = c.max, c.max
			p := parkSleeps(f.svc, other)
			defer p.free()

			var answered atomic.Int32
			var wg sync.WaitGroup
			statuses := make([]int, c.callers)
			for i := range c.callers {
				eps := f.eps
				if i%2 == 1 {
					eps = otherEps
				}
				wg.Go(func() {
					r := callEndpoint(t, eps, req{fn: "InboxFunction", caller: "ann", method: "GET", path: "/v1/inbox", query: map[string]string{"wait": "20"}})
					statuses[i] = r.Status
					answered.Add(1)
				})
			}
			eventually(t, func() string {
				return fmt.Sprintf("%d of %d polls answered at once, %d waiting; want %d waiting", answered.Load(), c.callers, p.in.Load(), c.want)
			}, func() bool {
				return int(answered.Load()) == c.callers-c.want && int(p.in.Load()) == c.want
			})
			if n := f.count(t, "SELECT COUNT(*) FROM inbox_polls WHERE agent_id = 'ann' AND expires_at > UTC_TIMESTAMP(6)"); n != c.want {
				t.Errorf("%d live lease rows while %d polls wait, want %d", n, c.want, c.want)
			}
			// Nothing more is answered or held while the held ones wait.
			time.Sleep(50 * time.Millisecond)
			if int(answered.Load()) != c.callers-c.want || int(p.in.Load()) != c.want {
				t.Fatalf("answered %d, waiting %d; want %d and %d", answered.Load(), p.in.Load(), c.callers-c.want, c.want)
			}
			p.free()
			wg.Wait()
			for i, st := range statuses {
				if st != 200 {
					t.Errorf("poll %d answered %d", i, st)
				}
			}
			if n := f.count(t, "SELECT COUNT(*) FROM inbox_polls WHERE agent_id = 'ann'"); n != 0 {
				t.Errorf("%d lease rows left after every poll answered", n)
			}
		})
	}
}

func TestALongPollSlotOfACrashedHolderExpires(t *testing.T) {
	for _, c := range []struct {
		name    string
		expires string
		held    bool
	}{
		{"slots whose holders died (expired rows) are taken over", "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND", true},
		{"slots of live polls are not", "UTC_TIMESTAMP(6) + INTERVAL 30 SECOND", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.agents(t, "ann")
			for slot := range 2 {
				if _, err := f.db.Exec("INSERT INTO inbox_polls (agent_id, slot, holder, expires_at) VALUES ('ann', ?, 'gone', "+c.expires+")", slot); err != nil {
					t.Fatal(err)
				}
			}
			p := parkSleeps(f.svc)
			defer p.free()
			done := make(chan response, 1)
			go func() {
				done <- f.inbox(t, "ann", map[string]string{"wait": "20"})
			}()
			if c.held {
				eventually(t, func() string { return "the poll is not held" }, func() bool { return p.in.Load() == 1 })
				p.free()
			}
			select {
			case r := <-done:
				if r.Status != 200 {
					t.Fatalf("got %d %s", r.Status, r.Body)
				}
				if c.held && p.in.Load() != 0 {
					t.Fatal("still waiting after the answer")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the poll was held although both slots are live")
			}
		})
	}
}

func TestAGroupSendCostsOneRateUnitPerRecipient(t *testing.T) {
	f := newFixture(t)
	members := append([]string{"ann"}, memberIDs("m", 100)...)
	f.agents(t, members...)
	f.agents(t, "bob")
	f.friends(t, "ann", "bob")
	f.group(t, "hundred", "ctx-hundred", members...)
	f.freeze(true) // no refill: what a request spends stays visible
	defer f.freeze(false)
	tat := func() int64 {
		var us int64
		if err := f.db.QueryRow("SELECT tat_us FROM rate_limits WHERE agent_id = 'ann'").Scan(&us); err != nil {
			t.Fatal(err)
		}
		return us
	}
	unit := (time.Second / identity.RatePerSecond).Microseconds()

	t.Run("a send to 100 recipients spends 100 units of a full budget", func(t *testing.T) {
		f.refill(t, "ann")
		r := f.groupSend(t, "ann", "hundred", tasks.GroupSendRequest{Parts: text("to all 100")})
		if r.Status != 202 {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		if spent := (tat() - f.now.UnixMicro()) / unit; spent != 100 {
			t.Fatalf("the send spent %d units, want 100", spent)
		}
		r = f.send2(t, "ann", "bob")
		if r.Status != 429 || r.Headers["Retry-After"] == "" {
			t.Fatalf("the next request: %d %v %s, want 429 with Retry-After (budget spent)", r.Status, r.Headers, r.Body)
		}
	})

	t.Run("with one unit spent, a send to 100 is a 429 with Retry-After that writes nothing", func(t *testing.T) {
		f.refill(t, "ann")
		if r := f.send2(t, "ann", "bob"); r.Status != 202 {
			t.Fatalf("send: %d %s", r.Status, r.Body)
		}
		before, tatBefore := f.state(t), tat()
		r := f.groupSend(t, "ann", "hundred", tasks.GroupSendRequest{Parts: text("one too many")})
		if r.Status != 429 || r.code() != "rate_limited" || r.Headers["Retry-After"] != "1" {
			t.Fatalf("got %d %v %s, want 429 with Retry-After 1", r.Status, r.Headers, r.Body)
		}
		if after := f.state(t); after != before || tat() != tatBefore {
			t.Fatalf("a refused fan-out changed the database (or spent budget): %+v -> %+v", before, after)
		}
		f.advance(time.Second / identity.RatePerSecond) // one unit back: a full bucket
		if r := f.groupSend(t, "ann", "hundred", tasks.GroupSendRequest{Parts: text("now it fits")}); r.Status != 202 {
			t.Fatalf("after the refill: %d %s", r.Status, r.Body)
		}
	})

	t.Run("a send to more recipients than the burst passes on a full budget and leaves a debt", func(t *testing.T) {
		big := append([]string{"ann"}, memberIDs("b", 250)...)
		f.agents(t, big[1:]...)
		f.group(t, "big", "ctx-big", big...)
		f.refill(t, "ann")
		if r := f.groupSend(t, "ann", "big", tasks.GroupSendRequest{Parts: text("to 250")}); r.Status != 202 {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		r := f.send2(t, "ann", "bob")
		// 250 units are 5 s of budget; one more request fits once the
		// bucket is back to its burst of 100 (2 s) less one unit: 3.02 s.
		if r.Status != 429 || r.Headers["Retry-After"] != "4" {
			t.Fatalf("right after: %d %v, want 429 with Retry-After 4", r.Status, r.Headers)
		}
	})
}

// send2 is one direct send whose answer the caller checks.
func (f *fixture) send2(t testing.TB, from, to string) response {
	t.Helper()
	return f.call(t, req{fn: "SendMessageFunction", caller: from, method: "POST", path: "/v1/messages", body: tasks.SendRequest{To: to, Parts: text("x")}})
}

func TestAGroupSendSkipsMembersOnEitherSideOfABlock(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "blocked", "blocker", "cid")
	f.group(t, "g", "ctx-g", "ann", "blocked", "blocker", "cid")
	f.group(t, "pair", "ctx-pair", "ann", "blocker")
	block := func(who, whom string) {
		if _, err := f.db.Exec("INSERT INTO agent_blocks (agent_id, blocked_id, created_at) VALUES (?, ?, ?)", who, whom, t0); err != nil {
			t.Fatal(err)
		}
	}
	block("ann", "blocked")
	block("blocker", "ann")

	t.Run("only the member on no side of a block gets the message and is listed", func(t *testing.T) {
		r := f.groupSend(t, "ann", "g", tasks.GroupSendRequest{Parts: text("hello group")})
		if r.Status != 202 {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		var res tasks.GroupSendResult
		r.decode(t, &res)
		if len(res.Tasks) != 1 || res.Tasks[0].To != "cid" {
			t.Fatalf("tasks %+v, want one for cid", res.Tasks)
		}
		for _, m := range []string{"blocked", "blocker"} {
			if n := f.count(t, "SELECT COUNT(*) FROM outbox_events WHERE recipient = ?", m); n != 0 {
				t.Errorf("%s got %d events", m, n)
			}
			if n := f.count(t, "SELECT COUNT(*) FROM tasks WHERE recipient = ?", m); n != 0 {
				t.Errorf("%s got %d tasks", m, n)
			}
		}
	})
	t.Run("a member's own sends reach the one who blocked the sender's target", func(t *testing.T) {
		// blocked and blocker are not blocked between themselves.
		r := f.groupSend(t, "blocked", "g", tasks.GroupSendRequest{Parts: text("hi")})
		var res tasks.GroupSendResult
		r.decode(t, &res)
		if r.Status != 202 || len(res.Tasks) != 2 || res.Tasks[0].To != "blocker" || res.Tasks[1].To != "cid" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})
	t.Run("a group where everyone else is on a block answers like an empty group", func(t *testing.T) {
		before := f.state(t)
		r := f.groupSend(t, "ann", "pair", tasks.GroupSendRequest{Parts: text("anyone?")})
		if r.Status != 422 || r.code() != "no_recipients" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		f.unchanged(t, before, "state changed")
	})
}
