package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/agentmesh/shared/apigwlocal"
	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// Bounds of the push acceptance tests: every wait ends at a deadline.
const (
	pushWait = 30 * time.Second // for a delivery, a reconnect, a row to appear
	pollStep = 10 * time.Millisecond
)

// pushMesh is the local stack with its WebSocket API announced to the
// handlers, the real Kafka broker, the dispatcher running as its schedule
// would, and alice and bob, friends.
type pushMesh struct {
	st   *localstacktest.Stack
	keys map[string]string
	logs *testenv.Buffer
	log  *slog.Logger
	// tap sits between the dispatcher and the push Sender: it tells when a
	// record's post has completed, and can drop a push on the way.
	tap *tapPusher
}

// startPushMesh starts the stack with the WebSocket limits ws and the
// configuration overrides env.
func startPushMesh(t *testing.T, ws apigwlocal.WebSocketOptions, env map[string]string) *pushMesh {
	t.Helper()
	logs := &testenv.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	st := localstacktest.Start(t, localstacktest.Options{Kafka: true, Partitions: 1, Push: true, WebSocket: ws, Env: env, Log: log})
	if st.Dispatcher.Pusher == nil {
		t.Fatal("the stack's dispatcher has no Pusher: the push channel is not wired")
	}
	m := &pushMesh{st: st, logs: logs, log: log, tap: &tapPusher{Pusher: st.Dispatcher.Pusher, drop: map[string]bool{}, posted: map[string]int64{}}}
	st.Dispatcher.Pusher = m.tap
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Dispatcher.Run(ctx, 10*time.Minute) }()
	t.Cleanup(func() { stop(); <-done })
	m.keys = st.Agents(t, "alice", "bob")
	st.Befriend(t, "alice", "bob")
	return m
}

// tapPusher passes records to the push Sender and notes, per agent, the
// newest seq whose post has completed (the Sender drained after it).
type tapPusher struct {
	dispatch.Pusher
	mu     sync.Mutex
	drop   map[string]bool // agent/seq: pushes lost on the way
	posted map[string]int64
	// held, for an agent in it, collects its pushes until release hands
	// them to the Sender back to back.
	held map[string][]heldPush
}

// heldPush is a push the tap holds back.
type heldPush struct {
	seq   int64
	value []byte
}

func (p *tapPusher) Push(agentID string, seq int64, value []byte) {
	key := fmt.Sprintf("%s/%d", agentID, seq)
	p.mu.Lock()
	lost := p.drop[key]
	held, holding := p.held[agentID]
	if holding {
		p.held[agentID] = append(held, heldPush{seq, value})
	}
	p.mu.Unlock()
	if holding {
		return
	}
	p.pass(agentID, seq, value, lost)
}

// pass hands a push to the Sender (unless lost) and notes when it is out.
func (p *tapPusher) pass(agentID string, seq int64, value []byte, lost bool) {
	if !lost {
		p.Pusher.Push(agentID, seq, value)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), pushWait)
		defer cancel()
		p.Pusher.Drain(ctx)
		p.mu.Lock()
		p.posted[agentID] = max(p.posted[agentID], seq)
		p.mu.Unlock()
	}()
}

// hold makes the tap keep agentID's pushes until release.
func (p *tapPusher) hold(agentID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = map[string][]heldPush{}
	}
	p.held[agentID] = nil
}

// waitHeld waits until the tap holds n pushes of agentID.
func (p *tapPusher) waitHeld(t *testing.T, agentID string, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("the tap to hold %d pushes of %s", n, agentID), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.held[agentID]) >= n
	})
}

// release hands agentID's held pushes to the Sender back to back, as one
// dispatcher batch does, and stops holding.
func (p *tapPusher) release(agentID string) {
	p.mu.Lock()
	held := p.held[agentID]
	delete(p.held, agentID)
	p.mu.Unlock()
	for _, h := range held {
		p.pass(agentID, h.seq, h.value, false)
	}
}

// dropPush makes the push of agentID's seq get lost on the way.
func (p *tapPusher) dropPush(agentID string, seq int64) {
	p.mu.Lock()
	p.drop[fmt.Sprintf("%s/%d", agentID, seq)] = true
	p.mu.Unlock()
}

