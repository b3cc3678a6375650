package tasks_test

// Benchmarks of the write and read paths, run by `make bench`. Every request
// goes through httpapi.Lambda as a real API Gateway HTTP API v2 event (the
// sample events under events/ as templates) against the real MariaDB, and
// is authenticated by identity.Service with a real HS256 JWT and its
// key-liveness query: the figures are what a function spends per request,
// minus the API Gateway hop and the Lambda runtime. Nothing here is a pass/fail
// target; a request that does not get its 2xx fails the benchmark, so a
// number is never the speed of an error path.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/seal"

	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

const (
	// benchClients is the concurrency of the parallel cases, as in
	// ARCHITECTURE.md's "from 32" figure: 32 function instances at once.
	benchClients = 32
	// sendersPerClient: each client rotates over its own senders so that no
	// agent exceeds its 50/s limit (a 429 would fail the benchmark). With
	// 128 senders the mesh-wide budget is 6,400/s, several times what the
	// send path sustains, so the limiter runs on every request (its UPDATE is
	// part of the cost) but never refuses.
	sendersPerClient = 4
)

// benchEnv is a migrated database, an identity service that signs and
// verifies real tokens, and the tasks endpoints behind httpapi.Lambda.
type benchEnv struct {
	db    *mysql.DB
	id    *identity.Service
	svc   *tasks.Service
	eps   httpapi.Endpoints
	log   *slog.Logger
	msgID atomic.Int64
}

// agentCred is an agent with a live API key and a token for it.
type agentCred struct{ id, token string }

// newBenchEnv builds the environment; clock drives the tasks service (the
// rate limiter and timestamps), identity always uses the system clock.
func newBenchEnv(b *testing.B, clock mesh.Clock) *benchEnv {
	b.Helper()
	db, _ := mysqltest.New(b)
	master := make([]byte, seal.KeySize)
	sealer, err := seal.New(master)
	if err != nil {
		b.Fatal(err)
	}
	id := &identity.Service{
		DB: db, Clock: mesh.SystemClock, TokenTTL: time.Hour, Sealer: sealer,
		JWTKeys: []config.JWTKey{{ID: "bench", Secret: []byte("bench-jwt-secret-0123456789abcdef-0123")}},
	}
	// The Lambda functions log one JSON line per request; discarding it
	// still pays for building and encoding it.
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	svc := &tasks.Service{DB: db, Clock: clock, Log: log}
	return &benchEnv{db: db, id: id, svc: svc, eps: taskshttp.Endpoints(svc), log: log}
}

// handler is the Lambda handler of a logical function, as functions/*/main.go wires it.
func (e *benchEnv) handler(fn string) httpapi.LambdaHandler {
	return httpapi.Lambda(identityhttp.Authenticator(e.id), e.log, e.eps.Must(fn))
}

// credentials creates agents through identity (agent, API key, counter and
// rate-limit rows) and exchanges each key for a token, a few at a time.
func (e *benchEnv) credentials(b *testing.B, ids []string) []agentCred {
	b.Helper()
	out := make([]agentCred, len(ids))
	errs := make(chan error, len(ids))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	ctx := context.Background()
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, key, err := e.id.CreateAgent(ctx, id, "")
			if err != nil {
				errs <- err
				return
			}
			tok, err := e.id.IssueToken(ctx, key, "")
			if err != nil {
				errs <- err
				return
			}
			out[i] = agentCred{id: id, token: tok.Token}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("create agents: %v", err)
	}
	return out
}

// befriend stores friendships in both directions, as identity does.
func (e *benchEnv) befriend(b *testing.B, pairs [][2]string) {
	b.Helper()
	for start := 0; start < len(pairs); start += 250 {
		chunk := pairs[start:min(start+250, len(pairs))]
		var args []any
		for _, p := range chunk {
			args = append(args, p[0], p[1], t0, p[1], p[0], t0)
		}
		if _, err := e.db.Exec(multiRow("INSERT INTO friendships (agent_id, friend_id, created_at) VALUES (?, ?, ?)", 2*len(chunk)), args...); err != nil {
			b.Fatal(err)
		}
	}
}

// sampleEvent reads events/<name>.json, the request API Gateway delivers.
func sampleEvent(b *testing.B, name string) events.APIGatewayV2HTTPRequest {
	b.Helper()
	raw, err := os.ReadFile("../../events/" + name + ".json")
	if err != nil {
		b.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		b.Fatal(err)
	}
	return ev
}

