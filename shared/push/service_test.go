package push_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/push"
	"github.com/agentmesh/agentmesh/shared/push/pushtest"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// fixture is a push service on a fresh database with a recording relay.
type fixture struct{ *pushtest.Fixture }

func newFixture(t *testing.T) *fixture { return &fixture{pushtest.NewFixture(t, 2*time.Hour)} }

// connect opens connection conn for token, failing the test on error.
func (f *fixture) connect(t *testing.T, conn, token string) push.Conn {
	t.Helper()
	c, err := f.Service.Connect(context.Background(), push.ConnectRequest{ConnectionID: conn, Token: token, InstanceID: "inst-1", SourceAddr: "192.0.2.1"})
	if err != nil {
		t.Fatalf("connect %s: %v", conn, err)
	}
	return c
}

// targets is Targets for one agent.
func (f *fixture) targets(t *testing.T, agent string) []string {
	t.Helper()
	m, err := f.Service.Targets(context.Background(), []string{agent})
	if err != nil {
		t.Fatal(err)
	}
	return m[agent]
}

func bye(reason string) string { return string(push.ByeFrame(reason)) }

// keyIDOf is the key id inside an API key "amk_<12-character id>_<secret>".
func keyIDOf(apiKey string) string { return apiKey[4:16] }

// TestAtMostTwoConnectionsPerAgent: a third connection of an agent takes the
// oldest one's place: its row is gone, and it is told "replaced" and closed;
// the newer two stay, and other agents are untouched.
func TestAtMostTwoConnectionsPerAgent(t *testing.T) {
	f := newFixture(t)
	_, tok := identitytest.NewAgent(t, f.ID, "capped")
	_, other := identitytest.NewAgent(t, f.ID, "bystander")
	f.connect(t, "bystander-1", other)
	for _, c := range []string{"conn-a", "conn-b"} {
		f.connect(t, c, tok)
		f.Clock.Advance(time.Second)
	}
	c := f.connect(t, "conn-c", tok)

	t.Run("the connection records who opened it", func(t *testing.T) {
		if c.AgentID != "capped" || c.KeyID == "" || c.RoutingID == "" || c.InstanceID != "inst-1" || !c.ExpiresAt.Equal(c.ConnectedAt.Add(2*time.Hour)) {
			t.Errorf("conn %+v", c)
		}
	})
	t.Run("the newest two remain, oldest first", func(t *testing.T) {
		if got := f.targets(t, "capped"); !slices.Equal(got, []string{"conn-b", "conn-c"}) {
			t.Errorf("targets %v", got)
		}
	})
	t.Run("the oldest is told replaced, then closed", func(t *testing.T) {
		if got := f.Relay.PostsTo("conn-a"); !slices.Equal(got, []string{bye(api.ByeReplaced)}) {
			t.Errorf("posts to conn-a %q", got)
		}
		if got := f.Relay.Closed(); !slices.Equal(got, []string{"conn-a"}) {
			t.Errorf("closed %v", got)
		}
	})
	t.Run("another agent's connection is untouched", func(t *testing.T) {
		if got := f.targets(t, "bystander"); !slices.Equal(got, []string{"bystander-1"}) {
			t.Errorf("targets %v", got)
		}
	})
}

// TestConcurrentConnectsKeepTheCap: handshakes of one agent racing each
// other still leave at most two rows.
func TestConcurrentConnectsKeepTheCap(t *testing.T) {
	f := newFixture(t)
	_, tok := identitytest.NewAgent(t, f.ID, "racer")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.Service.Connect(context.Background(), push.ConnectRequest{ConnectionID: fmt.Sprintf("race-%d", i), Token: tok})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := f.Rows(t); n != push.MaxConnsPerAgent {
		t.Fatalf("%d rows after 8 concurrent connects, want %d", n, push.MaxConnsPerAgent)
	}
	if n := len(f.Relay.Closed()); n != 8-push.MaxConnsPerAgent {
		t.Fatalf("%d connections closed, want %d", n, 8-push.MaxConnsPerAgent)
	}
}

