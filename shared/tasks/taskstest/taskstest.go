// Package taskstest holds what the tests of tasks (package tasks_test) and
// of its HTTP adapter (taskshttp) both need: rows written straight into a
// test database (friendships, groups), a stand-in for identity's token
// check, and a call of a route through the real middleware. It does not
// import tasks, so either side may use it.
package taskstest

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// T0 is when the fixtures' clocks start, and the creation time of the
// friendships and groups written here.
var T0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// Friends makes a and b friends (both directions, as identity stores it).
func Friends(t testing.TB, db *mysql.DB, a, b string) {
	t.Helper()
	if _, err := db.Exec("INSERT INTO friendships (agent_id, friend_id, created_at) VALUES (?, ?, ?), (?, ?, ?)", a, b, T0, b, a, T0); err != nil {
		t.Fatal(err)
	}
}

// memberRows is how many members one INSERT writes: group tests build
// thousands, and one statement a member would dominate their time.
const memberRows = 500

// Group creates group groupID with its context contextID and members; the
// first member owns it.
func Group(t testing.TB, db *mysql.DB, groupID, contextID string, members ...string) {
	t.Helper()
	if _, err := db.Exec("INSERT INTO mesh_groups (group_id, name, owner_id, context_id, created_at) VALUES (?, ?, ?, ?, ?)",
		groupID, groupID, members[0], contextID, T0); err != nil {
		t.Fatal(err)
	}
	const insert = "INSERT INTO group_members (group_id, agent_id, role, joined_at) VALUES (?, ?, ?, ?)"
	tuple := insert[strings.LastIndex(insert, "VALUES ")+len("VALUES "):]
	for start := 0; start < len(members); start += memberRows {
		chunk := members[start:min(start+memberRows, len(members))]
		var args []any
		for i, m := range chunk {
			role := "member"
			if start+i == 0 {
				role = "owner"
			}
			args = append(args, groupID, m, role, T0)
		}
		if _, err := db.Exec(insert+strings.Repeat(", "+tuple, len(chunk)-1), args...); err != nil {
			t.Fatal(err)
		}
	}
}

// TokenAuth stands in for identity's JWT check: the bearer token is the
// agent id. Authentication is identity's subject and tested there.
type TokenAuth struct{}

// AuthenticateAgent accepts any valid agent id as its own token.
func (TokenAuth) AuthenticateAgent(_ context.Context, token string) (httpapi.Caller, error) {
	if !mesh.ValidAgentID(token) {
		return httpapi.Caller{}, mesh.ErrUnauthorized
	}
	return httpapi.Caller{AgentID: token, KeyID: "test"}, nil
}

// AuthenticateAdmin refuses every key: the task routes have no admin side.
func (TokenAuth) AuthenticateAdmin(context.Context, string) error { return mesh.ErrUnauthorized }

// Request is one call of a route.
type Request struct {
	Fn     string // logical function ID
	Caller string // the agent calling, sent as its bearer token; "" sends none
	Method string
	Path   string
	Params map[string]string
	Query  map[string]string
	Body   string
	// Headers are set after the defaults (Content-Type: application/json,
	// Authorization); an empty value removes a default.
	Headers map[string]string
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Call runs r through httpapi.Lambda with TokenAuth, as API Gateway would
// call the route, and fails the test on a Go error (the middleware answers
// every failure with a response).
func Call(t testing.TB, eps httpapi.Endpoints, r Request) events.APIGatewayV2HTTPResponse {
	t.Helper()
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: r.Method + " " + r.Path, RawPath: r.Path,
		Headers:        map[string]string{"content-type": "application/json"},
		PathParameters: r.Params, QueryStringParameters: r.Query, Body: r.Body,
	}
	if r.Caller != "" {
		ev.Headers["authorization"] = "Bearer " + r.Caller
	}
	for k, v := range r.Headers {
		if v == "" {
			delete(ev.Headers, k)
		} else {
			ev.Headers[k] = v
		}
	}
	out, err := httpapi.Lambda(TokenAuth{}, quiet, eps.Must(r.Fn))(context.Background(), ev)
	if err != nil {
		t.Fatalf("%s: %v", r.Fn, err)
	}
	return out
}
