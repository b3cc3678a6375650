package meshd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/backoff"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/push"
)

// Push mode: the mesh posts the agent's records (the Kafka values, byte for
// byte) to its WebSocket connection. A push is a courtesy copy: every
// (re)connect is followed by a catch-up through the inbox API, frames are
// deduplicated by seq, and a gap is filled from the inbox API, exactly as on
// Kafka.

// Defaults of the push channel, exported so what they promise can be checked.
const (
	// DefaultPushPingEvery keeps an idle connection alive: well inside API
	// Gateway's 10-minute idle limit (push.IdleTimeout), even when a ping
	// takes its whole DefaultPushPingTimeout.
	DefaultPushPingEvery   = 5 * time.Minute
	DefaultPushPingTimeout = 30 * time.Second
	// DefaultPushRetryBase is the window over which the first reconnect
	// after a lost connection is spread (uniformly): 10,000 hosts dropped by
	// one outage come back at about 330 a second, under the account's 500
	// new connections a second. Each further failure doubles the window, up
	// to DefaultPushRetryMax.
	DefaultPushRetryBase = 30 * time.Second
	DefaultPushRetryMax  = 5 * time.Minute
	// DefaultPushDialsPerMinute caps the handshakes (each one a $connect
	// function run and a database write) one meshd makes a minute, however
	// its connections flap.
	DefaultPushDialsPerMinute = 6
	// DefaultPushQueue is how many received frames wait for the handler;
	// beyond it frames are dropped and the inbox API covers them.
	DefaultPushQueue = 32
	// DefaultPushDialTimeout bounds one handshake.
	DefaultPushDialTimeout = 15 * time.Second
)

// pushReadMargin is what a message may carry beyond push.MaxMessageBytes
// (framing of a record that just fits).
const pushReadMargin = 4 << 10

// pushStableAfter is how long a connection must have lived for its loss to
// count as a first failure again (the reconnect backoff restarts); a
// connection that keeps dying young backs off further each time.
const pushStableAfter = time.Minute

// pushTickEvery is how often the push loop checks for a stall while idle.
const pushTickEvery = time.Second

// pushFallbackAfter is how many handshakes in a row auto mode lets fail
// before it polls the inbox API, when the push channel answers them (429,
// 5xx: throttled or overloaded). Polling there would only move the storm
// onto long polls that hold a function each; backing off on push relieves
// it. A channel that cannot be reached at all is polled around at once.
const pushFallbackAfter = 3

// pushDialError is a failed handshake of the push channel (other than the
// 401 dial handles): either the push channel answered with an HTTP status
// instead of upgrading, or it was not reached (status 0: connection
// refused, DNS, TLS, timeout).
type pushDialError struct {
	status     int           // 0: no HTTP answer
	retryAfter time.Duration // the answer's Retry-After; 0 when it had none
	err        error
}

func (e *pushDialError) Error() string {
	if e.status == 0 {
		return fmt.Sprintf("push channel unreachable: %v", e.err)
	}
	return fmt.Sprintf("push handshake answered HTTP %d: %v", e.status, e.err)
}

func (e *pushDialError) Unwrap() error { return e.err }

// newPushDialError describes a handshake websocket.Dial failed with.
func newPushDialError(resp *http.Response, err error, now time.Time) *pushDialError {
	if resp == nil {
		return &pushDialError{err: err}
	}
	return &pushDialError{status: resp.StatusCode, retryAfter: meshclient.ParseRetryAfter(resp.Header.Get("Retry-After"), now), err: err}
}

// pushFallBack reports whether auto mode polls the inbox API after a failed
// handshake, fails being the handshakes failed in a row: at once when the
// channel was not reached, else only once several failed.
func pushFallBack(err error, fails int) bool {
	var de *pushDialError
	return (errors.As(err, &de) && de.status == 0) || fails >= pushFallbackAfter
}

// errPushRefused ends Run: the push handshake was refused (401) even with a
// freshly exchanged token.
var errPushRefused = errors.New("meshd: the push channel refused the agent's token")

