package taskshttp

import (
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/tasks/taskstest"
)

// fixture is a fresh database, the task service on it and its routes,
// called through the real middleware (httpapi.Lambda); only authentication
// is replaced, by taskstest.TokenAuth. The domain's own tests (shared/tasks) cover
// what the routes do; these cover what the adapter adds: decoding, query
// parsing and each route's status.
type fixture struct {
	db  *mysql.DB
	eps httpapi.Endpoints
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db, _ := mysqltest.New(t)
	now := taskstest.T0
	// Each reading moves on, so the rate limit never trips.
	clock := func() time.Time { now = now.Add(25 * time.Millisecond); return now }
	svc := &tasks.Service{DB: db, Clock: clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return &fixture{db: db, eps: Endpoints(svc)}
}

func (f *fixture) agents(t *testing.T, ids ...string) {
	t.Helper()
	identitytest.Agents(t, f.db, ids...)
}

// friends makes a and b friends (both directions, as identity stores it).
func (f *fixture) friends(t *testing.T, a, b string) {
	t.Helper()
	taskstest.Friends(t, f.db, a, b)
}

// group creates a group with its context; the first member owns it.
func (f *fixture) group(t *testing.T, groupID, contextID string, members ...string) {
	t.Helper()
	taskstest.Group(t, f.db, groupID, contextID, members...)
}

func (f *fixture) count(t *testing.T, query string) int {
	t.Helper()
	return mysqltest.Count(t, f.db, query)
}

// state counts every table a write could change, except rate tokens.
func (f *fixture) state(t *testing.T) [5]int {
	t.Helper()
	return [5]int{
		f.count(t, "SELECT COUNT(*) FROM tasks"),
		f.count(t, "SELECT COUNT(*) FROM task_messages"),
		f.count(t, "SELECT COUNT(*) FROM task_artifacts"),
		f.count(t, "SELECT COUNT(*) FROM idempotency_keys"),
		f.count(t, "SELECT COUNT(*) FROM outbox_events"),
	}
}

// req is one call of a route.
type req = taskstest.Request

// response is one HTTP answer.
type response struct {
	Status int
	Body   []byte
}

func (r response) code() string {
	var p httpapi.Problem
	_ = json.Unmarshal(r.Body, &p)
	return p.Code
}

// call runs a request through httpapi.Lambda, as API Gateway would.
func (f *fixture) call(t *testing.T, r req) response {
	t.Helper()
	out := taskstest.Call(t, f.eps, r)
	return response{Status: out.StatusCode, Body: []byte(out.Body)}
}
