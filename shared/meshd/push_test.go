package meshd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/push"
)

// fakePush stands in for the API Gateway WebSocket API: it authenticates
// the handshake with the fake API's token, and the test decides what each
// connection gets (records sealed like the dispatcher's, nudges, byes).
type fakePush struct {
	t   *testing.T
	api *fakeAPI
	url string

	mu         sync.Mutex
	refuse     int    // answer handshakes with this status (0: accept)
	retryAfter string // the Retry-After header of a refusal
	drop       bool   // hang up on handshakes without answering (unreachable)
	// budget, when above 0, is how many more handshakes refuse or drop
	// apply to; after them handshakes are accepted again.
	budget     int
	refused    int  // handshakes refused or dropped
	deaf       bool // leave pings unanswered
	open       []*pushPeer
	handshakes int
	accepts    int
	headers    []http.Header
	// onAccept runs before connection k (1-based) is upgraded: what it
	// commits happens while meshd's handshake is in flight.
	onAccept func(k int)

	accepted chan *pushPeer
	closed   chan closeSeen
	pings    chan struct{}
}

// pushPeer is the server side of one connection.
type pushPeer struct {
	k int
	c *websocket.Conn
}

// closeSeen is a connection the client closed, with how many others of
// the agent were open at that moment.
type closeSeen struct {
	k          int
	status     websocket.StatusCode
	othersOpen int
}

func newFakePush(t *testing.T, api *fakeAPI) *fakePush {
	p := &fakePush{t: t, api: api, accepted: make(chan *pushPeer, 100), closed: make(chan closeSeen, 100), pings: make(chan struct{}, 1000)}
	srv := httptest.NewServer(p)
	p.url = "ws" + strings.TrimPrefix(srv.URL, "http") + "/push"
	api.mu.Lock()
	api.pushURL = p.url
	api.mu.Unlock()
	t.Cleanup(func() {
		p.mu.Lock()
		for _, peer := range p.open {
			if peer.c != nil {
				_ = peer.c.CloseNow()
			}
		}
		p.mu.Unlock()
		srv.Close()
	})
	return p
}

func (p *fakePush) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.api.mu.Lock()
	revoked := p.api.revoked
	p.api.mu.Unlock()
	p.mu.Lock()
	p.handshakes++
	p.headers = append(p.headers, r.Header.Clone())
	p.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer tok" || revoked {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(401)
		_, _ = w.Write([]byte(`{"code":"unauthorized","status":401}`))
		return
	}
	p.mu.Lock()
	refuse, retryAfter, drop, onAccept := p.refuse, p.retryAfter, p.drop, p.onAccept
	if refuse != 0 || drop {
		p.refused++
		if p.budget > 0 {
			if p.budget--; p.budget == 0 {
				p.refuse, p.drop = 0, false
			}
		}
	}
	p.mu.Unlock()
	if drop {
		// Like a connection refused or reset: no HTTP answer at all.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	if refuse != 0 {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(refuse)
		return
	}
	p.mu.Lock()
	p.accepts++
	k := p.accepts
	p.mu.Unlock()
	if onAccept != nil {
		onAccept(k)
	}
	// The connection counts as open from before the upgrade: meshd may see
	// the 101 answer and close its old connection before Accept returns
	// here, and that close must find this one open.
	peer := &pushPeer{k: k}
	p.mu.Lock()
	p.open = append(p.open, peer)
	p.mu.Unlock()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OnPingReceived: func(context.Context, []byte) bool {
		select {
		case p.pings <- struct{}{}:
		default:
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.deaf
	}})
	p.mu.Lock()
	if err != nil {
		p.open = slices.DeleteFunc(p.open, func(o *pushPeer) bool { return o == peer })
		p.mu.Unlock()
		return
	}
	peer.c = c
	p.mu.Unlock()
	p.accepted <- peer
	// Reading answers pings and sees the client's close.
	for {
		if _, _, err = c.Read(context.Background()); err != nil {
			break
		}
	}
	p.mu.Lock()
	p.open = slices.DeleteFunc(p.open, func(o *pushPeer) bool { return o == peer })
	others := len(p.open)
	p.mu.Unlock()
	if st := websocket.CloseStatus(err); st != -1 {
		p.closed <- closeSeen{k: k, status: st, othersOpen: others}
	}
}