// waitPosted waits until the push of agentID's seq has gone out.
func (p *tapPusher) waitPosted(t *testing.T, agentID string, seq int64) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("the push of %s's seq %d to go out", agentID, seq), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.posted[agentID] >= seq
	})
}

// waitUntil polls cond until it holds, failing the test after pushWait.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(pushWait); !cond(); time.Sleep(pollStep) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", pushWait, what)
		}
	}
}

// host is a meshd of one agent that knows only the API's URL and the
// agent's key, recording every envelope its handler is given.
type host struct {
	agent string
	mu    sync.Mutex
	got   []mesh.Envelope
	modes []string
	gates map[int64]chan struct{} // the handler of seq waits for its gate
	held  chan int64              // a gated handler has started
	err   error
	ended chan struct{} // Run returned; err is set
	stop  func()
}

// startHost runs meshd for agent in push mode with short reconnect waits;
// adjust changes the configuration before Run.
func (m *pushMesh) startHost(t *testing.T, agent string, adjust func(*meshd.Config)) *host {
	t.Helper()
	h := &host{agent: agent, gates: map[int64]chan struct{}{}, held: make(chan int64, 16), ended: make(chan struct{})}
	cfg := meshd.Config{
		API:      meshclient.New(m.st.URL, m.keys[agent]),
		StateDir: t.TempDir(), Mode: meshd.ModePush, Log: m.log.With("host", agent),
		// Nothing but a push or a (re)connect's catch-up brings events in:
		// stall detection would hide a lost push.
		StallAfter: time.Hour,
		RetryBase:  20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		PushRetryBase: 20 * time.Millisecond, PushRetryMax: 200 * time.Millisecond,
		PushDialsPerMinute: 600, PollWait: time.Second,
		OnMode: func(_, mode string) {
			h.mu.Lock()
			h.modes = append(h.modes, mode)
			h.mu.Unlock()
		},
		Handler: meshd.HandlerFunc(func(ctx context.Context, env mesh.Envelope) error {
			h.mu.Lock()
			gate := h.gates[env.Seq]
			h.mu.Unlock()
			if gate != nil {
				h.held <- env.Seq
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			h.mu.Lock()
			h.got = append(h.got, env)
			h.mu.Unlock()
			return nil
		}),
	}
	if adjust != nil {
		adjust(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		h.err = meshd.Run(ctx, cfg)
		close(h.ended)
	}()
	h.stop = func() {
		cancel()
		select {
		case <-h.ended:
		case <-time.After(pushWait):
			t.Errorf("%s's meshd did not stop within %s", agent, pushWait)
		}
	}
	t.Cleanup(h.stop)
	return h
}

// gate makes the handler of seq wait until the returned function is called.
func (h *host) gate(seq int64) (release func()) {
	ch := make(chan struct{})
	h.mu.Lock()
	h.gates[seq] = ch
	h.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (h *host) handled() []mesh.Envelope {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

func (h *host) seenModes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.modes)
}

// waitHandled waits until the handler has been given n envelopes.
func (h *host) waitHandled(t *testing.T, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%s's handler to get %d events", h.agent, n), func() bool { return len(h.handled()) >= n })
}

// stream is what one friend sent another, in order.
type stream struct {
	m        *pushMesh
	from, to string
	client   *meshclient.Client
	texts    []string
}

func (m *pushMesh) stream(from, to string) *stream {
	return &stream{m: m, from: from, to: to, client: meshclient.New(m.st.URL, m.keys[from])}
}

// send sends n messages, each with its own text.
func (s *stream) send(t *testing.T, n int) {
	t.Helper()
	for range n {
		s.sendParts(t, fmt.Sprintf("message %d from %s", len(s.texts)+1, s.from))
	}
}

// sendParts sends one message with text (and extra parts); what the
// handler must find is text.
func (s *stream) sendParts(t *testing.T, text string, extra ...mesh.Part) {
	t.Helper()
	parts := append([]mesh.Part{{Kind: "text", Text: text}}, extra...)
	if _, err := s.client.Send(context.Background(), meshclient.SendRequest{To: s.to, Parts: parts}); err != nil {
		t.Fatalf("%s's send %d: %v", s.from, len(s.texts)+1, err)
	}
	s.texts = append(s.texts, text)
}

// check waits for every message sent and then checks the handler got
// exactly them: seq 1..N once each, in order, each with its text.
func (s *stream) check(t *testing.T, h *host) {
	t.Helper()
	h.waitHandled(t, len(s.texts))
	got := h.handled()
	var seqs []int64
	for _, e := range got {
		seqs = append(seqs, e.Seq)
	}
	if len(got) != len(s.texts) {
		t.Fatalf("the handler got %d events for %d messages sent: seqs %v\nlog:\n%s", len(got), len(s.texts), seqs, s.m.logs.String())
	}
	for i, e := range got {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d; want seqs 1..%d, gapless and in order, got %v", i+1, e.Seq, len(s.texts), seqs)
		}
		if text := firstText(t, e); e.From != s.from || e.To != s.to || text != s.texts[i] {
			t.Fatalf("seq %d from %s to %s says %.60q, want %.60q from %s", e.Seq, e.From, e.To, text, s.texts[i], s.from)
		}
	}
}

// firstText is the text of a message event's first part.
func firstText(t *testing.T, e mesh.Envelope) string {
	t.Helper()
	var body tasks.MessageBody
	if err := json.Unmarshal(e.Body, &body); err != nil {
		t.Fatalf("seq %d: %v", e.Seq, err)
	}
	var parts []mesh.Part
	if err := json.Unmarshal(body.Message.Parts, &parts); err != nil || len(parts) == 0 {
		t.Fatalf("seq %d carries no parts (%v)", e.Seq, err)
	}
	return parts[0].Text
}

// connections lists agent's rows in push_connections, oldest first.
func (m *pushMesh) connections(t *testing.T, agent string) []string {
	t.Helper()
	rows, err := m.st.Env.DB.QueryContext(context.Background(),
		"SELECT connection_id FROM push_connections WHERE agent_id = ? ORDER BY connected_at, connection_id", agent)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// allConnections counts every row of push_connections.
func (m *pushMesh) allConnections(t *testing.T) int {
	t.Helper()
	var n int
	if err := m.st.Env.DB.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM push_connections").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitConnection waits until agent has exactly one connection, other
// than not (the one it had before), and returns it.
func (m *pushMesh) waitConnection(t *testing.T, agent, not string) string {
	t.Helper()
	var id string
	waitUntil(t, fmt.Sprintf("%s to hold one push connection other than %q", agent, not), func() bool {
		ids := m.connections(t, agent)
		if len(ids) == 1 && ids[0] != not {
			id = ids[0]
			return true
		}
		return false
	})
	return id
}

// deleteConnection closes a connection from the server's side, as the
// mesh does through API Gateway's @connections API.
func (m *pushMesh) deleteConnection(t *testing.T, id string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, m.st.PushEndpoint+"/@connections/"+url.PathEscape(id), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE @connections/%s: %s", id, resp.Status)
	}
}

// token is a fresh mesh token of agent.
func (m *pushMesh) token(t *testing.T, agent string) string {
	t.Helper()
	tok, err := meshclient.New(m.st.URL, m.keys[agent]).Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

// dial opens a raw WebSocket connection to the push channel with header.
func (m *pushMesh) dial(t *testing.T, header http.Header, subprotocols ...string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pushWait)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, m.st.PushURL, &websocket.DialOptions{HTTPHeader: header, Subprotocols: subprotocols})
	if err == nil {
		t.Cleanup(func() { _ = c.CloseNow() })
	}
	return c, resp, err
}

// bearer is the handshake header of a token.
func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// readUntilClosed reads c until the server closes it, returning the data
// messages it sent first and the close status.
func readUntilClosed(t *testing.T, c *websocket.Conn) (msgs []string, code websocket.StatusCode, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pushWait)
	defer cancel()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) {
				t.Fatalf("the connection ended without a close frame: %v (messages %q)", err, msgs)
			}
			return msgs, ce.Code, ce.Reason
		}
		msgs = append(msgs, string(data))
	}
}
