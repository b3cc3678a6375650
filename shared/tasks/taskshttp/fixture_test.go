package taskshttp

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// fixture is a fresh database, the task service on it and its routes,
// called through the real middleware (httpapi.Lambda); only authentication
// is replaced, by tokenAuth. The domain's own tests (shared/tasks) cover
// what the routes do; these cover what the adapter adds: decoding, query
// parsing and each route's status.
type fixture struct {
	db  *mysql.DB
	eps httpapi.Endpoints
}

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db, _ := mysqltest.New(t)
	now := t0
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
	if _, err := f.db.Exec("INSERT INTO friendships (agent_id, friend_id, created_at) VALUES (?, ?, ?), (?, ?, ?)", a, b, t0, b, a, t0); err != nil {
		t.Fatal(err)
	}
}

// group creates a group with its context; the first member owns it.
func (f *fixture) group(t *testing.T, groupID, contextID string, members ...string) {
	t.Helper()
	if _, err := f.db.Exec("INSERT INTO mesh_groups (group_id, name, owner_id, context_id, created_at) VALUES (?, ?, ?, ?, ?)",
		groupID, groupID, members[0], contextID, t0); err != nil {
		t.Fatal(err)
	}
	for i, m := range members {
		role := "member"
		if i == 0 {
			role = "owner"
		}
		if _, err := f.db.Exec("INSERT INTO group_members (group_id, agent_id, role, joined_at) VALUES (?, ?, ?, ?)", groupID, m, role, t0); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fixture) count(t *testing.T, query string) int {
	t.Helper()
	var n int
	if err := f.db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
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

// tokenAuth stands in for identity's JWT check: the bearer token is the
// agent id.
type tokenAuth struct{}

func (tokenAuth) AuthenticateAgent(_ context.Context, token string) (httpapi.Caller, error) {
	if !mesh.ValidAgentID(token) {
		return httpapi.Caller{}, mesh.ErrUnauthorized
	}
	return httpapi.Caller{AgentID: token, KeyID: "test"}, nil
}

func (tokenAuth) AuthenticateAdmin(context.Context, string) error { return mesh.ErrUnauthorized }

// req is one call of a route.
type req struct {
	fn     string // logical function ID
	caller string
	method string
	path   string
	params map[string]string
	query  map[string]string
	body   string
	// headers replace the defaults (Content-Type: application/json); an
	// empty value removes one.
	headers map[string]string
}

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
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: r.method + " " + r.path, RawPath: r.path,
		Headers:        map[string]string{"content-type": "application/json", "authorization": "Bearer " + r.caller},
		PathParameters: r.params, QueryStringParameters: r.query, Body: r.body,
	}
	for k, v := range r.headers {
		if v == "" {
			delete(ev.Headers, k)
		} else {
			ev.Headers[k] = v
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	out, err := httpapi.Lambda(tokenAuth{}, quiet, f.eps.Must(r.fn))(context.Background(), ev)
	if err != nil {
		t.Fatalf("%s: %v", r.fn, err)
	}
	return response{Status: out.StatusCode, Body: []byte(out.Body)}
}