// next waits for the next accepted connection.
func (p *fakePush) next(t *testing.T) *pushPeer {
	t.Helper()
	select {
	case peer := <-p.accepted:
		return peer
	case <-time.After(20 * time.Second):
		t.Fatal("meshd did not connect to the push channel within 20 s")
		return nil
	}
}

// send writes frames to one connection, in order.
func (p *fakePush) send(t *testing.T, peer *pushPeer, frames ...[]byte) {
	t.Helper()
	for _, f := range frames {
		if err := peer.c.Write(context.Background(), websocket.MessageText, f); err != nil {
			t.Fatalf("push to connection %d: %v", peer.k, err)
		}
	}
}

func (p *fakePush) set(fn func(p *fakePush)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(p)
}

func (p *fakePush) count() (handshakes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.handshakes
}

func (p *fakePush) refusedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// pushMode is meshd in push mode with reconnects fast enough for a test.
func pushMode(c *meshd.Config) {
	c.Mode = meshd.ModePush
	c.PushRetryBase = 20 * time.Millisecond
	c.PushRetryMax = 100 * time.Millisecond
}

// rec is the pushed frame of env: the Kafka record's value.
func (f *fixture) rec(env mesh.Envelope) []byte { return f.record(env).Value }

func TestPushDedupAcrossAReconnect(t *testing.T) {
	f := newFixture(t, false)
	p := newFakePush(t, f.api)
	for range 3 {
		f.api.add(mesh.EventMessage, "alice", "before")
	}
	h := newRecorder()
	r := f.start(h, pushMode)
	c1 := p.next(t)
	h.waitFor(t, 3, 20*time.Second) // the catch-up after connecting
	e4, e5 := f.api.add(mesh.EventMessage, "alice", "m4"), f.api.add(mesh.EventMessage, "alice", "m5")
	p.send(t, c1, f.rec(e4), f.rec(e5))
	h.waitForSeq(t, 5, 20*time.Second)

	e6 := f.api.add(mesh.EventMessage, "alice", "m6") // published while no connection is open
	_ = c1.c.CloseNow()                               // killed from the server side
	c2 := p.next(t)
	h.waitForSeq(t, 6, 20*time.Second) // the catch-up after reconnecting
	// What the old connection carried comes again on the new one, then a
	// new event that fences the duplicates (one connection is read in
	// order, and no catch-up runs until the next reconnect).
	e7 := f.api.add(mesh.EventMessage, "alice", "m7")
	p.send(t, c2, f.rec(e4), f.rec(e5), f.rec(e6), f.rec(e4), f.rec(e7))
	h.waitForSeq(t, 7, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	t.Run("every event reaches the handler once, in order", func(t *testing.T) {
		if got := h.handled(); !slices.Equal(got, seqs(1, 7)) {
			t.Errorf("handled %v, want 1..7 once each", got)
		}
	})
	t.Run("pushed events are not read from the inbox", func(t *testing.T) {
		for _, seq := range []int64{4, 5, 7} {
			if n := f.api.servedCount(seq); n != 0 {
				t.Errorf("seq %d was read from the inbox %d times", seq, n)
			}
		}
	})
	t.Run("the event published while disconnected came from the inbox", func(t *testing.T) {
		if f.api.servedCount(6) == 0 {
			t.Error("seq 6 was not read from the inbox API")
		}
	})
	t.Run("the handshake carries the bearer token and the instance id", func(t *testing.T) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if got := p.headers[0].Get("Authorization"); got != "Bearer tok" {
			t.Errorf("Authorization %q", got)
		}
		if p.headers[0].Get("X-Mesh-Instance") == "" {
			t.Error("no X-Mesh-Instance header")
		}
	})
	t.Run("heartbeats report the push mode", func(t *testing.T) {
		f.api.mu.Lock()
		defer f.api.mu.Unlock()
		if got := f.api.lastStats["mode"]; got != meshd.ModePush {
			t.Errorf("the last heartbeat reported mode %v", got)
		}
	})
}