// pushFatal reports errors of the push channel that retrying cannot fix.
func pushFatal(err error) bool { return fatal(err) || errors.Is(err, errPushRefused) }

// pushURL is the push channel's URL: Config.PushURL, else the token's.
func (r *runner) pushURL(tok api.TokenResponse) string {
	if r.cfg.PushURL != "" {
		return r.cfg.PushURL
	}
	return tok.PushURL
}

// pushConn is one open connection of the push channel.
type pushConn struct {
	c      *websocket.Conn
	n      int // ordinal since start, for logs
	opened time.Time
	done   chan struct{} // closed when its reader ended
	err    error         // why the reader ended; set before done closes
	bye    atomic.Value  // string: the reason the server gave before closing
}

func (pc *pushConn) byeReason() string {
	s, _ := pc.bye.Load().(string)
	return s
}

// pushSession is the push channel of one Run: its connections (two at a
// time during a planned reconnect), the bounded queue their readers fill,
// and the handshake budget.
type pushSession struct {
	r   *runner
	url string
	// frames is filled by the connections' readers and drained by the
	// delivery goroutine; a full queue drops the frame and sets dropped.
	frames  chan []byte
	dropped atomic.Bool
	dropSig chan struct{}

	ctx    context.Context // the connections' life; canceled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup // readers, pingers and closers

	mu    sync.Mutex
	conns map[*pushConn]struct{}
	n     int
	dials dialLimiter
}

func newPushSession(r *runner, url string) *pushSession {
	ctx, cancel := context.WithCancel(context.Background())
	return &pushSession{
		r: r, url: url,
		frames:  make(chan []byte, r.cfg.PushQueue),
		dropSig: make(chan struct{}, 1),
		ctx:     ctx, cancel: cancel,
		conns: map[*pushConn]struct{}{},
		dials: dialLimiter{per: r.cfg.PushDialsPerMinute, window: time.Minute},
	}
}

// retryDelay is the wait before a reconnect after attempt failures: uniform
// over a window that starts at PushRetryBase and doubles, capped at
// PushRetryMax. Fully random so that hosts dropped together spread out.
func (ps *pushSession) retryDelay(attempt int) time.Duration {
	return pushBackoff(ps.r.cfg.PushRetryBase, ps.r.cfg.PushRetryMax).Delay(attempt)
}

func pushBackoff(base, max time.Duration) backoff.Policy {
	return backoff.Policy{Base: base, Max: max, Jitter: 1}
}

// retryWait is the wait after attempt failures, err the latest: the
// jittered retryDelay, but at least what the answer's Retry-After asked for,
// never more than PushRetryMax (a server's hint must not park meshd for
// hours). The refusals themselves came spread out, so honouring the hint
// does not bring the hosts back together.
func (ps *pushSession) retryWait(attempt int, err error) time.Duration {
	d := ps.retryDelay(attempt)
	var de *pushDialError
	if errors.As(err, &de) && de.retryAfter > d {
		d = min(de.retryAfter, ps.r.cfg.PushRetryMax)
	}
	return d
}

// dial opens a connection with the agent's token. A refused handshake (401:
// the key was revoked, or the token expired) refreshes the token once and
// tries again; refused again, it is fatal, like a rejected key at start.
func (ps *pushSession) dial(ctx context.Context) (*pushConn, error) {
	for refreshed := false; ; refreshed = true {
		for wait := ps.admit(); wait > 0; wait = ps.admit() {
			ps.r.log.Warn("push handshakes are capped per minute; waiting", "wait", wait.Round(time.Millisecond).String(), "per_minute", ps.r.cfg.PushDialsPerMinute)
			if !backoff.Wait(ctx, wait) {
				return nil, errStop
			}
		}
		tok, err := ps.r.cfg.API.Token(ctx)
		if err != nil {
			if fatal(err) {
				return nil, fmt.Errorf("meshd: cannot get a token: %w", err)
			}
			return nil, err
		}
		dctx, cancel := context.WithTimeout(ctx, ps.r.cfg.PushDialTimeout)
		c, resp, err := websocket.Dial(dctx, ps.url, &websocket.DialOptions{HTTPHeader: http.Header{
			"Authorization":   {"Bearer " + tok.Token},
			"X-Mesh-Instance": {ps.r.cfg.InstanceID},
		}})
		cancel()
		if err == nil {
			return ps.start(c), nil
		}
		if ctx.Err() != nil {
			return nil, errStop
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			return nil, newPushDialError(resp, err, time.Now())
		}
		if refreshed {
			return nil, fmt.Errorf("%w (HTTP 401 with a fresh token); check the agent's API key", errPushRefused)
		}
		ps.r.log.Warn("push handshake refused (401); exchanging the API key for a new token once")
		if _, err := ps.r.cfg.API.RefreshToken(ctx); err != nil {
			if fatal(err) {
				return nil, fmt.Errorf("meshd: the push channel refused the token and the API key is rejected: %w", err)
			}
			return nil, err
		}
	}
}

