package tasks_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	drv "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/testenv"

	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

// The database going away is not a bug: every route answers 503
// unavailable with Retry-After while it is unreachable, changes nothing,
// and works again as soon as it is back. The outage is a TCP proxy in front
// of the shared MariaDB that the test cuts; the server itself keeps serving
// the other tests.
func TestAnUnreachableDatabaseAnswers503WithRetryAfterAndWritesResumeWhenItIsBack(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob")
	f.friends(t, "ann", "bob")
	cfg, err := drv.ParseDSN(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr()
	db, err := mysql.Open(context.Background(), cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	svc := &tasks.Service{DB: db, Clock: f.clock, Log: quiet}
	eps := taskshttp.Endpoints(svc)
	send := func(t *testing.T, id string) response {
		return callEndpoint(t, eps, req{fn: "SendMessageFunction", caller: "ann", method: "POST", path: "/v1/messages",
			body: tasks.SendRequest{To: "bob", Parts: text("hello " + id), MessageID: id}})
	}
	if r := send(t, "before"); r.Status != 202 {
		t.Fatalf("before the outage: %d %s", r.Status, r.Body)
	}

	proxy.Cut()
	before := f.state(t)
	for _, c := range []struct {
		name string
		call func(t *testing.T) response
	}{
		{"a send", func(t *testing.T) response { return send(t, "during") }},
		{"an inbox read", func(t *testing.T) response {
			return callEndpoint(t, eps, req{fn: "InboxFunction", caller: "bob", method: "GET", path: "/v1/inbox"})
		}},
		{"a task list", func(t *testing.T) response {
			return callEndpoint(t, eps, req{fn: "ListTasksFunction", caller: "bob", method: "GET", path: "/v1/tasks"})
		}},
	} {
		t.Run(c.name+" during the outage answers 503 unavailable with Retry-After", func(t *testing.T) {
			r := c.call(t)
			ra, err := strconv.Atoi(r.Headers["Retry-After"])
			if r.Status != 503 || r.code() != "unavailable" || err != nil || ra < 1 {
				t.Fatalf("got %d %s (Retry-After %q), want 503 unavailable with Retry-After", r.Status, r.Body, r.Headers["Retry-After"])
			}
		})
	}
	f.unchanged(t, before, "the outage changed the database")

	proxy.Restore()
	t.Run("writes succeed again once the database is back", func(t *testing.T) {
		// The pool may still hold connections the cut broke; each failed
		// attempt drops one, so this converges within a few tries.
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; ; i++ {
			r := send(t, fmt.Sprint("after-", i))
			if r.Status == 202 {
				break
			}
			if r.Status != 503 || time.Now().After(deadline) {
				t.Fatalf("after the outage: %d %s", r.Status, r.Body)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM task_messages WHERE message_id = 'during'"); n != 0 {
			t.Fatalf("the write refused during the outage was stored %d times", n)
		}
	})
}
