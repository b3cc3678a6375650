package tasks_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

// raceDeadline bounds every wait of the race tests: reaching it fails the
// test (a lost signal or a lock nobody releases), it never lets one pass.
const raceDeadline = 2 * time.Minute

// A send checks that its parties may talk, then writes. Something that ends
// their relationship (a block, an unfriend, a member leaving the shared
// group) and commits between that check and the send's commit must not let
// the send commit after it: the send holds its check until it commits, so
// the ending waits for it. The send is paused at its last statement (the
// before-commit failpoint) while the ending runs; the ending must then be
// unable to take a lock the send holds, and may finish only once the send
// has committed.
func TestAnEndingThatRacesASendWaitsForTheSendToCommit(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, f *fixture)
		send  func(f *fixture) error
		end   func(ctx context.Context, id *identity.Service) error
	}{
		{
			name:  "a block by the recipient waits for a direct send",
			setup: func(t *testing.T, f *fixture) { f.friends(t, "ann", "bob") },
			send:  directSend,
			end:   func(ctx context.Context, id *identity.Service) error { return id.BlockAgent(ctx, "bob", "ann") },
		},
		{
			name:  "an unfriend waits for a direct send",
			setup: func(t *testing.T, f *fixture) { f.friends(t, "ann", "bob") },
			send:  directSend,
			end:   func(ctx context.Context, id *identity.Service) error { return id.RemoveFriend(ctx, "bob", "ann") },
		},
		{
			name:  "the recipient leaving the only shared group waits for a direct send",
			setup: func(t *testing.T, f *fixture) { f.group(t, "g", "ctx-g", "ann", "bob") },
			send:  directSend,
			end: func(ctx context.Context, id *identity.Service) error {
				return id.RemoveGroupMember(ctx, "bob", "g", "bob")
			},
		},
		{
			name:  "a block by a member waits for a group send",
			setup: func(t *testing.T, f *fixture) { f.group(t, "g", "ctx-g", "ann", "bob", "cid") },
			send:  groupSend,
			end:   func(ctx context.Context, id *identity.Service) error { return id.BlockAgent(ctx, "bob", "ann") },
		},
		{
			name:  "a member leaving waits for a group send",
			setup: func(t *testing.T, f *fixture) { f.group(t, "g", "ctx-g", "ann", "bob", "cid") },
			send:  groupSend,
			end: func(ctx context.Context, id *identity.Service) error {
				return id.RemoveGroupMember(ctx, "bob", "g", "bob")
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // the cases spend their time waiting on locks
			f := newFixture(t)
			f.agents(t, "ann", "bob", "cid")
			c.setup(t, f)
			ctx, cancel := context.WithTimeout(context.Background(), raceDeadline)
			defer cancel()

			checked, release := make(chan struct{}), make(chan struct{})
			var once, released sync.Once
			unpause := func() { released.Do(func() { close(release) }) }
			// A failing test must not leave the send's transaction open:
			// dropping the database would wait for it.
			t.Cleanup(unpause)
			f.svc.Failpoint = func(context.Context, string) error {
				once.Do(func() { close(checked) })
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			sent := make(chan error, 1)
			go func() { sent <- c.send(f) }()
			wait(t, checked, "the send to reach its commit")

			// The ending runs on connections that wait one second for a
			// lock: if it needs one the paused send holds, it ends in
			// lock-wait timeouts (after InTx's retries) instead of waiting
			// for the test, which is the proof that it cannot commit first.
			err := c.end(ctx, &identity.Service{DB: impatient(t, f.dsn), Clock: f.clock})
			if err == nil {
				unpause()
				t.Fatalf("the ending committed while the send held its check, and the send then answered %v: "+
					"a send committed after the ending", waitErr(t, sent, "the send"))
			}
			if !mysql.IsRetryable(err) {
				t.Fatalf("the ending: %v, want a lock-wait timeout", err)
			}
			unpause()
			if err := waitErr(t, sent, "the send"); err != nil {
				t.Fatalf("the send, released: %v", err)
			}
			if err := c.end(ctx, &identity.Service{DB: f.db, Clock: f.clock}); err != nil {
				t.Fatalf("the ending, after the send: %v", err)
			}
			if ok, err := identity.CanCommunicate(ctx, f.db, "ann", "bob"); err != nil || ok {
				t.Fatalf("after the ending, ann can still reach bob (%v)", err)
			}
		})
	}
}

func directSend(f *fixture) error {
	_, err := f.svc.Send(context.Background(), "ann", tasks.SendRequest{To: "bob", Parts: text("racing")})
	return err
}

func groupSend(f *fixture) error {
	_, err := f.svc.SendToGroup(context.Background(), "ann", "g", tasks.GroupSendRequest{Parts: text("racing")})
	return err
}

// impatient opens a pool on dsn whose sessions give up on a row lock after
// one second (the server's default is 50).
func impatient(t *testing.T, dsn string) *mysql.DB {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["innodb_lock_wait_timeout"] = "1"
	db, err := mysql.Open(context.Background(), cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// wait fails the test if ch is not closed within raceDeadline.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(raceDeadline):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitErr receives one result, failing the test at raceDeadline.
func waitErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(raceDeadline):
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
}

// The other order: a send that meets a block still open on another
// connection cannot decide around it. Its check waits for the block's
// locks (on connections that give up after a second, so the wait shows as
// lock-wait timeouts rather than as the test hanging), and once the block
// has committed the send is refused.
func TestASendThatMeetsAnOpenBlockWaitsForItAndIsThenRefused(t *testing.T) {
	cases := []struct {
		name string
		send func(s *tasks.Service) error
		want string
	}{
		{"a direct send", func(s *tasks.Service) error {
			_, err := s.Send(context.Background(), "ann", tasks.SendRequest{To: "bob", Parts: text("racing")})
			return err
		}, mesh.ErrNotReachable.Code},
		{"a group send to the blocker alone", func(s *tasks.Service) error {
			_, err := s.SendToGroup(context.Background(), "ann", "g", tasks.GroupSendRequest{Parts: text("racing")})
			return err
		}, "no_recipients"},
	}
	for _, c := range cases {
		t.Run(c.name+" waits for an open block and is then refused", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.agents(t, "ann", "bob")
			f.friends(t, "ann", "bob")
			f.group(t, "g", "ctx-g", "ann", "bob")
			ctx, cancel := context.WithTimeout(context.Background(), raceDeadline)
			defer cancel()
			// A block held open after its insert. Its agents rows are only
			// share-locked (BlockAgent takes them exclusively), so what the
			// send waits for is the block row itself.
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if err := identity.LockAgents(ctx, tx, []string{"ann", "bob"}); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO agent_blocks (agent_id, blocked_id, created_at) VALUES ('bob', 'ann', ?)", t0); err != nil {
				t.Fatal(err)
			}

			err = c.send(&tasks.Service{DB: impatient(t, f.dsn), Clock: f.clock})
			if err == nil {
				t.Fatal("the send committed while the block was open: its check did not wait for the block")
			}
			if !mysql.IsRetryable(err) {
				t.Fatalf("the send during the block: %v, want a lock-wait timeout", err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			var me *mesh.Error
			if err := c.send(f.svc); !errors.As(err, &me) || me.Code != c.want {
				t.Fatalf("the send after the block: %v, want %s", err, c.want)
			}
		})
	}
}