// request is tmpl from the agent with token, with its own request id and body.
func request(tmpl events.APIGatewayV2HTTPRequest, token string, n int64, body []byte) events.APIGatewayV2HTTPRequest {
	ev := tmpl
	ev.Headers = maps.Clone(tmpl.Headers)
	ev.Headers["authorization"] = "Bearer " + token
	ev.RequestContext.RequestID = "bench-" + strconv.FormatInt(n, 10)
	ev.Body = ""
	if body != nil {
		ev.Headers["content-length"] = strconv.Itoa(len(body))
		ev.Body = string(body)
	}
	return ev
}

// call runs ev and returns an error unless the answer has status want.
func call(h httpapi.LambdaHandler, ev events.APIGatewayV2HTTPRequest, want int) error {
	resp, err := h(context.Background(), ev)
	if err == nil && resp.StatusCode != want {
		err = fmt.Errorf("%s: got %d %s, want %d", ev.RouteKey, resp.StatusCode, resp.Body, want)
	}
	return err
}

// setPool sets the pool's connection cap and returns a func restoring the
// previous one (mysql.Open's default of 10).
func setPool(db *mysql.DB, n int) func() {
	prev := db.Stats().MaxOpenConnections
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	return func() {
		db.SetMaxOpenConns(prev)
		db.SetMaxIdleConns(prev)
	}
}

// parallel runs op on benchClients goroutines (whatever GOMAXPROCS is);
// op gets the goroutine's index and its iteration number. The first error
// stops every goroutine and fails the benchmark.
func parallel(b *testing.B, op func(client, i int) error) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((benchClients + procs - 1) / procs)
	var next atomic.Int64
	var failed atomic.Bool
	var once sync.Once
	b.RunParallel(func(pb *testing.PB) {
		client := int(next.Add(1) - 1)
		for i := 0; pb.Next(); i++ {
			if failed.Load() {
				continue
			}
			if err := op(client, i); err != nil {
				failed.Store(true)
				once.Do(func() { b.Error(err) })
			}
		}
	})
}

// perSecond reports b.N divided by the timed duration as unit.
func perSecond(b *testing.B, n int, unit string) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(n)/s, unit)
	}
}

// BenchmarkTwoInsertCommit is the baseline of the write path: a durable
// transaction of two INSERTs (a task and its message, the statements Send
// uses) through mysql.DB.InTx, nothing else. ARCHITECTURE.md quotes ~540/s
// from one client and ~2,700/s from 32 on this machine.
func BenchmarkTwoInsertCommit(b *testing.B) {
	db, _ := mysqltest.New(b)
	ctx := context.Background()
	var n atomic.Int64
	commit := func() error {
		id := "bench-" + strconv.FormatInt(n.Add(1), 10)
		now := time.Now().UTC()
		return db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, tasks.InsertTaskSQL, id, id, nil, "a", "b", mesh.TaskSubmitted, now, now); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, tasks.InsertMessageSQL, id, id, "a", `[{"kind":"text","text":"hello"}]`, now)
			return err
		})
	}
	b.Run("clients=1", func(b *testing.B) {
		for b.Loop() {
			if err := commit(); err != nil {
				b.Fatal(err)
			}
		}
		perSecond(b, b.N, "tx/s")
	})
	for _, pool := range []int{10, benchClients} {
		b.Run(fmt.Sprintf("clients=%d/pool=%d", benchClients, pool), func(b *testing.B) {
			defer setPool(db, pool)()
			parallel(b, func(int, int) error { return commit() })
			perSecond(b, b.N, "tx/s")
		})
	}
}