// admit takes one handshake from the per-minute budget, or says how long
// to wait for one.
func (ps *pushSession) admit() time.Duration {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	now := time.Now()
	if wait := ps.dials.wait(now); wait > 0 {
		return wait
	}
	ps.dials.record(now)
	return 0
}

// start registers a new connection and runs its reader and pinger.
func (ps *pushSession) start(c *websocket.Conn) *pushConn {
	c.SetReadLimit(push.MaxMessageBytes + pushReadMargin)
	ps.mu.Lock()
	ps.n++
	pc := &pushConn{c: c, n: ps.n, opened: time.Now(), done: make(chan struct{})}
	ps.conns[pc] = struct{}{}
	ps.mu.Unlock()
	ps.wg.Add(2)
	go ps.read(pc)
	go ps.ping(pc)
	return pc
}

// read queues pc's messages for the delivery goroutine until pc ends. It
// never blocks on a slow handler: a full queue drops the frame, and the
// delivery goroutine catches up through the inbox API.
func (ps *pushSession) read(pc *pushConn) {
	defer ps.wg.Done()
	defer close(pc.done)
	// A connection that ended on its own (the server closed it, the network
	// dropped it, a ping failed) leaves the session here, or every one would
	// stay in conns until Run ends; a read error does not always release the
	// socket, hence CloseNow. One that retire took out, retire closes.
	defer func() {
		ps.mu.Lock()
		_, mine := ps.conns[pc]
		delete(ps.conns, pc)
		ps.mu.Unlock()
		if mine {
			_ = pc.c.CloseNow()
		}
	}()
	for {
		_, data, err := pc.c.Read(ps.ctx)
		if err != nil {
			pc.err = err
			return
		}
		if reason, ok := byeOf(data); ok {
			pc.bye.Store(reason)
			ps.r.log.Info("the push channel is closing this connection", "reason", reason, "conn", pc.n)
			continue
		}
		select {
		case ps.frames <- data:
		default:
			ps.dropped.Store(true)
			select {
			case ps.dropSig <- struct{}{}:
			default:
			}
		}
	}
}

// byeOf returns the reason of a bye frame.
func byeOf(data []byte) (string, bool) {
	if len(data) > 512 || !bytes.Contains(data, []byte(`"bye"`)) {
		return "", false
	}
	var f api.PushFrame
	if json.Unmarshal(data, &f) != nil || f.Bye == "" {
		return "", false
	}
	return f.Bye, true
}

// ping pings pc every PushPingEvery so the gateway never finds it idle; a
// ping unanswered within PushPingTimeout ends pc (the delivery goroutine
// reconnects).
func (ps *pushSession) ping(pc *pushConn) {
	defer ps.wg.Done()
	t := time.NewTicker(ps.r.cfg.PushPingEvery)
	defer t.Stop()
	for {
		select {
		case <-pc.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(ps.ctx, ps.r.cfg.PushPingTimeout)
		err := pc.c.Ping(ctx)
		cancel()
		if err != nil {
			select {
			case <-pc.done: // it ended anyway
			default:
				ps.r.log.Warn("push ping failed; reconnecting", "conn", pc.n, "err", err)
				_ = pc.c.CloseNow()
			}
			return
		}
	}
}

// retire closes pc in the background (the close handshake may take
// seconds); frames it still delivers go through dedup.
func (ps *pushSession) retire(pc *pushConn, code websocket.StatusCode, reason string) {
	ps.mu.Lock()
	delete(ps.conns, pc)
	ps.mu.Unlock()
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		_ = pc.c.Close(code, reason)
	}()
}