// TestARevokedTokenIsRefusedAtConnect: a token whose key was revoked, or
// that expired, or that is missing, is refused with 401 and writes nothing.
func TestARevokedTokenIsRefusedAtConnect(t *testing.T) {
	f := newFixture(t)
	key, revokedTok := identitytest.NewAgent(t, f.ID, "revoked")
	if _, err := f.ID.RevokeKey(context.Background(), "revoked", keyIDOf(key)); err != nil {
		t.Fatal(err)
	}
	_, expiring := identitytest.NewAgent(t, f.ID, "expiring")
	cases := []struct {
		name, token string
		before      func()
		code        string
	}{
		{"a token of a revoked key is refused", revokedTok, nil, "key_revoked"},
		{"a missing token is refused", "", nil, "missing_token"},
		{"a garbled token is refused", "eyJhbGciOiJFZERTQSJ9.e30.c2ln", nil, "invalid_token"},
		{"an expired token is refused", expiring, func() { f.Clock.Advance(2 * time.Hour) }, "invalid_token"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.before != nil {
				c.before()
			}
			_, err := f.Service.Connect(context.Background(), push.ConnectRequest{ConnectionID: fmt.Sprintf("refused-%d", i), Token: c.token, SourceAddr: "192.0.2.9"})
			if me := mesh.AsError(err); me.Kind != mesh.KindUnauthorized || me.Code != c.code {
				t.Fatalf("err %v, want 401 %s", err, c.code)
			}
			if n := f.Rows(t); n != 0 {
				t.Fatalf("%d rows written", n)
			}
		})
	}
}

// TestARevocationRacingTheHandshakeWins: a key revoked after the token
// was checked but before the connection is recorded still refuses the
// handshake (the transaction re-reads the key under the agent's lock), so
// no connection of a revoked key outlives its revocation's hook.
func TestARevocationRacingTheHandshakeWins(t *testing.T) {
	f := newFixture(t)
	key, tok := identitytest.NewAgent(t, f.ID, "racing")
	f.Service.SetAfterAuth(func() {
		if _, err := f.ID.RevokeKey(context.Background(), "racing", keyIDOf(key)); err != nil {
			t.Error(err)
		}
	})
	_, err := f.Service.Connect(context.Background(), push.ConnectRequest{ConnectionID: "late", Token: tok})
	if me := mesh.AsError(err); me.Kind != mesh.KindUnauthorized || me.Code != "key_revoked" {
		t.Fatalf("err %v, want 401 key_revoked", err)
	}
	if n := f.Rows(t); n != 0 {
		t.Fatalf("%d rows written", n)
	}
}

