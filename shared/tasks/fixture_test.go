package tasks_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
	"github.com/agentmesh/agentmesh/shared/tasks/taskstest"
)

// fixture is a fresh database, a Service on it with a test clock, and an
// HTTP-level caller that goes through the real middleware (httpapi.Lambda):
// only authentication is replaced, by taskstest.TokenAuth.
type fixture struct {
	db  *mysql.DB
	dsn string
	svc *tasks.Service
	eps httpapi.Endpoints

	mu     sync.Mutex
	now    time.Time
	step   time.Duration
	frozen bool
}

var t0 = taskstest.T0

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db, dsn := mysqltest.New(t)
	f := &fixture{db: db, dsn: dsn, now: t0, step: 25 * time.Millisecond}
	f.svc = &tasks.Service{DB: db, Clock: f.clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.eps = taskshttp.Endpoints(f.svc)
	return f
}

// clock advances by step on every reading, so timestamps strictly increase
// and the rate limit (one token per 20 ms of clock) never trips unless a
// test freezes the clock on purpose.
func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen {
		f.now = f.now.Add(f.step)
	}
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func (f *fixture) freeze(on bool) {
	f.mu.Lock()
	f.frozen = on
	f.mu.Unlock()
}

// agents creates agents through identity's real CreateAgent, so they have
// every row an agent has.
func (f *fixture) agents(t testing.TB, ids ...string) {
	t.Helper()
	identitytest.Agents(t, f.db, ids...)
}

// refill gives agent a full rate budget again, as if it had been idle.
func (f *fixture) refill(t testing.TB, agent string) {
	t.Helper()
	if _, err := f.db.Exec("UPDATE rate_limits SET tat_us = 0 WHERE agent_id = ?", agent); err != nil {
		t.Fatal(err)
	}
}

// multiRow repeats the VALUES tuple of stmt n times.
func multiRow(stmt string, n int) string {
	tuple := stmt[strings.LastIndex(stmt, "VALUES ")+len("VALUES "):]
	return stmt + strings.Repeat(", "+tuple, n-1)
}

// friends makes a and b friends (both directions, as identity stores it).
func (f *fixture) friends(t testing.TB, a, b string) {
	t.Helper()
	taskstest.Friends(t, f.db, a, b)
}

// group creates a group with its context and members; the first owns it.
func (f *fixture) group(t testing.TB, groupID, contextID string, members ...string) {
	t.Helper()
	taskstest.Group(t, f.db, groupID, contextID, members...)
}

// taskIn inserts a task between initiator and recipient in a given state.
func (f *fixture) taskIn(t testing.TB, taskID, initiator, recipient, status string, updated time.Time) {
	t.Helper()
	if _, err := f.db.Exec("INSERT INTO tasks (task_id, context_id, initiator, recipient, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
		taskID, "ctx-"+taskID, initiator, recipient, status, updated, updated); err != nil {
		t.Fatal(err)
	}
}

// response is one HTTP answer.
type response struct {
	Status  int
	Headers map[string]string
	Body    []byte
}

func (r response) code() string {
	var p httpapi.Problem
	_ = json.Unmarshal(r.Body, &p)
	return p.Code
}