// close ends every connection and waits for their goroutines (bounded by
// the close handshake's own timeouts).
func (ps *pushSession) close() {
	ps.mu.Lock()
	conns := make([]*pushConn, 0, len(ps.conns))
	for pc := range ps.conns {
		conns = append(conns, pc)
	}
	ps.mu.Unlock()
	for _, pc := range conns {
		ps.retire(pc, websocket.StatusGoingAway, "meshd stopping")
	}
	ps.wg.Wait()
	ps.cancel()
}

// discard empties the queue (when delivery moves to polling: what it holds
// is read from the inbox API anyway).
func (ps *pushSession) discard() {
	for {
		select {
		case <-ps.frames:
		default:
			return
		}
	}
}

// dialLimiter allows at most per handshakes in any window.
type dialLimiter struct {
	per    int
	window time.Duration
	times  []time.Time // the latest handshakes, oldest first, at most per
}

// wait is how long until one more handshake fits in the window.
func (l *dialLimiter) wait(now time.Time) time.Duration {
	if l.per <= 0 || len(l.times) < l.per {
		return 0
	}
	return l.times[len(l.times)-l.per].Add(l.window).Sub(now)
}

func (l *dialLimiter) record(now time.Time) {
	l.times = append(l.times, now)
	if len(l.times) > l.per {
		l.times = append(l.times[:0], l.times[len(l.times)-l.per:]...)
	}
}

// pushDeliver delivers through the push channel until ctx ends. Push mode
// reconnects until it succeeds. Auto mode does too while the channel
// answers (429, 5xx: it is throttled or overloaded, and long polls would
// only add to the load), but polls the inbox API once the channel cannot be
// reached or pushFallbackAfter handshakes in a row failed, probing it with
// the same backoff, and moves back to push as soon as a probe connects.
func (r *runner) pushDeliver(ctx context.Context, url string) error {
	ps := newPushSession(r, url)
	defer ps.close()
	r.log.Info("meshd started", "mode", ModePush, "push_url", url, "last_seq", r.state.LastSeq, "state", StatePath(r.cfg.StateDir, r.agentID))
	attempt := 0 // failures since the last stable connection
	fails := 0   // handshakes failed in a row
	var wait time.Duration
	for {
		if wait > 0 && !backoff.Wait(ctx, wait) {
			return errStop
		}
		pc, err := ps.dial(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, errStop) {
				return errStop
			}
			if pushFatal(err) {
				return err
			}
			attempt++
			fails++
			if r.cfg.Mode != ModeAuto || !pushFallBack(err, fails) {
				wait = ps.retryWait(attempt, err)
				r.log.Warn("push handshake failed; retrying", "attempt", attempt, "retry_in", wait.Round(time.Millisecond).String(), "err", err)
				continue
			}
			r.log.Warn("push channel unreachable; delivering through the inbox API (poll mode) and probing it", "failures_in_a_row", fails, "err", err)
			if pc, attempt, err = r.pollUntilPush(ctx, ps, attempt, err); err != nil {
				return err
			}
			r.log.Info("the push channel is reachable again; switched from the inbox API to push")
		}
		fails = 0
		if r.currentMode() != ModePush {
			r.setMode(ModePush)
		}
		r.log.Info("push connection open", "conn", pc.n)
		last, err := r.servePush(ctx, ps, pc)
		if err != nil {
			return err
		}
		if time.Since(last.opened) >= pushStableAfter {
			attempt = 0
		}
		attempt++
		wait = ps.retryDelay(attempt)
		r.log.Warn("push connection closed; reconnecting", "conn", last.n, "reason", last.byeReason(), "err", last.err, "retry_in", wait.Round(time.Millisecond).String())
	}
}

