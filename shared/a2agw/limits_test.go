package a2agw

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

func immediate(id string) map[string]any {
	return map[string]any{"message": textMessage(id, ""), "configuration": map[string]any{"returnImmediately": true}}
}

func blocking(id string) map[string]any { return map[string]any{"message": textMessage(id, "")} }

// liveWaits counts agent's held A2A wait slots.
func (f *fixture) liveWaits(t *testing.T, agent string) int {
	t.Helper()
	var n int
	if err := f.db.QueryRow("SELECT COUNT(*) FROM a2a_waits WHERE agent_id = ?", agent).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holdAllWaits has "another instance" hold every one of agent's slots,
// live for an hour.
func (f *fixture) holdAllWaits(t *testing.T, agent string) {
	t.Helper()
	for slot := range f.g.maxWaits() {
		if _, err := f.db.Exec(`INSERT INTO a2a_waits (agent_id, slot, holder, expires_at)
VALUES (?, ?, 'other-instance', DATE_ADD(UTC_TIMESTAMP(6), INTERVAL 1 HOUR))`, agent, slot); err != nil {
			t.Fatal(err)
		}
	}
}

// callAny posts a JSON-RPC call (rpc != "") or an HTTP+JSON one (path
// under /rest) from alice to target; a call still open after 20 s fails
// the test (a wait the cap should have refused).
func (f *fixture) callAny(t *testing.T, target, rpc, path string, params any) (int, http.Header, []byte) {
	t.Helper()
	url, body := f.base(target)+restPrefix+path, mustJSON(params)
	if rpc != "" {
		url, body = f.base(target), `{"jsonrpc":"2.0","id":7,"method":"`+rpc+`","params":`+body+`}`
	}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// Waiting calls (a blocking SendMessage, SendStreamingMessage,
// SubscribeToTask) hold one of the calling agent's MaxWaits slots, across
// instances (rows of a2a_waits); past the cap a call answers the rate
// limit's 429 with Retry-After before it sends anything, alike for a friend
// and a stranger; a dead instance's slot expires.
func TestWaitingCallsAreCappedPerCaller(t *testing.T) {
	f := newFixture(t)
	f.g.MaxWaits = 2
	f.g.StreamMax = time.Hour
	ctx := context.Background()
	_, b := f.rpc(t, "alice", "bob", "SendMessage", immediate("m-cap-seed"))
	seed := sendResult(t, b).ID

	// streamHolds opens a subscription to a fresh task, checks the slot it
	// holds, then completes the task and checks the slot is freed when the
	// stream ends.
	streamHolds := func(t *testing.T, msgID string) {
		_, b := f.rpc(t, "alice", "bob", "SendMessage", immediate(msgID))
		id := sendResult(t, b).ID
		s := f.stream(t, "bob", "SubscribeToTask", map[string]any{"id": id})
		if k := kind(t, <-s); k != "task" {
			t.Fatalf("first event %s", k)
		}
		if n := f.liveWaits(t, "alice"); n != 1 {
			t.Errorf("alice holds %d slots while her stream runs, want 1", n)
		}
		if _, err := f.ts.UpdateStatus(ctx, "bob", id, tasks.StatusRequest{Status: mesh.TaskCompleted}); err != nil {
			t.Fatal(err)
		}
		for range closing(t, s) {
		}
		if n := f.liveWaits(t, "alice"); n != 0 {
			t.Errorf("alice holds %d slots after her stream ended, want 0", n)
		}
	}
	t.Run("a stream holds one of its caller's slots while it runs and frees it when it ends", func(t *testing.T) {
		streamHolds(t, "m-cap-stream")
	})

	f.holdAllWaits(t, "alice")
	tables := []string{"tasks", "task_messages", "outbox_events", "idempotency_keys"}
	before := map[string]int{}
	for _, table := range tables {
		before[table] = f.count(t, table)
	}
	for _, c := range []struct {
		name, rpc, path string
		params          map[string]any
	}{
		{name: "JSON-RPC blocking SendMessage", rpc: "SendMessage", params: blocking("m-cap-1")},
		{name: "JSON-RPC SendStreamingMessage", rpc: "SendStreamingMessage", params: blocking("m-cap-2")},
		{name: "JSON-RPC SubscribeToTask", rpc: "SubscribeToTask", params: map[string]any{"id": seed}},
		{name: "HTTP+JSON blocking message:send", path: "/message:send", params: blocking("m-cap-3")},
		{name: "HTTP+JSON message:stream", path: "/message:stream", params: blocking("m-cap-4")},
		{name: "HTTP+JSON subscribe", path: "/tasks/" + seed + ":subscribe"},
	} {
		t.Run(c.name+" past the cap answers 429 with Retry-After, alike to a friend and a stranger", func(t *testing.T) {
			answers := map[string]string{}
			for _, target := range []string{"bob", "carol"} {
				st, h, b := f.callAny(t, target, c.rpc, c.path, c.params)
				if st != http.StatusTooManyRequests || h.Get("Retry-After") != strconv.Itoa(waitRetryAfter) || h.Get("Content-Type") != "application/json" {
					t.Errorf("%s: status %d headers %v body %s", target, st, h, b)
				}
				if c.rpc != "" {
					if r := decodeRPC(t, b); r.Error == nil || r.Error.Code != -32000 || r.ID != float64(7) {
						t.Errorf("%s: body %s", target, b)
					}
				} else if e := decodeREST(t, b); e.Error.Code != 429 || e.Error.Status != "RESOURCE_EXHAUSTED" {
					t.Errorf("%s: body %s", target, b)
				}
				answers[target] = strconv.Itoa(st) + " " + h.Get("Retry-After") + " " + normalize(b)
			}
			if answers["bob"] != answers["carol"] {
				t.Errorf("friend: %s\nstranger: %s", answers["bob"], answers["carol"])
			}
		})
	}
	t.Run("the refused calls sent nothing", func(t *testing.T) {
		for _, table := range tables {
			if n := f.count(t, table); n != before[table] {
				t.Errorf("%s has %d rows, had %d", table, n, before[table])
			}
		}
	})
	t.Run("returnImmediately and reads are not capped", func(t *testing.T) {
		if _, b := f.rpc(t, "alice", "bob", "SendMessage", immediate("m-cap-immediate")); decodeRPC(t, b).Error != nil {
			t.Errorf("SendMessage: %s", b)
		}
		if _, b := f.rpc(t, "alice", "bob", "GetTask", map[string]any{"id": seed}); decodeRPC(t, b).Error != nil {
			t.Errorf("GetTask: %s", b)
		}
	})
	t.Run("another caller's slots are its own", func(t *testing.T) {
		// dave, not bob's friend, gets bob's endpoint's TaskNotFound: past
		// the cap check, which alice's slots do not fill.
		_, _, b := f.call(t, http.MethodPost, f.base("bob"), f.tokens["dave"], "application/json",
			`{"jsonrpc":"2.0","id":7,"method":"SubscribeToTask","params":{"id":"`+seed+`"}}`)
		if r := decodeRPC(t, b); r.Error == nil || r.Error.Code != -32001 {
			t.Errorf("%s", b)
		}
	})
	t.Run("the slots of an instance that died expire and are taken again", func(t *testing.T) {
		if _, err := f.db.Exec(`UPDATE a2a_waits SET expires_at = DATE_SUB(UTC_TIMESTAMP(6), INTERVAL 1 SECOND) WHERE agent_id = 'alice'`); err != nil {
			t.Fatal(err)
		}
		_, b := f.rpc(t, "alice", "bob", "SendMessage", immediate("m-cap-after"))
		id := sendResult(t, b).ID
		s := f.stream(t, "bob", "SubscribeToTask", map[string]any{"id": id})
		if k := kind(t, <-s); k != "task" {
			t.Fatalf("first event %s", k)
		}
		if _, err := f.ts.UpdateStatus(ctx, "bob", id, tasks.StatusRequest{Status: mesh.TaskCompleted}); err != nil {
			t.Fatal(err)
		}
		for range closing(t, s) {
		}
	})
}

// Every authenticated call spends one unit of its caller's budget, a
// failed write too (whose own transaction, which spends it, rolled back):
// a token holder cannot hammer refused or failing writes for free.
func TestFailedCallsSpendAUnit(t *testing.T) {
	f := newFixture(t)
	frozen := time.Now().Truncate(time.Second)
	f.ts.Clock = func() time.Time { return frozen } // the budget refills only when the test says
	unit := int64(time.Second/time.Microsecond) / identity.RatePerSecond
	burst := unit * identity.RateBurst
	_, b := f.rpc(t, "alice", "bob", "SendMessage", immediate("m-fail-seed"))
	live := sendResult(t, b).ID
	done := f.completedTask(t, "m-fail-done")

	for _, c := range []struct {
		name, target, rpc, path, raw string
		params                       any
	}{
		{name: "SendMessage to a stranger", target: "carol", rpc: "SendMessage", params: immediate("m-fail-1")},
		{name: "SendMessage to a nonexistent agent", target: "nobody", rpc: "SendMessage", params: immediate("m-fail-2")},
		{name: "SendMessage to a task that does not exist", target: "bob", rpc: "SendMessage",
			params: map[string]any{"message": textMessage("m-fail-3", "no-such-task"), "configuration": map[string]any{"returnImmediately": true}}},
		{name: "SendMessage to a completed task", target: "bob", rpc: "SendMessage",
			params: map[string]any{"message": textMessage("m-fail-4", done), "configuration": map[string]any{"returnImmediately": true}}},
		{name: "SendMessage without a messageId", target: "bob", rpc: "SendMessage",
			params: map[string]any{"message": map[string]any{"role": "ROLE_USER", "parts": []any{map[string]any{"text": "x"}}}}},
		{name: "SendMessage whose params a2a-go cannot decode", target: "bob", rpc: "SendMessage", params: map[string]any{"message": 5}},
		{name: "a blocking SendMessage over the cap", target: "bob", rpc: "SendMessage", params: blocking("m-fail-5")},
		{name: "SendStreamingMessage to a stranger", target: "carol", rpc: "SendStreamingMessage", params: immediate("m-fail-6")},
		{name: "CancelTask of a completed task", target: "bob", rpc: "CancelTask", params: map[string]any{"id": done}},
		{name: "CancelTask at a stranger", target: "carol", rpc: "CancelTask", params: map[string]any{"id": live}},
		{name: "HTTP+JSON message:send to a stranger", target: "carol", path: "/message:send", params: immediate("m-fail-7")},
		{name: "HTTP+JSON message:stream to a stranger", target: "carol", path: "/message:stream", params: immediate("m-fail-8")},
		{name: "a malformed JSON-RPC body", target: "bob", raw: `{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":`},
	} {
		t.Run(c.name+" fails and spends exactly one unit", func(t *testing.T) {
			if c.name == "a blocking SendMessage over the cap" {
				f.holdAllWaits(t, "alice")
				defer func() {
					if _, err := f.db.Exec("DELETE FROM a2a_waits WHERE agent_id = 'alice'"); err != nil {
						t.Fatal(err)
					}
				}()
			}
			start := frozen.Add(time.Second).UnixMicro() // within the burst, ahead of the clock
			f.setRate(t, "alice", start)
			var st int
			var b []byte
			if c.raw != "" {
				st, _, b = f.call(t, http.MethodPost, f.base(c.target), f.tokens["alice"], "application/json", c.raw)
			} else {
				st, _, b = f.callAny(t, c.target, c.rpc, c.path, c.params)
			}
			if c.rpc != "" || c.raw != "" {
				if r := decodeRPC(t, b); r.Error == nil {
					t.Fatalf("the call succeeded: %s", b)
				}
			} else if st < 400 {
				t.Fatalf("the call succeeded: %d %s", st, b)
			}
			if got := f.rateState(t, "alice") - start; got != unit {
				t.Errorf("spent %d µs of budget, want one unit (%d)", got, unit)
			}
		})
	}

	t.Run("failing writes exhaust the budget, then the next call gets 429", func(t *testing.T) {
		const n = 5
		f.setRate(t, "alice", frozen.UnixMicro()+burst-n*unit) // n units left
		for i := range n {
			_, b := f.rpc(t, "alice", "carol", "SendMessage", immediate("m-exhaust-"+strconv.Itoa(i)))
			if r := decodeRPC(t, b); r.Error == nil || r.Error.Code != -32001 {
				t.Fatalf("failing write %d: %s", i, b)
			}
		}
		st, h, b := f.callAny(t, "bob", "GetTask", "", map[string]any{"id": live})
		if st != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
			t.Errorf("status %d headers %v body %s", st, h, b)
		}
	})
}

// Card GETs are public: the gateway answers them from a small
// per-instance cache, so a flood costs at most one read per agent per TTL.
func TestCardCache(t *testing.T) {
	f := newFixture(t)
	if c := f.g.cards; c == nil || c.ttl != DefaultCardCacheTTL || c.size != DefaultCardCacheSize {
		t.Fatalf("the handler's cache is %+v, want TTL %s and %d entries", c, DefaultCardCacheTTL, DefaultCardCacheSize)
	}
	var reads atomic.Int64
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	c := newCardCache(10*time.Second, 5, func(ctx context.Context, target string) (cards.Published, bool, error) {
		reads.Add(1)
		return f.g.published(ctx, target)
	})
	c.now = func() time.Time { return time.Unix(0, clock.Load()) }
	f.g.cards = c
	card := func(t *testing.T, agent string) (int, string) {
		t.Helper()
		st, _, b := f.call(t, http.MethodGet, f.base(agent)+"/"+cardPath, "", "", "")
		return st, string(b)
	}

	for _, c := range []struct {
		name, agent string
		status      int
	}{
		{"a published card", "bob", http.StatusOK},
		{"the 404 of a nonexistent agent", "nobody", http.StatusNotFound},
		{"the 404 of an unpublished card", "dave", http.StatusNotFound},
	} {
		t.Run(c.name+" is read once for many GETs", func(t *testing.T) {
			r0 := reads.Load()
			_, first := card(t, c.agent)
			for range 10 {
				if st, b := card(t, c.agent); st != c.status || b != first {
					t.Fatalf("%d %s, want %d %s", st, b, c.status, first)
				}
			}
			if n := reads.Load() - r0; n != 1 {
				t.Errorf("%d reads, want 1", n)
			}
		})
	}
	t.Run("concurrent GETs of one agent share one read", func(t *testing.T) {
		r0 := reads.Load()
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if st, _ := card(t, "carol"); st != http.StatusOK {
					t.Errorf("status %d", st)
				}
			}()
		}
		wg.Wait()
		if n := reads.Load() - r0; n != 1 {
			t.Errorf("%d reads, want 1", n)
		}
	})
	t.Run("a withdrawn card is served until the TTL passes, then answers 404", func(t *testing.T) {
		if _, err := f.g.Cards.Put(context.Background(), "bob", api.A2ACardRequest{Published: new(false)}); err != nil {
			t.Fatal(err)
		}
		r0 := reads.Load()
		if st, _ := card(t, "bob"); st != http.StatusOK {
			t.Errorf("within the TTL: %d, want the cached 200", st)
		}
		clock.Add(int64(10 * time.Second))
		if st, _ := card(t, "bob"); st != http.StatusNotFound {
			t.Errorf("after the TTL: %d, want 404", st)
		}
		if n := reads.Load() - r0; n != 1 {
			t.Errorf("%d reads, want 1", n)
		}
	})
	t.Run("the cache holds at most its size", func(t *testing.T) {
		for i := range 10 {
			card(t, "agent-"+strconv.Itoa(i))
		}
		c.mu.Lock()
		n := len(c.entries)
		c.mu.Unlock()
		if n > 5 {
			t.Errorf("%d entries, want at most 5", n)
		}
	})
	t.Run("an id that is not an agent id costs no read and takes no entry", func(t *testing.T) {
		r0 := reads.Load()
		if st, _ := card(t, "-not-an-id"); st != http.StatusNotFound {
			t.Errorf("status %d", st)
		}
		if n := reads.Load() - r0; n != 0 {
			t.Errorf("%d reads", n)
		}
	})
}