func TestPushGapIsCoveredFromTheInbox(t *testing.T) {
	f := newFixture(t, false)
	p := newFakePush(t, f.api)
	f.api.add(mesh.EventMessage, "alice", "m1")
	h := newRecorder()
	r := f.start(h, pushMode)
	c1 := p.next(t)
	h.waitFor(t, 1, 20*time.Second)
	e2 := f.api.add(mesh.EventMessage, "alice", "m2")
	f.api.add(mesh.EventMessage, "alice", "m3") // its push is lost
	e4 := f.api.add(mesh.EventMessage, "alice", "m4")
	p.send(t, c1, f.rec(e2), f.rec(e4))
	h.waitForSeq(t, 4, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, seqs(1, 4)) {
		t.Errorf("handled %v, want 1..4 in order", got)
	}
	if f.api.servedCount(3) == 0 {
		t.Error("seq 3 was not read from the inbox API")
	}
	if got := h.texts[2]; got != "m3" {
		t.Errorf("seq 3 body %q", got)
	}
}

func TestPushQueueOverflowDropsFramesAndTheInboxCoversThem(t *testing.T) {
	f := newFixture(t, false)
	p := newFakePush(t, f.api)
	f.api.add(mesh.EventMessage, "alice", "m1")
	h := newRecorder()
	release, busy := make(chan struct{}), make(chan struct{})
	h.fail = func(env mesh.Envelope, attempt int) error {
		if env.Seq == 2 && attempt == 1 {
			close(busy)
			<-release
		}
		return nil
	}
	r := f.start(h, func(c *meshd.Config) { pushMode(c); c.PushQueue = 2 })
	c1 := p.next(t)
	h.waitFor(t, 1, 20*time.Second)
	var frames [][]byte
	for range 11 {
		frames = append(frames, f.rec(f.api.add(mesh.EventMessage, "alice", "burst")))
	}
	p.send(t, c1, frames[0])
	<-busy // the handler is stuck on seq 2
	p.send(t, c1, frames[1:]...)
	// meshd's reader answers this ping after it read every frame before it.
	pctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err := c1.c.Ping(pctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	h.waitFor(t, 12, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, seqs(1, 12)) {
		t.Errorf("handled %v, want 1..12 once each", got)
	}
	if !strings.Contains(f.logs.String(), "push frames dropped") {
		t.Error("no frame was dropped: the queue did not bound what waits for the handler")
	}
}

func TestPushNudgeFetchesFromTheInbox(t *testing.T) {
	f := newFixture(t, false)
	p := newFakePush(t, f.api)
	f.api.add(mesh.EventMessage, "alice", "m1")
	h := newRecorder()
	r := f.start(h, pushMode)
	c1 := p.next(t)
	h.waitFor(t, 1, 20*time.Second)
	// Too large to push: the mesh sends a nudge instead.
	f.api.add(mesh.EventMessage, "alice", strings.Repeat("x", push.MaxMessageBytes))
	p.send(t, c1, []byte(`{"v":2,"seq":2,"fetch":true}`))
	h.waitForSeq(t, 2, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, seqs(1, 2)) {
		t.Errorf("handled %v", got)
	}
	if f.api.servedCount(2) == 0 {
		t.Error("seq 2 was not read from the inbox API")
	}
}

// batchFrame is the batch frame the mesh pushes for records of one round.
func (f *fixture) batchFrame(t *testing.T, envs ...mesh.Envelope) []byte {
	t.Helper()
	fr := api.PushFrame{V: mesh.EnvelopeVersion, Seq: envs[len(envs)-1].Seq, Fetch: true}
	for _, env := range envs {
		fr.Records = append(fr.Records, f.rec(env))
	}
	b, err := json.Marshal(fr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPushBatchFrames(t *testing.T) {
	f := newFixture(t, false)
	p := newFakePush(t, f.api)
	f.api.add(mesh.EventMessage, "alice", "m1")
	h := newRecorder()
	r := f.start(h, pushMode)
	c1 := p.next(t)
	h.waitFor(t, 1, 20*time.Second)
	var first []mesh.Envelope
	for i := 2; i <= 6; i++ {
		first = append(first, f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i)))
	}
	p.send(t, c1, f.batchFrame(t, first...))
	h.waitForSeq(t, 6, 20*time.Second)
	// A second batch that lost seq 8 and repeats seq 6.
	e7 := f.api.add(mesh.EventMessage, "alice", "m7")
	f.api.add(mesh.EventMessage, "alice", "m8")
	e9 := f.api.add(mesh.EventMessage, "alice", "m9")
	p.send(t, c1, f.batchFrame(t, first[4], e7, e9))
	h.waitForSeq(t, 9, 20*time.Second)
	// A third whose middle record cannot be opened (sealed for another
	// routing id, say): meshd reads the inbox instead.
	e10 := f.api.add(mesh.EventMessage, "alice", "m10")
	f.api.add(mesh.EventMessage, "alice", "m11")
	e12 := f.api.add(mesh.EventMessage, "alice", "m12")
	bad, err := json.Marshal(api.PushFrame{V: mesh.EnvelopeVersion, Seq: 12, Fetch: true,
		Records: []json.RawMessage{f.rec(e10), json.RawMessage(`{"v":2,"key_epoch":1,"sealed":"bm90IGEgcmVjb3Jk"}`), f.rec(e12)}})
	if err != nil {
		t.Fatal(err)
	}
	p.send(t, c1, bad)
	h.waitForSeq(t, 12, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	t.Run("every record of a batch reaches the handler once, in order", func(t *testing.T) {
		if got := h.handled(); !slices.Equal(got, seqs(1, 12)) {
			t.Errorf("handled %v, want 1..12 once each", got)
		}
		if got := h.texts[3]; got != "m4" {
			t.Errorf("seq 4 body %q", got)
		}
	})
	t.Run("the records a batch carries are not read from the inbox", func(t *testing.T) {
		// (Seq 9 may be: the catch-up that fills the gap before it reads
		// pages, as for a gap between two frames.)
		for _, seq := range []int64{2, 3, 4, 5, 6, 7} {
			if n := f.api.servedCount(seq); n != 0 {
				t.Errorf("seq %d was read from the inbox %d times", seq, n)
			}
		}
	})
	t.Run("a seq missing between a batch's records is read from the inbox", func(t *testing.T) {
		if f.api.servedCount(8) == 0 {
			t.Error("seq 8 was not read from the inbox API")
		}
	})
	t.Run("a batch with a record that cannot be opened is read from the inbox", func(t *testing.T) {
		if f.api.servedCount(11) == 0 || !strings.Contains(f.logs.String(), "cannot open a record of a pushed batch") {
			t.Error("seq 11 was not read from the inbox API after its record failed to open")
		}
	})
}

func TestPushPlannedReconnectMissesNothing(t *testing.T) {
	f := newFixture(t, false)
	p := newFakePush(t, f.api)
	silent := make(chan int64, 10)
	// An event committed while meshd's next handshake is in flight is posted
	// to no connection (the old one is on its way out): only the catch-up
	// after the new connection opens brings it.
	p.onAccept = func(k int) {
		if k > 1 {
			silent <- f.api.add(mesh.EventMessage, "alice", "during the handshake").Seq
		}
	}
	f.api.add(mesh.EventMessage, "alice", "m1")
	h := newRecorder()
	r := f.start(h, func(c *meshd.Config) { pushMode(c); c.PushMaxAge = 600 * time.Millisecond })
	p.next(t)
	h.waitFor(t, 1, 20*time.Second)
	for range 2 {
		peer := p.next(t)
		h.waitForSeq(t, <-silent, 20*time.Second)
		e := f.api.add(mesh.EventMessage, "alice", "pushed")
		p.send(t, peer, f.rec(e))
		h.waitForSeq(t, e.Seq, 20*time.Second)
	}
	var planned []closeSeen
	for len(planned) < 2 {
		select {
		case c := <-p.closed:
			if c.status == websocket.StatusNormalClosure {
				planned = append(planned, c)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("meshd closed %d replaced connections, want 2", len(planned))
		}
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	t.Run("every event reaches the handler once, in order", func(t *testing.T) {
		got := h.handled()
		if !slices.Equal(got, seqs(1, int64(len(got)))) || len(got) < 5 {
			t.Errorf("handled %v, want 1..N once each", got)
		}
	})
	t.Run("the old connection closes only once the new one is open", func(t *testing.T) {
		for _, c := range planned {
			if c.othersOpen == 0 {
				t.Errorf("connection %d was closed while no other was open", c.k)
			}
		}
	})
}

func TestPushPingsInsideTheIdleLimit(t *testing.T) {
	t.Run("the default ping and its timeout fit inside API Gateway's idle limit", func(t *testing.T) {
		if meshd.DefaultPushPingEvery+meshd.DefaultPushPingTimeout >= push.IdleTimeout {
			t.Errorf("ping every %v (timeout %v): the gateway drops a connection idle for %v", meshd.DefaultPushPingEvery, meshd.DefaultPushPingTimeout, push.IdleTimeout)
		}
	})
	t.Run("an idle connection is pinged", func(t *testing.T) {
		f := newFixture(t, false)
		p := newFakePush(t, f.api)
		f.start(newRecorder(), func(c *meshd.Config) { pushMode(c); c.PushPingEvery = 20 * time.Millisecond })
		p.next(t)
		for i := range 3 {
			select {
			case <-p.pings:
			case <-time.After(20 * time.Second):
				t.Fatalf("%d pings within 20 s, want 3", i)
			}
		}
	})
	t.Run("an unanswered ping makes meshd reconnect", func(t *testing.T) {
		f := newFixture(t, false)
		p := newFakePush(t, f.api)
		p.deaf = true
		f.start(newRecorder(), func(c *meshd.Config) {
			pushMode(c)
			c.PushPingEvery, c.PushPingTimeout = 20*time.Millisecond, 200*time.Millisecond
		})
		p.next(t)
		p.next(t)
		if !strings.Contains(f.logs.String(), "push ping failed") {
			t.Error("reconnected without saying the ping failed")
		}
	})
}

// modes records the modes meshd reports through OnMode.
type modes struct {
	mu  sync.Mutex
	all []string
	ch  chan string
}

func (m *modes) on(_, mode string) {
	m.mu.Lock()
	m.all = append(m.all, mode)
	m.mu.Unlock()
	m.ch <- mode
}

func (m *modes) waitFor(t *testing.T, want string) {
	t.Helper()
	for {
		select {
		case got := <-m.ch:
			if got == want {
				return
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("meshd did not switch to %s within 20 s", want)
		}
	}
}

// autoPush is meshd in auto mode on the fake push channel, reporting its
// modes to m (and the handshakes refused when it moved to polling to
// refusedAtPoll, when set).
func autoPush(p *fakePush, m *modes, refusedAtPoll chan<- int) func(*meshd.Config) {
	return func(c *meshd.Config) {
		pushMode(c)
		c.Mode = meshd.ModeAuto
		c.OnMode = func(agent, mode string) {
			if mode == meshd.ModePoll && refusedAtPoll != nil {
				select {
				case refusedAtPoll <- p.refusedCount():
				default:
				}
			}
			m.on(agent, mode)
		}
		c.PollWait = 5 * time.Second
		c.PushDialsPerMinute = 10000
	}
}

func TestAutoPrefersPushThenPollThenPush(t *testing.T) {
	for _, tc := range []struct {
		name string
		down func(p *fakePush)
		// wantRefused is how many handshakes failed before meshd polled.
		wantRefused int
	}{
		{
			name:        "a push channel that cannot be reached is polled around after one handshake",
			down:        func(p *fakePush) { p.drop = true },
			wantRefused: 1,
		},
		{
			name:        "a push channel that keeps answering 503 is polled around only after several handshakes in a row",
			down:        func(p *fakePush) { p.refuse = http.StatusServiceUnavailable },
			wantRefused: meshd.PushFallbackAfter,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			p := newFakePush(t, f.api)
			f.api.add(mesh.EventMessage, "alice", "m1")
			m := &modes{ch: make(chan string, 100)}
			refusedAtPoll := make(chan int, 1)
			h := newRecorder()
			r := f.start(h, autoPush(p, m, refusedAtPoll))
			m.waitFor(t, meshd.ModePush)
			c1 := p.next(t)
			h.waitFor(t, 1, 20*time.Second)

			p.set(tc.down)
			_ = c1.c.CloseNow()
			m.waitFor(t, meshd.ModePoll)
			f.api.add(mesh.EventMessage, "alice", "while push is down")
			h.waitForSeq(t, 2, 20*time.Second)

			p.set(func(p *fakePush) { p.refuse, p.drop = 0, false })
			m.waitFor(t, meshd.ModePush)
			c2 := p.next(t)
			e3 := f.api.add(mesh.EventMessage, "alice", "m3")
			p.send(t, c2, f.rec(e3))
			h.waitForSeq(t, 3, 20*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if got := <-refusedAtPoll; got != tc.wantRefused {
				t.Errorf("meshd polled after %d failed handshakes, want %d", got, tc.wantRefused)
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			if want := []string{meshd.ModePush, meshd.ModePoll, meshd.ModePush}; !slices.Equal(m.all, want) {
				t.Errorf("modes %v, want %v", m.all, want)
			}
			if got := h.handled(); !slices.Equal(got, seqs(1, 3)) {
				t.Errorf("handled %v", got)
			}
			if f.api.servedCount(2) == 0 {
				t.Error("seq 2 did not come from the inbox API while push was down")
			}
		})
	}
}

// A throttled or overloaded push channel (429, 5xx) is retried with backoff
// on push: long polls would only move the load onto the inbox API.
func TestAutoStaysOnPushWhileTheChannelAnswersBusy(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		retryAfter string
	}{
		{name: "handshakes answered 503 are retried on push", status: http.StatusServiceUnavailable},
		{name: "handshakes answered 500 are retried on push", status: http.StatusInternalServerError},
		// An hour's Retry-After would stall the test: the wait is capped at
		// PushRetryMax (100 ms here).
		{name: "handshakes answered 429 are retried on push, the Retry-After capped", status: http.StatusTooManyRequests, retryAfter: "3600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			p := newFakePush(t, f.api)
			f.api.add(mesh.EventMessage, "alice", "m1")
			m := &modes{ch: make(chan string, 100)}
			h := newRecorder()
			r := f.start(h, autoPush(p, m, nil))
			m.waitFor(t, meshd.ModePush)
			c1 := p.next(t)
			h.waitFor(t, 1, 20*time.Second)

			// Twice one refusal short of the limit: a connection in between
			// starts the count again.
			refusals := meshd.PushFallbackAfter - 1
			peer := c1
			for round := range 2 {
				p.set(func(p *fakePush) { p.refuse, p.retryAfter, p.budget = tc.status, tc.retryAfter, refusals })
				_ = peer.c.CloseNow()
				peer = p.next(t)
				e := f.api.add(mesh.EventMessage, "alice", "pushed")
				p.send(t, peer, f.rec(e))
				h.waitForSeq(t, e.Seq, 20*time.Second)
				if got := p.refusedCount(); got != refusals*(round+1) {
					t.Errorf("round %d: %d handshakes refused, want %d", round+1, got, refusals*(round+1))
				}
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			if want := []string{meshd.ModePush}; !slices.Equal(m.all, want) {
				t.Errorf("modes %v, want %v: meshd polled while the channel only answered %d", m.all, want, tc.status)
			}
		})
	}
}

func TestARevokedKeyStopsPush(t *testing.T) {
	for _, tc := range []struct {
		name string
		// revoke revokes the key (token exchange and handshake refused);
		// otherwise only the push channel refuses the token.
		revoke     bool
		wantErr    string
		wantTokens int // token exchanges after the connection is lost
	}{
		{name: "a bye revoked, then a refused handshake and a rejected key end Run", revoke: true, wantErr: "401", wantTokens: 0},
		{name: "a handshake refused with a fresh token ends Run after one refresh", wantErr: "refused the agent's token", wantTokens: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			p := newFakePush(t, f.api)
			r := f.start(newRecorder(), pushMode)
			c1 := p.next(t)
			f.api.mu.Lock()
			f.api.revoked = tc.revoke
			tokens := f.api.tokens
			f.api.mu.Unlock()
			if !tc.revoke {
				p.set(func(p *fakePush) { p.refuse = 401 })
			}
			before := p.count()
			p.send(t, c1, []byte(`{"v":2,"bye":"revoked"}`))
			_ = c1.c.Close(websocket.StatusPolicyViolation, "revoked")
			var err error
			select {
			case err = <-r.done:
				r.done <- err
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not end after its key was refused")
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Run returned %v, want an error with %q", err, tc.wantErr)
			}
			if n := p.count() - before; n > 2 {
				t.Errorf("%d handshakes after the key was refused, want at most 2", n)
			}
			f.api.mu.Lock()
			// The rejected key's exchange fails without counting.
			refreshes := f.api.tokens - tokens
			f.api.mu.Unlock()
			if refreshes != tc.wantTokens {
				t.Errorf("%d token exchanges after the connection was lost, want %d", refreshes, tc.wantTokens)
			}
			if !strings.Contains(f.logs.String(), `"reason":"revoked"`) {
				t.Error("the bye's reason was not logged")
			}
		})
	}
}