func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// req describes one call of a route.
type req struct {
	fn     string // logical function ID
	caller string
	method string
	path   string
	params map[string]string
	query  map[string]string
	body   any // marshalled to JSON; a string is sent as is
	// headers are set on the request after the defaults (Content-Type:
	// application/json); an empty value removes a default.
	headers map[string]string
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// call runs a request through httpapi.Lambda, as API Gateway would.
func (f *fixture) call(t testing.TB, r req) response {
	t.Helper()
	return callEndpoint(t, f.eps, r)
}

func callEndpoint(t testing.TB, eps httpapi.Endpoints, r req) response {
	t.Helper()
	body, ok := r.body.(string)
	if !ok && r.body != nil {
		raw, err := json.Marshal(r.body)
		if err != nil {
			t.Fatal(err)
		}
		body = string(raw)
	}
	out := taskstest.Call(t, eps, taskstest.Request{Fn: r.fn, Caller: r.caller, Method: r.method, Path: r.path,
		Params: r.params, Query: r.query, Body: body, Headers: r.headers})
	return response{Status: out.StatusCode, Headers: out.Headers, Body: []byte(out.Body)}
}

// partsJSON is parts as the wire carries them.
func partsJSON(t testing.TB, parts []mesh.Part) string {
	t.Helper()
	b, err := json.Marshal(parts)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func text(s string) []mesh.Part { return []mesh.Part{{Kind: tasks.PartText, Text: s}} }

// send posts a message and requires a 202.
func (f *fixture) send(t testing.TB, from string, body tasks.SendRequest) tasks.SendResult {
	t.Helper()
	r := f.call(t, req{fn: "SendMessageFunction", caller: from, method: "POST", path: "/v1/messages", body: body})
	if r.Status != 202 {
		t.Fatalf("send %s -> %s: %d %s", from, body.To, r.Status, r.Body)
	}
	var res tasks.SendResult
	r.decode(t, &res)
	return res
}

func (f *fixture) reply(t testing.TB, caller, taskID string, body tasks.ReplyRequest) response {
	t.Helper()
	return f.call(t, req{fn: "ReplyFunction", caller: caller, method: "POST", path: "/v1/tasks/" + taskID + "/messages",
		params: map[string]string{"id": taskID}, body: body})
}

func (f *fixture) status(t testing.TB, caller, taskID string, body any) response {
	t.Helper()
	return f.call(t, req{fn: "UpdateTaskStatusFunction", caller: caller, method: "POST", path: "/v1/tasks/" + taskID + "/status",
		params: map[string]string{"id": taskID}, body: body})
}

func (f *fixture) artifact(t testing.TB, caller, taskID string, body tasks.ArtifactRequest) response {
	t.Helper()
	return f.call(t, req{fn: "AddArtifactFunction", caller: caller, method: "POST", path: "/v1/tasks/" + taskID + "/artifacts",
		params: map[string]string{"id": taskID}, body: body})
}

func (f *fixture) groupSend(t testing.TB, caller, groupID string, body tasks.GroupSendRequest) response {
	t.Helper()
	return f.call(t, req{fn: "SendGroupMessageFunction", caller: caller, method: "POST", path: "/v1/groups/" + groupID + "/messages",
		params: map[string]string{"id": groupID}, body: body})
}

func (f *fixture) getTask(t testing.TB, caller, taskID string) response {
	t.Helper()
	return f.call(t, req{fn: "GetTaskFunction", caller: caller, method: "GET", path: "/v1/tasks/" + taskID, params: map[string]string{"id": taskID}})
}

func (f *fixture) inbox(t testing.TB, caller string, query map[string]string) response {
	t.Helper()
	return f.call(t, req{fn: "InboxFunction", caller: caller, method: "GET", path: "/v1/inbox", query: query})
}

// inboxPage reads a page and requires a 200.
type inboxPage struct {
	Events    []mesh.Envelope `json:"events"`
	NextAfter int64           `json:"next_after"`
	OldestSeq int64           `json:"oldest_seq"`
}

func (f *fixture) inboxAfter(t testing.TB, caller string, after int64) inboxPage {
	t.Helper()
	r := f.inbox(t, caller, map[string]string{"after": fmt.Sprint(after), "limit": "500"})
	if r.Status != 200 {
		t.Fatalf("inbox: %d %s", r.Status, r.Body)
	}
	var p inboxPage
	r.decode(t, &p)
	return p
}

func (f *fixture) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	return mysqltest.Count(t, f.db, query, args...)
}

// counts checks that each query (a COUNT or a single number) returns the
// number it maps to, and reports every one that does not.
func (f *fixture) counts(t testing.TB, want map[string]int) {
	t.Helper()
	for q, n := range want {
		if got := f.count(t, q); got != n {
			t.Errorf("%s = %d, want %d", q, got, n)
		}
	}
}

// dbState summarises everything a write could change except rate tokens;
// "bad input changes nothing" compares it before and after.
type dbState struct {
	Tasks, Messages, Artifacts, Keys, Outbox int
	SeqSum                                   int
	TaskDigest                               string
}

func (f *fixture) state(t testing.TB) dbState {
	t.Helper()
	var s dbState
	s.Tasks = f.count(t, "SELECT COUNT(*) FROM tasks")
	s.Messages = f.count(t, "SELECT COUNT(*) FROM task_messages")
	s.Artifacts = f.count(t, "SELECT COUNT(*) FROM task_artifacts")
	s.Keys = f.count(t, "SELECT COUNT(*) FROM idempotency_keys")
	s.Outbox = f.count(t, "SELECT COUNT(*) FROM outbox_events")
	s.SeqSum = f.count(t, "SELECT COALESCE(SUM(last_seq), 0) FROM inbox_counters")
	if err := f.db.QueryRow("SELECT COALESCE(GROUP_CONCAT(CONCAT(task_id, status, updated_at) ORDER BY task_id), '') FROM tasks").Scan(&s.TaskDigest); err != nil {
		t.Fatal(err)
	}
	return s
}

// unchanged fails the test, saying what did it, when the database is no
// longer in state before: what ran since then must not have written.
func (f *fixture) unchanged(t testing.TB, before dbState, what string) {
	t.Helper()
	if after := f.state(t); after != before {
		t.Fatalf("%s: %+v -> %+v", what, before, after)
	}
}

// events returns every event of recipient in seq order, paging the inbox.
func (f *fixture) events(t testing.TB, recipient string) []mesh.Envelope {
	t.Helper()
	var all []mesh.Envelope
	for after := int64(0); ; {
		p := f.inboxAfter(t, recipient, after)
		if len(p.Events) == 0 {
			return all
		}
		all = append(all, p.Events...)
		after = p.NextAfter
	}
}