// BenchmarkSendMessage measures POST /v1/messages end to end: JWT verify and
// key-liveness query, rate limit, idempotency key, reachability, task and
// message inserts, outbox append (seq counter), stored response, commit.
//
// The parallel cases run 32 clients, once with mysql.Open's default pool of
// 10 connections (what one process gets, e.g. the local stack serving every
// route) and once with 32 (32 Lambda instances hold a connection each). The
// recipients are either distinct per sender ("many") or one agent that every
// sender writes to ("one-hot": all transactions queue on its inbox counter
// row, the worst case of the gapless seq).
func BenchmarkSendMessage(b *testing.B) {
	e := newBenchEnv(b, mesh.SystemClock)
	n := benchClients * sendersPerClient
	sendersIDs, recipients := memberIDs("sender-", n), memberIDs("rcpt-", n)
	const hot = "hot-recipient"
	identitytest.Agents(b, e.db, append(recipients, hot)...)
	senders := e.credentials(b, sendersIDs)
	var pairs [][2]string
	for i := range senders {
		pairs = append(pairs, [2]string{senders[i].id, recipients[i]}, [2]string{senders[i].id, hot})
	}
	e.befriend(b, pairs)

	tmpl := sampleEvent(b, "send-message")
	var body tasks.SendRequest
	if err := json.Unmarshal([]byte(tmpl.Body), &body); err != nil {
		b.Fatal(err)
	}
	h := e.handler("SendMessageFunction")
	// send is one client request: a new task from sender k to its recipient
	// (or the hot one) with a fresh client-minted message_id.
	send := func(k int, hotRecipient bool) error {
		req := body
		req.To = recipients[k]
		if hotRecipient {
			req.To = hot
		}
		m := e.msgID.Add(1)
		req.MessageID = "bench-msg-" + strconv.FormatInt(m, 10)
		raw, err := json.Marshal(req)
		if err != nil {
			return err
		}
		return call(h, request(tmpl, senders[k].token, m, raw), 202)
	}

	b.Run("clients=1", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := send(i%n, false); err != nil {
				b.Fatal(err)
			}
			i++
		}
		perSecond(b, b.N, "msgs/s")
	})
	for _, rc := range []struct {
		name string
		hot  bool
	}{{"many", false}, {"one-hot", true}} {
		for _, pool := range []int{10, benchClients} {
			b.Run(fmt.Sprintf("clients=%d/recipients=%s/pool=%d", benchClients, rc.name, pool), func(b *testing.B) {
				b.ReportAllocs()
				defer setPool(e.db, pool)()
				parallel(b, func(client, i int) error {
					return send((client*sendersPerClient+i%sendersPerClient)%n, rc.hot)
				})
				perSecond(b, b.N, "msgs/s")
			})
		}
	}
}

// BenchmarkGroupFanout1000 measures one POST /v1/groups/{id}/messages to a
// group of 1,000 (999 recipients): one transaction writing 999 tasks, 999
// messages and 999 outbox events with their seq counters.
func BenchmarkGroupFanout1000(b *testing.B) {
	e := newBenchEnv(b, mesh.SystemClock)
	owner := e.credentials(b, []string{"fanout-owner"})[0]
	members := memberIDs("member-", 999)
	identitytest.Agents(b, e.db, members...)
	g, err := e.id.AdminCreateGroup(context.Background(), identity.AdminGroupInput{Name: "all hands", Owner: owner.id, Members: members})
	if err != nil {
		b.Fatal(err)
	}
	tmpl := sampleEvent(b, "send-group-message")
	tmpl.PathParameters = map[string]string{"id": g.GroupID}
	tmpl.RawPath = "/v1/groups/" + g.GroupID + "/messages"
	tmpl.RequestContext.HTTP.Path = tmpl.RawPath
	var body tasks.GroupSendRequest
	if err := json.Unmarshal([]byte(tmpl.Body), &body); err != nil {
		b.Fatal(err)
	}
	h := e.handler("SendGroupMessageFunction")
	b.ReportAllocs()
	for b.Loop() {
		// A fan-out to 999 costs 999 rate units (20 s of budget): refill
		// it outside the timing, the benchmark measures the write.
		b.StopTimer()
		if _, err := e.db.Exec("UPDATE rate_limits SET tat_us = 0 WHERE agent_id = ?", owner.id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		m := e.msgID.Add(1)
		body.MessageID = "bench-group-" + strconv.FormatInt(m, 10)
		raw, err := json.Marshal(body)
		if err != nil {
			b.Fatal(err)
		}
		if err := call(h, request(tmpl, owner.token, m, raw), 202); err != nil {
			b.Fatal(err)
		}
	}
	perSecond(b, b.N*len(members), "events/s")
}

// countingQuerier counts the statements the inbox issues.
type countingQuerier struct {
	q outbox.Querier
	n atomic.Int64
}

func (c *countingQuerier) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	c.n.Add(1)
	return c.q.QueryContext(ctx, query, args...)
}

func (c *countingQuerier) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	c.n.Add(1)
	return c.q.QueryRowContext(ctx, query, args...)
}