// TestRevocationClosesTheKeysConnections: with the hook wired, revoking a
// key (or rotating with revoke_existing) tells that key's connections
// "revoked", closes and forgets them, and leaves the other keys' alone.
func TestRevocationClosesTheKeysConnections(t *testing.T) {
	f := newFixture(t)
	f.ID.OnKeysRevoked = f.Service.OnKeysRevoked
	ctx := context.Background()
	key1, tok1 := identitytest.NewAgent(t, f.ID, "holder")
	rot, err := f.ID.RotateKey(ctx, "holder", identity.RotateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok2, err := f.ID.IssueToken(ctx, rot.APIKey, "")
	if err != nil {
		t.Fatal(err)
	}
	f.connect(t, "by-key-1", tok1)
	f.connect(t, "by-key-2", tok2.Token)

	t.Run("revoking a key closes its connection only", func(t *testing.T) {
		if _, err := f.ID.RevokeKey(ctx, "holder", keyIDOf(key1)); err != nil {
			t.Fatal(err)
		}
		if got := f.Relay.PostsTo("by-key-1"); !slices.Equal(got, []string{bye(api.ByeRevoked)}) {
			t.Errorf("posts %q", got)
		}
		if got := f.Relay.Closed(); !slices.Equal(got, []string{"by-key-1"}) {
			t.Errorf("closed %v", got)
		}
		if got := f.targets(t, "holder"); !slices.Equal(got, []string{"by-key-2"}) {
			t.Errorf("targets %v", got)
		}
	})
	t.Run("a rotation revoking the existing keys closes the rest", func(t *testing.T) {
		f.Relay.Reset()
		if _, err := f.ID.RotateKey(ctx, "holder", identity.RotateOptions{RevokeExisting: true}); err != nil {
			t.Fatal(err)
		}
		if got := f.Relay.Closed(); !slices.Equal(got, []string{"by-key-2"}) {
			t.Errorf("closed %v", got)
		}
		if n := f.Rows(t); n != 0 {
			t.Errorf("%d rows left", n)
		}
	})
}

// TestClientFramesAreRateLimited: a connection may send a burst of small
// frames; the first frame over the budget, or one oversized frame, gets
// "rate_limited", a close and the row deleted.
func TestClientFramesAreRateLimited(t *testing.T) {
	cases := []struct {
		name   string
		frames []int // sizes
		closed bool
	}{
		{"a burst within the budget is allowed", slices.Repeat([]int{10}, push.ClientFrameBurst), false},
		{"one frame over the budget closes the connection", slices.Repeat([]int{10}, push.ClientFrameBurst+1), true},
		{"one oversized frame closes the connection", []int{push.MaxClientFrameBytes + 1}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			_, tok := identitytest.NewAgent(t, f.ID, "chatty")
			f.connect(t, "noisy", tok)
			for _, size := range c.frames {
				if err := f.Service.Received(context.Background(), "noisy", size); err != nil {
					t.Fatal(err)
				}
			}
			closed := slices.Equal(f.Relay.Closed(), []string{"noisy"})
			if closed != c.closed {
				t.Fatalf("closed %v, want %v", f.Relay.Closed(), c.closed)
			}
			if c.closed {
				if got := f.Relay.PostsTo("noisy"); !slices.Equal(got, []string{bye(api.ByeRateLimited)}) {
					t.Errorf("posts %q", got)
				}
				if n := f.Rows(t); n != 0 {
					t.Errorf("%d rows left", n)
				}
			}
		})
	}
	t.Run("the budget refills with time", func(t *testing.T) {
		f := newFixture(t)
		_, tok := identitytest.NewAgent(t, f.ID, "patient")
		f.connect(t, "steady", tok)
		for range 3 * push.ClientFrameBurst {
			if err := f.Service.Received(context.Background(), "steady", 10); err != nil {
				t.Fatal(err)
			}
			f.Clock.Advance(push.ClientFramePer)
		}
		if got := f.Relay.Closed(); len(got) != 0 {
			t.Fatalf("closed %v", got)
		}
	})
}

// TestTargetsServeEveryOpenConnectionOfALiveKey: the dispatcher gets each
// agent's connections, oldest first, never one of a revoked key, for any
// number of agents. One past the server's age limit is still served: meshd
// does not know that limit, and the connection is open until API Gateway
// or the janitor ends it.
func TestTargetsServeEveryOpenConnectionOfALiveKey(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, oldTok := identitytest.NewAgent(t, f.ID, "elder")
	f.connect(t, "old-1", oldTok)
	f.Clock.Advance(90 * time.Minute)
	key, revTok := identitytest.NewAgent(t, f.ID, "revokee")
	f.connect(t, "rev-1", revTok) // young: only its revocation hides it
	// A second connection of elder, through a newer key, opened later.
	tok, err := f.ID.IssueToken(ctx, mustRotate(t, f.ID, "elder"), "")
	if err != nil {
		t.Fatal(err)
	}
	f.connect(t, "old-2", tok.Token)
	_, liveTok := identitytest.NewAgent(t, f.ID, "live2")
	f.connect(t, "live-1", liveTok)
	f.Clock.Advance(31 * time.Minute) // old-1 is past 2 h
	if _, err := f.ID.RevokeKey(ctx, "revokee", keyIDOf(key)); err != nil {
		t.Fatal(err)
	}

	many := []string{"elder", "revokee", "live2", "elder"}
	for i := range 1200 { // more than one IN list
		many = append(many, fmt.Sprintf("nobody-%d", i))
	}
	got, err := f.Service.Targets(ctx, many)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"elder": {"old-1", "old-2"}, "live2": {"live-1"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("targets %v, want %v", got, want)
	}
}