// pollUntilPush polls the inbox API while probing the push channel with the
// reconnect backoff, continuing from attempt failures (lastErr the latest),
// and returns the probe's connection once one opens, with the failures
// counted by then.
func (r *runner) pollUntilPush(ctx context.Context, ps *pushSession, attempt int, lastErr error) (*pushConn, int, error) {
	r.setMode(ModePoll)
	ps.discard()
	back := make(chan struct{})
	probeCtx, stopProbe := context.WithCancel(ctx)
	var got *pushConn
	var probeErr error
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		got, attempt, probeErr = ps.probe(probeCtx, ps.dial, attempt, lastErr)
		if got != nil || (probeErr != nil && !errors.Is(probeErr, errStop)) {
			close(back)
		}
	}()
	err := r.pollLoop(ctx, back)
	stopProbe()
	<-probed
	if errors.Is(err, errChannelBack) {
		if probeErr != nil {
			return nil, attempt, probeErr
		}
		return got, attempt, nil
	}
	if got != nil {
		ps.retire(got, websocket.StatusGoingAway, "meshd stopping")
	}
	return nil, attempt, err
}

// probe dials the push channel until a handshake succeeds or fails for
// good (a fatal error), waiting the growing, jittered reconnect backoff
// before each one (Retry-After honoured, capped at PushRetryMax): a fleet
// polling around an outage must not hammer the $connect function at a
// fixed rate. It continues from attempt failures, err the latest, and
// returns the failures counted by then; errStop when ctx ends.
func (ps *pushSession) probe(ctx context.Context, dial func(context.Context) (*pushConn, error), attempt int, err error) (*pushConn, int, error) {
	for {
		if !backoff.Wait(ctx, ps.retryWait(attempt, err)) {
			return nil, attempt, errStop
		}
		pc, derr := dial(ctx)
		if derr == nil {
			return pc, attempt, nil
		}
		if ctx.Err() != nil || errors.Is(derr, errStop) {
			return nil, attempt, errStop
		}
		if pushFatal(derr) {
			return nil, attempt, derr
		}
		attempt, err = attempt+1, derr
		ps.r.log.Debug("push channel still unreachable", "attempt", attempt, "err", err)
	}
}

// servePush delivers pc's frames until it ends; it returns the connection
// that ended (a later one when planned reconnects replaced pc). Before
// anything else, and after every planned reconnect, it catches up through
// the inbox API: the connection is open by then, so whatever is published
// meanwhile arrives on it.
func (r *runner) servePush(ctx context.Context, ps *pushSession, pc *pushConn) (*pushConn, error) {
	if err := r.catchUpInbox(ctx); err != nil {
		return pc, err
	}
	tick := time.NewTicker(pushTickEvery)
	defer tick.Stop()
	planned := time.NewTimer(r.plannedIn(pc))
	defer planned.Stop()
	replans := 0
	for {
		select {
		case <-ctx.Done():
			return pc, errStop
		case <-pc.done:
			return pc, nil
		case data := <-ps.frames:
			if err := r.onPushFrame(ctx, data); err != nil {
				return pc, err
			}
		case <-ps.dropSig:
		case <-tick.C:
			if err := r.catchUpIfStalled(ctx); err != nil {
				return pc, err
			}
		case <-planned.C:
			// A planned reconnect before the gateway's age limit: open the
			// new connection first, catch up, then close the old one, so no
			// event is published while neither is open.
			next, err := ps.dial(ctx)
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, errStop) {
					return pc, errStop
				}
				if pushFatal(err) {
					return pc, err
				}
				replans++
				d := ps.retryWait(replans, err)
				r.log.Warn("planned push reconnect failed; keeping the current connection", "conn", pc.n, "retry_in", d.Round(time.Millisecond).String(), "err", err)
				planned.Reset(d)
				continue
			}
			replans = 0
			r.log.Info("planned push reconnect", "old_conn", pc.n, "conn", next.n, "age", time.Since(pc.opened).Round(time.Second).String())
			old := pc
			pc = next
			planned.Reset(r.plannedIn(pc))
			if err := r.catchUpInbox(ctx); err != nil {
				ps.retire(old, websocket.StatusNormalClosure, "reconnected")
				return pc, err
			}
			ps.retire(old, websocket.StatusNormalClosure, "reconnected")
		}
		if ps.dropped.Swap(false) {
			r.log.Info("push frames dropped while the handler was busy; catching up through the inbox API", "last_seq", r.state.LastSeq)
			if err := r.catchUpInbox(ctx); err != nil {
				return pc, err
			}
		}
	}
}