// BenchmarkInboxPoll measures GET /v1/inbox for a recipient holding 10,000
// events: pages of 100 at cursors spread over the whole inbox, and the cost
// of an idle long poll (wait=2 on an inbox with nothing new), counted in
// statements the inbox actually sends to the database (its reads and the
// final oldest_seq; every request also costs the auth SELECT and the
// rate-limit UPDATE, which are not counted).
//
// One agent polling faster than 50/s would get 429s, so the tasks service
// runs on a clock that advances 25 ms per reading: the rate-limit UPDATE
// still runs on every request, it just never refuses.
func BenchmarkInboxPoll(b *testing.B) {
	var ticks atomic.Int64
	start := time.Now().UTC()
	e := newBenchEnv(b, func() time.Time { return start.Add(time.Duration(ticks.Add(1)) * 25 * time.Millisecond) })
	counter := &countingQuerier{q: e.db}
	e.svc.Inbox.DB = counter
	reader := e.credentials(b, []string{"inbox-reader"})[0]
	identitytest.Agents(b, e.db, "inbox-writer")
	const total, page = 10_000, 100
	fillInbox(b, e.db, "inbox-writer", reader.id, total)

	tmpl := sampleEvent(b, "inbox")
	h := e.handler("InboxFunction")
	get := func(after int64, wait string) events.APIGatewayV2HTTPRequest {
		ev := request(tmpl, reader.token, after, nil)
		ev.QueryStringParameters = map[string]string{"after": strconv.FormatInt(after, 10), "limit": strconv.Itoa(page), "wait": wait}
		ev.RawQueryString = "after=" + ev.QueryStringParameters["after"] + "&limit=" + strconv.Itoa(page) + "&wait=" + wait
		return ev
	}
	// The pages really hold 100 events (checked once, outside the timing).
	resp, err := h(context.Background(), get(4_200, "0"))
	var p outbox.Page
	if err == nil {
		err = json.Unmarshal([]byte(resp.Body), &p)
	}
	if err != nil || len(p.Events) != page || p.Events[0].Seq != 4_201 {
		b.Fatalf("inbox page: %v %d %.200s", err, resp.StatusCode, resp.Body)
	}

	b.Run("page=100/of=10000", func(b *testing.B) {
		b.ReportAllocs()
		i := int64(0)
		for b.Loop() {
			if err := call(h, get((i*page)%total, "0"), 200); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("idle-wait=2s", func(b *testing.B) {
		b.ReportAllocs()
		before := counter.n.Load()
		for b.Loop() {
			if err := call(h, get(total, "2"), 200); err != nil {
				b.Fatal(err)
			}
		}
		q := float64(counter.n.Load() - before)
		b.ReportMetric(q/float64(b.N), "inbox-queries/op")
		b.ReportMetric(q/b.Elapsed().Seconds(), "inbox-queries/s")
	})
}

// fillInbox appends n message events from sender to recipient through
// outbox.Append, 500 per transaction, with bodies shaped like Send's.
func fillInbox(b *testing.B, db *mysql.DB, sender, recipient string, n int) {
	b.Helper()
	ctx := context.Background()
	parts := json.RawMessage(`[{"kind":"text","text":"Please translate the attached release notes into German."}]`)
	for done := 0; done < n; {
		chunk := min(500, n-done)
		evs := make([]outbox.Event, 0, chunk)
		for i := range chunk {
			id := fmt.Sprintf("fill-%06d", done+i)
			t := &tasks.Task{TaskID: id, ContextID: "ctx-" + id, Initiator: sender, Recipient: recipient, Status: mesh.TaskSubmitted, CreatedAt: t0, UpdatedAt: t0}
			body, err := json.Marshal(tasks.MessageBody{Message: tasks.EventMessage{MessageID: id, From: sender, Parts: parts, CreatedAt: t0}, Task: tasks.TaskRef{TaskID: t.TaskID, ContextID: t.ContextID, Initiator: t.Initiator, Recipient: t.Recipient, Status: t.Status}})
			if err != nil {
				b.Fatal(err)
			}
			evs = append(evs, outbox.Event{Type: mesh.EventMessage, To: recipient, From: sender, TaskID: id, ContextID: t.ContextID,
				MessageID: id, OccurredAt: t0, Body: body})
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error { return outbox.Append(ctx, tx, evs) }); err != nil {
			b.Fatal(err)
		}
		done += chunk
	}
}