func mustRotate(t *testing.T, s *identity.Service, agent string) string {
	t.Helper()
	r, err := s.RotateKey(context.Background(), agent, identity.RotateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.APIKey
}

// TestTheJanitorExpiresOldConnections: a connection of a revoked key (whose
// hook did not run) is told "revoked" at the next run; past its age plus
// the grace a connection is told "expired"; both are closed and forgotten,
// and a young one stays.
func TestTheJanitorExpiresOldConnections(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, oldTok := identitytest.NewAgent(t, f.ID, "old")
	f.connect(t, "aged", oldTok)
	f.Clock.Advance(2*time.Hour - time.Minute)
	key, revTok := identitytest.NewAgent(t, f.ID, "rev")
	f.connect(t, "revoked-conn", revTok)
	_, youngTok := identitytest.NewAgent(t, f.ID, "young")
	f.connect(t, "young-conn", youngTok)
	// No hook: the revocation leaves its connection to the janitor.
	if _, err := f.ID.RevokeKey(ctx, "rev", keyIDOf(key)); err != nil {
		t.Fatal(err)
	}

	t.Run("a revoked key's connection is told revoked at once; the aged one is within the grace", func(t *testing.T) {
		f.Clock.Advance(time.Minute + push.ExpireGrace/2) // aged is 30 s past its age
		if err := f.Service.Expire(ctx); err != nil {
			t.Fatal(err)
		}
		if got := f.Relay.PostsTo("revoked-conn"); !slices.Equal(got, []string{bye(api.ByeRevoked)}) {
			t.Errorf("posts to revoked-conn %q", got)
		}
		if got := f.Relay.Closed(); !slices.Equal(got, []string{"revoked-conn"}) {
			t.Errorf("closed %v", got)
		}
	})
	t.Run("past the grace the aged one is told expired, closed and forgotten", func(t *testing.T) {
		f.Relay.Reset()
		f.Clock.Advance(push.ExpireGrace)
		if err := f.Service.Expire(ctx); err != nil {
			t.Fatal(err)
		}
		if got := f.Relay.PostsTo("aged"); !slices.Equal(got, []string{bye(api.ByeExpired)}) {
			t.Errorf("posts to aged %q", got)
		}
		if got := f.Relay.Closed(); !slices.Equal(got, []string{"aged"}) {
			t.Errorf("closed %v", got)
		}
	})
	t.Run("the young connection stays", func(t *testing.T) {
		if got := f.targets(t, "young"); !slices.Equal(got, []string{"young-conn"}) {
			t.Errorf("young targets %v", got)
		}
		if n := f.Rows(t); n != 1 {
			t.Errorf("%d rows left, want only young-conn", n)
		}
	})
}

// TestTheJanitorRunsWithoutARelay: with no relay (a function that cannot
// reach the management API), closing is forgetting the row.
func TestTheJanitorRunsWithoutARelay(t *testing.T) {
	f := newFixture(t)
	f.Service.Relay = nil
	_, tok := identitytest.NewAgent(t, f.ID, "lonely")
	f.connect(t, "lonely-1", tok)
	f.Clock.Advance(3 * time.Hour)
	if err := f.Service.Expire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.Rows(t); n != 0 {
		t.Fatalf("%d rows left", n)
	}
}

// TestHandshakesSpendTheAgentsRateBudget: a valid token cannot reconnect
// faster than the agent's rate limit: past the burst, 429.
func TestHandshakesSpendTheAgentsRateBudget(t *testing.T) {
	f := newFixture(t)
	_, tok := identitytest.NewAgent(t, f.ID, "reconnector")
	var err error
	n := 0
	for ; n <= identity.RateBurst && err == nil; n++ {
		_, err = f.Service.Connect(context.Background(), push.ConnectRequest{ConnectionID: fmt.Sprintf("again-%d", n), Token: tok})
	}
	if me := mesh.AsError(err); me.Kind != mesh.KindRateLimited {
		t.Fatalf("%d handshakes of one agent at one instant: last err %v, want 429", n, err)
	}
	if rows := f.Rows(t); rows != push.MaxConnsPerAgent {
		t.Fatalf("%d rows, want %d", rows, push.MaxConnsPerAgent)
	}
}

// TestAGoneAnswerDuringTheHandshakeKeepsTheRow: API Gateway answers 410 to
// a connection until its $connect returned, and Connect commits the row
// before that. A Sender round posting in that window must not forget the
// row of what is about to be a live connection; a row older than
// ForgetMinAge that answers 410 is forgotten.
func TestAGoneAnswerDuringTheHandshakeKeepsTheRow(t *testing.T) {
	f := newFixture(t)
	_, tok := identitytest.NewAgent(t, f.ID, "newcomer")
	// 410 for every post: the handshake is not through yet.
	f.Relay.SetGone("fresh")
	f.connect(t, "fresh", tok)
	sender := &push.Sender{Directory: f.Service, Relay: f.Relay, Metrics: &metrics.Sink{W: &testenv.Buffer{}}}

	t.Run("a 410 to a connection younger than ForgetMinAge leaves its row", func(t *testing.T) {
		sender.Push("newcomer", 1, value("newcomer", 1))
		drain(t, sender)
		if got := f.targets(t, "newcomer"); !slices.Equal(got, []string{"fresh"}) {
			t.Fatalf("targets after a 410 during $connect %v, want [fresh]", got)
		}
	})
	t.Run("a 410 to an older connection forgets it", func(t *testing.T) {
		f.Clock.Advance(push.ForgetMinAge + time.Second)
		sender.Push("newcomer", 2, value("newcomer", 2))
		drain(t, sender)
		if n := f.Rows(t); n != 0 {
			t.Fatalf("%d rows left, want the gone connection forgotten", n)
		}
	})
}

// TestDeletesRetryDeadlocks: Connect locks the agent index then the primary
// key, a delete by primary key the other way round, so $disconnect and
// Forget can be a deadlock's victim (or wait out a lock). They retry
// instead of failing ($disconnect would answer 5xx) and leave no row.
func TestDeletesRetryDeadlocks(t *testing.T) {
	cases := []struct {
		name   string
		errNum uint16
		del    func(f *fixture) error
	}{
		{"a $disconnect that is a deadlock's victim is retried", mysql.ErrDeadlock, func(f *fixture) error {
			return f.Service.Disconnect(context.Background(), "victim")
		}},
		{"a $disconnect that times out waiting for a lock is retried", mysql.ErrLockWait, func(f *fixture) error {
			return f.Service.Disconnect(context.Background(), "victim")
		}},
		{"a Forget that is a deadlock's victim is retried", mysql.ErrDeadlock, func(f *fixture) error {
			f.Clock.Advance(push.ForgetMinAge + time.Second)
			return f.Service.Forget(context.Background(), []string{"victim"})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			_, tok := identitytest.NewAgent(t, f.ID, "unlucky")
			f.connect(t, "victim", tok)
			failures := 1
			f.Service.SetBeforeDelete(func() error {
				if failures > 0 {
					failures--
					return &mysqldriver.MySQLError{Number: c.errNum, Message: "injected"}
				}
				return nil
			})
			if err := c.del(f); err != nil {
				t.Fatalf("delete failed: %v", err)
			}
			if n := f.Rows(t); n != 0 {
				t.Fatalf("%d rows left after the retried delete", n)
			}
		})
	}
}

// boundRelay records, for every relay call, the context's state: whether it
// had a deadline, how far off, and whether it had already ended. With
// byeCloser set it is a push.ByeCloser.
type boundRelay struct {
	mu    sync.Mutex
	calls []relayCall
}

type relayCall struct {
	op          string
	conns       []string
	hasDeadline bool
	remaining   time.Duration
	err         error
}

func (r *boundRelay) record(ctx context.Context, op string, conns []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	dl, ok := ctx.Deadline()
	r.calls = append(r.calls, relayCall{op: op, conns: conns, hasDeadline: ok, remaining: time.Until(dl), err: ctx.Err()})
}

func (r *boundRelay) Post(ctx context.Context, msgs []push.Message) ([]string, error) {
	var conns []string
	for _, m := range msgs {
		conns = append(conns, m.ConnectionID)
	}
	r.record(ctx, "post", conns)
	return nil, nil
}

func (r *boundRelay) Close(ctx context.Context, ids []string) error {
	r.record(ctx, "close", ids)
	return nil
}

func (r *boundRelay) recorded() []relayCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

type byeCloserRelay struct{ boundRelay }

func (r *byeCloserRelay) ByeAndClose(ctx context.Context, ids []string, bye []byte) error {
	r.record(ctx, "bye-and-close "+string(bye), ids)
	return nil
}

// TestRelayWorkOnRequestPathsIsBounded: the byes and closes a request does
// after its commit ($connect evicting the oldest connection, a revocation,
// a flood on $default) run under a context of at most RelayTimeout, far
// inside API Gateway's 29 s and meshd's dial timeout, that the request's
// own cancellation does not end; a relay that can bye and close in one
// step (the Lambda relay, asynchronously) is asked to.
func TestRelayWorkOnRequestPathsIsBounded(t *testing.T) {
	type path struct {
		name string
		run  func(t *testing.T, f *fixture, ctx context.Context)
		conn string
		bye  string
	}
	paths := []path{
		{"a $connect over the cap", func(t *testing.T, f *fixture, ctx context.Context) {
			_, tok := identitytest.NewAgent(t, f.ID, "capped")
			for _, c := range []string{"c1", "c2", "c3"} {
				if _, err := f.Service.Connect(ctx, push.ConnectRequest{ConnectionID: c, Token: tok}); err != nil {
					t.Fatal(err)
				}
				f.Clock.Advance(time.Second)
			}
		}, "c1", api.ByeReplaced},
		{"a revocation whose request was cancelled", func(t *testing.T, f *fixture, ctx context.Context) {
			key, tok := identitytest.NewAgent(t, f.ID, "revokee")
			f.connect(t, "r1", tok)
			if _, err := f.ID.RevokeKey(context.Background(), "revokee", keyIDOf(key)); err != nil {
				t.Fatal(err)
			}
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			f.Service.OnKeysRevoked(cancelled, []string{keyIDOf(key)})
		}, "r1", api.ByeRevoked},
		{"a flood on $default", func(t *testing.T, f *fixture, ctx context.Context) {
			_, tok := identitytest.NewAgent(t, f.ID, "flooder")
			f.connect(t, "f1", tok)
			if err := f.Service.Received(ctx, "f1", push.MaxClientFrameBytes+1); err != nil {
				t.Fatal(err)
			}
		}, "f1", api.ByeRateLimited},
	}
	for _, p := range paths {
		t.Run(p.name+" posts and closes within RelayTimeout", func(t *testing.T) {
			f := newFixture(t)
			relay := &boundRelay{}
			f.Service.Relay = relay
			p.run(t, f, context.Background())
			calls := relay.recorded()
			if len(calls) != 2 || calls[0].op != "post" || calls[1].op != "close" {
				t.Fatalf("relay calls %+v, want a post then a close", calls)
			}
			for _, c := range calls {
				if !slices.Equal(c.conns, []string{p.conn}) || !c.hasDeadline || c.remaining > push.DefaultRelayTimeout || c.err != nil {
					t.Errorf("%s of %v: deadline %v (%v left), ended %v; want a live context of at most %v for [%s]",
						c.op, c.conns, c.hasDeadline, c.remaining, c.err, push.DefaultRelayTimeout, p.conn)
				}
			}
		})
		t.Run(p.name+" hands a ByeCloser one bye-and-close", func(t *testing.T) {
			f := newFixture(t)
			relay := &byeCloserRelay{}
			f.Service.Relay = relay
			p.run(t, f, context.Background())
			calls := relay.recorded()
			if len(calls) != 1 || calls[0].op != "bye-and-close "+bye(p.bye) || !slices.Equal(calls[0].conns, []string{p.conn}) {
				t.Fatalf("relay calls %+v, want one bye-and-close of [%s] with %s", calls, p.conn, bye(p.bye))
			}
			if c := calls[0]; !c.hasDeadline || c.remaining > push.DefaultRelayTimeout || c.err != nil {
				t.Fatalf("bye-and-close: deadline %v (%v left), ended %v; want a live context of at most %v", c.hasDeadline, c.remaining, c.err, push.DefaultRelayTimeout)
			}
		})
	}
}