// plannedIn is when pc is replaced: between two and one twelfths of
// PushMaxAge before that age (at 2 h: 10 to 20 minutes early), at random so
// that connections opened together are not replaced together.
func (r *runner) plannedIn(pc *pushConn) time.Duration {
	margin := r.cfg.PushMaxAge / 12
	age := r.cfg.PushMaxAge - margin - rand.N(margin+1)
	return time.Until(pc.opened.Add(age))
}

// onPushFrame handles one frame: a record (opened like a Kafka record of
// this agent), a batch of records, or a nudge to read the inbox API.
func (r *runner) onPushFrame(ctx context.Context, data []byte) error {
	var f api.PushFrame
	if err := json.Unmarshal(data, &f); err != nil {
		r.log.Warn("a push frame is not JSON; catching up through the inbox API instead", "bytes", len(data))
		return r.catchUpInbox(ctx)
	}
	if len(f.Records) > 0 {
		return r.onPushedBatch(ctx, f)
	}
	if f.Fetch {
		if f.Seq <= r.state.LastSeq {
			return nil
		}
		if err := r.catchUpInbox(ctx); err != nil {
			return err
		}
		if r.state.LastSeq < f.Seq {
			// Heartbeats' stall detection covers it if it shows up later.
			r.log.Warn("the inbox API does not have the nudged event yet", "seq", f.Seq, "last_seq", r.state.LastSeq)
		}
		return nil
	}
	if len(f.Sealed) == 0 {
		r.log.Warn("unknown push frame ignored", "v", f.V, "bytes", len(data))
		return nil
	}
	env, err := r.openPushed(ctx, data)
	if err != nil {
		return r.unopened(ctx, "a pushed record", err)
	}
	// A duplicate (both connections of a reconnect, or a catch-up got there
	// first) is dropped.
	_, err = r.deliverNext(ctx, env, -1, "pushed")
	return err
}

// openPushed opens a pushed record value, which must be this agent's.
func (r *runner) openPushed(ctx context.Context, value []byte) (mesh.Envelope, error) {
	env, err := r.open(ctx, value)
	if err == nil && env.To != r.agentID {
		err = fmt.Errorf("the sealed event names recipient %q", env.To)
	}
	return env, err
}

// unopened handles a pushed record that could not be opened: its seq is
// unreadable, but whatever it stood for, the inbox API has it.
func (r *runner) unopened(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return errStop
	}
	r.log.Info("cannot open "+what+"; catching up through the inbox API", "reason", err)
	return r.catchUpInbox(ctx)
}

// onPushedBatch delivers the records of a batch frame in order, as if each
// had come in a frame of its own (duplicates dropped, a gap filled from the
// inbox API), consecutive ones as batches to a batch handler. A record
// that cannot be opened makes it catch up through the inbox API instead,
// which holds every event the frame carries.
func (r *runner) onPushedBatch(ctx context.Context, f api.PushFrame) error {
	envs := make([]mesh.Envelope, 0, len(f.Records))
	for _, rec := range f.Records {
		env, err := r.openPushed(ctx, rec)
		if err != nil {
			return r.unopened(ctx, "a record of a pushed batch", err)
		}
		envs = append(envs, env)
	}
	for i := 0; i < len(envs); {
		if bh, ok := r.batchHandler(); ok && envs[i].Seq == r.state.LastSeq+1 {
			if run := r.pageBatch(envs[i:]); len(run) > 1 {
				if err := r.deliverBatch(ctx, bh, run, noOffsets(len(run))); err != nil {
					return err
				}
				i += len(run)
				continue
			}
		}
		if _, err := r.deliverNext(ctx, envs[i], -1, "pushed"); err != nil {
			return err
		}
		i++
	}
	return nil
}
