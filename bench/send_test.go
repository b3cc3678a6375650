package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/seal"
	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

// sendClients are the concurrencies of the send-path comparison; 32 is
// ARCHITECTURE.md's "32 function instances at once".
func sendClients() []int { return []int{1, 8, 32} }

// sendSenders: each of them stays far below its 50/s rate limit.
const sendSenders = 128

// sendEnv is the send route as a Lambda function runs it (httpapi.Lambda,
// identity with real HS256 JWTs, tasks.Service) over a database pool.
type sendEnv struct {
	db   *mysql.DB
	h    httpapi.LambdaHandler
	tmpl events.APIGatewayV2HTTPRequest
	body tasks.SendRequest
	n    atomic.Int64
}

func newSendEnv(t testing.TB, db *mysql.DB, tmpl events.APIGatewayV2HTTPRequest, body tasks.SendRequest, jwtKey []byte) *sendEnv {
	sealer, err := seal.New(make([]byte, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	id := &identity.Service{DB: db, Clock: mesh.SystemClock, TokenTTL: time.Hour, Sealer: sealer,
		JWTKeys: []config.JWTKey{{ID: "bench", Secret: jwtKey}}}
	// The public half parsed once, as config.Load hands it to a function
	// (MESH_JWT_PUBLIC_KEYS), not derived from the seed on every request.
	id.JWTPublicKeys = []config.JWTPublicKey{id.JWTKeys[0].Public()}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	svc := &tasks.Service{DB: db, Clock: mesh.SystemClock, Log: log}
	return &sendEnv{db: db, h: httpapi.Lambda(identityhttp.Authenticator(id), log, taskshttp.Endpoints(svc).Must("SendMessageFunction")), tmpl: tmpl, body: body}
}

// send is one POST /v1/messages from token to recipient with messageID.
func (e *sendEnv) send(ctx context.Context, token, to, messageID string) error {
	req := e.body
	req.To, req.MessageID = to, messageID
	raw, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ev := e.tmpl
	ev.Headers = maps.Clone(e.tmpl.Headers)
	ev.Headers["authorization"] = "Bearer " + token
	ev.Headers["content-length"] = strconv.Itoa(len(raw))
	ev.RequestContext.RequestID = "bench-" + strconv.FormatInt(e.n.Add(1), 10)
	ev.Body = string(raw)
	resp, err := e.h(ctx, ev)
	if err == nil && resp.StatusCode != 202 {
		err = fmt.Errorf("send: %d %s", resp.StatusCode, resp.Body)
	}
	return err
}

// measureSend compares POST /v1/messages with the very SQL statements one
// send issues (captured through a counting proxy), replayed raw on the same
// pool: no HTTP event, JSON, JWT or Go logic between them.
func measureSend(t *testing.T, r *Results) {
	ctx := context.Background()
	root := repoRoot(t)
	db, dsn := mysqltest.New(t)
	tmpl, body := sendSample(t, root)
	jwtKey := []byte("bench-jwt-secret-0123456789abcdef-0123")
	e := newSendEnv(t, db, tmpl, body, jwtKey)

	say("send: %d senders with tokens, their recipients and friendships", sendSenders)
	senders := ids("sender-", sendSenders+1) // the last one is the capture's
	recipients := ids("rcpt-", sendSenders+1)
	tokens := credentials(t, e, senders)
	insertAgents(t, db, recipients)
	pairs := make([][2]string, len(senders))
	for i := range senders {
		pairs[i] = [2]string{senders[i], recipients[i]}
	}
	befriend(t, db, pairs)

	// One send through the proxy: its round trips and statement texts.
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCountingProxy(t, cfg.Addr)
	cfg.Addr = proxy.addr()
	pdb, err := mysql.Open(ctx, cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	pe := newSendEnv(t, pdb, tmpl, body, jwtKey)
	capSender, capRcpt, capToken := senders[sendSenders], recipients[sendSenders], tokens[sendSenders]
	if err := pe.send(ctx, capToken, capRcpt, "capture-warm-up"); err != nil {
		t.Fatal(err)
	}
	const capMsg = "capture-message"
	trips, queries, err := proxy.capture(func() error { return pe.send(ctx, capToken, capRcpt, capMsg) })
	if err != nil {
		t.Fatal(err)
	}
	// A round trip may carry several statements (mysql.Pipe): the texts
	// are replayed as sent, the statements listed one by one.
	var stmts, list []string
	for i, q := range queries {
		for _, st := range strings.Split(q, ";\n") {
			stmts = append(stmts, st)
			list = append(list, fmt.Sprintf("%d: `%s`", i+1, abbrev(st, 90)))
		}
	}
	r.set("send.roundtrips", float64(trips), "round trips")
	r.set("send.statements", float64(len(stmts)), "statements")
	r.note("The %d statements of one send in its %d round trips, in order (each with the number of its round trip): %s.", len(stmts), trips, strings.Join(list, "; "))

	// The replay: the captured texts with fresh ids, a recipient of its own
	// and a sender of the pool, friends (the send's gate reads it and lets
	// the send through, as it does for a real one).
	nFresh := sized(80_000, 8_000)
	say("send: %d fresh recipients for the raw replay, each a friend of a sender", nFresh)
	fresh := ids("fresh-", nFresh)
	insertAgents(t, db, fresh)
	freshPairs := make([][2]string, nFresh)
	for i, f := range fresh {
		freshPairs[i] = [2]string{senders[i%sendSenders], f}
	}
	befriend(t, db, freshPairs)
	var next atomic.Int64
	replay := replayer(queries, capSender, capRcpt, capMsg, apiKeys(t, db))

	// The essential write alone: the task and message rows the captured
	// send wrote, inserted by the two INSERTs of the send's pipe path in
	// one transaction (BenchmarkTwoInsertCommit's shape), each statement in
	// a round trip of its own.
	two := []string{"START TRANSACTION"}
	two = append(two, writtenRows(t, db, capSender, capMsg)...)
	two = append(two, "COMMIT")
	replayTwo := replayer(two, capSender, capRcpt, capMsg, nil)

	// Each figure is the sum of two slices taken in turn with the others',
	// so a burst of load from elsewhere on the machine hits all alike.
	d := sized(2*time.Second, 500*time.Millisecond)
	for _, c := range sendClients() {
		db.SetMaxOpenConns(c)
		db.SetMaxIdleConns(c)
		say("send: POST /v1/messages, the same statements raw, and the two INSERTs; %d client(s), 2×%v each", c, d)
		var k atomic.Int64
		sendOp := func(ctx context.Context, client int) error {
			i := int(k.Add(1))
			s := (client*4 + i%4) % sendSenders
			if c < 32 {
				s = i % sendSenders
			}
			return e.send(ctx, tokens[s], recipients[s], fmt.Sprintf("m-%d-%d", c, i))
		}
		rawOp := func(ctx context.Context, client int) error {
			i := int(next.Add(1)) - 1
			if i >= nFresh {
				return fmt.Errorf("out of fresh recipients after %d replays", i)
			}
			return replay(ctx, db, senders[i%sendSenders], fresh[i])
		}
		twoOp := func(ctx context.Context, client int) error {
			return replayTwo(ctx, db, capSender, capRcpt)
		}
		var sendRate, rawRate, twoRate float64
		for range 2 {
			sendRate += run(t, c, d, sendOp) / 2
			// The replayed texts carry the capture's clock, against which
			// a sender's budget runs out after 100 sends: each replay
			// starts from full budgets, as the sends find theirs.
			if _, err := db.Exec("UPDATE rate_limits SET tat_us = 0 WHERE agent_id LIKE 'sender-%'"); err != nil {
				t.Fatal(err)
			}
			rawRate += run(t, c, d, rawOp) / 2
			twoRate += run(t, c, d, twoOp) / 2
		}
		r.set(fmt.Sprintf("send.c%d", c), sendRate, "msg/s")
		r.set(fmt.Sprintf("raw.c%d", c), rawRate, "tx/s")
		r.set(fmt.Sprintf("two.c%d", c), twoRate, "tx/s")
		r.curve("send path (POST /v1/messages)", c, sendRate)
		r.curve("the send's statements, raw", c, rawRate)
		r.curve("two-INSERT commit", c, twoRate)
	}
}

// writtenRows are the INSERT texts of the task and message rows the send
// of sender's messageID wrote, with the pipe path's column lists
// (tasks.insertTaskSQL, tasks.insertMessageSQL) and the rows' own values.
func writtenRows(t *testing.T, db *mysql.DB, sender, messageID string) []string {
	t.Helper()
	var taskID, contextID, initiator, recipient, status, parts string
	var group sql.NullString
	var created, updated, msgCreated time.Time
	if err := db.QueryRow(`SELECT t.task_id, t.context_id, t.group_id, t.initiator, t.recipient, t.status, t.created_at, t.updated_at, m.parts, m.created_at
FROM task_messages m JOIN tasks t ON t.task_id = m.task_id WHERE m.sender = ? AND m.message_id = ?`, sender, messageID).
		Scan(&taskID, &contextID, &group, &initiator, &recipient, &status, &created, &updated, &parts, &msgCreated); err != nil {
		t.Fatal(err)
	}
	var groupLit any
	if group.Valid {
		groupLit = group.String
	}
	return []string{
		inline("INSERT INTO tasks (task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
			taskID, contextID, groupLit, initiator, recipient, status, created, updated),
		inline("INSERT INTO task_messages (task_id, message_id, sender, parts, created_at) VALUES (?, ?, ?, ?, ?)",
			taskID, messageID, sender, parts, msgCreated),
	}
}

// inline is query with each ? replaced by its argument as a literal: a
// string, a time (UTC, microseconds) or nil.
func inline(query string, args ...any) string {
	pieces := strings.Split(query, "?")
	var b strings.Builder
	for i, p := range pieces {
		b.WriteString(p)
		if i == len(pieces)-1 {
			break
		}
		switch v := args[i].(type) {
		case nil:
			b.WriteString("NULL")
		case time.Time:
			b.WriteString(sqlString(v.UTC().Format("2006-01-02 15:04:05.000000")))
		case string:
			b.WriteString(sqlString(v))
		default:
			panic(fmt.Sprintf("inline: %T", v))
		}
	}
	return b.String()
}

// apiKeys maps each agent to its API key's id.
func apiKeys(t *testing.T, db *mysql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query("SELECT agent_id, key_id FROM api_keys WHERE revoked_at IS NULL")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var a, k string
		if err := rows.Scan(&a, &k); err != nil {
			t.Fatal(err)
		}
		out[a] = k
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sqlString is s as a MySQL string literal.
func sqlString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`, "\x00", `\0`, "\n", `\n`, "\r", `\r`, "\x1a", `\Z`).Replace(s) + "'"
}

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// replayer returns a func that issues the captured statements on one
// connection, with every generated id fresh, the capture's recipient and
// message id replaced and the sender swapped (its rate-limit row), with its
// API key when keys (sender -> key id) has it (the send checks the key's
// liveness).
func replayer(queries []string, sender, rcpt, msgID string, keys map[string]string) func(ctx context.Context, db *mysql.DB, sender, rcpt string) error {
	return func(ctx context.Context, db *mysql.DB, s, rc string) error {
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		ids := map[string]string{}
		suffix := uuid.NewString()[:8]
		swaps := []string{rcpt, rc, sender, s, msgID, msgID + "-" + suffix}
		if k, ok := keys[sender]; ok && keys[s] != "" {
			swaps = append(swaps, k, keys[s])
		}
		rp := strings.NewReplacer(swaps...)
		for _, q := range queries {
			q = uuidRE.ReplaceAllStringFunc(q, func(old string) string {
				if n, ok := ids[old]; ok {
					return n
				}
				n := uuid.NewString()
				ids[old] = n
				return n
			})
			q = rp.Replace(q)
			head := strings.ToUpper(strings.TrimSpace(q[:min(len(q), 12)]))
			if strings.HasPrefix(head, "SELECT") {
				rows, err := conn.QueryContext(ctx, q)
				if err != nil {
					return fmt.Errorf("%s: %w", abbrev(q, 80), err)
				}
				for rows.Next() {
				}
				rows.Close()
				continue
			}
			if _, err := conn.ExecContext(ctx, q); err != nil {
				_, _ = conn.ExecContext(ctx, "ROLLBACK")
				return fmt.Errorf("%s: %w", abbrev(q, 80), err)
			}
		}
		return nil
	}
}

// run calls op from clients goroutines for d and returns ops/s; the first
// error fails the test.
func run(t *testing.T, clients int, d time.Duration, op func(ctx context.Context, client int) error) float64 {
	ctx := context.Background()
	var n atomic.Int64
	var once sync.Once
	var failed error
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := op(ctx, c); err != nil {
					once.Do(func() { failed = err })
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	return float64(n.Load()) / time.Since(start).Seconds()
}

func (r *Results) curve(name string, clients int, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.curves[name] = append(r.curves[name], [2]float64{float64(clients), v})
}

func abbrev(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// credentials creates agents through identity and exchanges each key for a
// token, a few at a time.
func credentials(t testing.TB, e *sendEnv, agents []string) []string {
	sealer, _ := seal.New(make([]byte, seal.KeySize))
	id := &identity.Service{DB: e.db, Clock: mesh.SystemClock, TokenTTL: time.Hour, Sealer: sealer,
		JWTKeys: []config.JWTKey{{ID: "bench", Secret: []byte("bench-jwt-secret-0123456789abcdef-0123")}}}
	out := make([]string, len(agents))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, 8)
	for i, a := range agents {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, key, err := id.CreateAgent(context.Background(), a, "")
			if err == nil {
				var tok identity.TokenResponse
				if tok, err = id.IssueToken(context.Background(), key, ""); err == nil {
					out[i] = tok.Token
				}
			}
			if err != nil {
				mu.Lock()
				first = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
	return out
}

// befriend stores friendships in both directions, as identity does.
func befriend(t testing.TB, db *mysql.DB, pairs [][2]string) {
	now := time.Now().UTC()
	for start := 0; start < len(pairs); start += 250 {
		chunk := pairs[start:min(start+250, len(pairs))]
		var args []any
		for _, p := range chunk {
			args = append(args, p[0], p[1], now, p[1], p[0], now)
		}
		rows := func(stmt, tuple string) string { return stmt + strings.Repeat(", "+tuple, 2*len(chunk)-1) }
		if _, err := db.Exec(rows("INSERT INTO friendships (agent_id, friend_id, created_at) VALUES (?, ?, ?)", "(?, ?, ?)"), args...); err != nil {
			t.Fatal(err)
		}
	}
}

// sendSample is the send-message sample event under root/events and its
// body, the request every send stage sends.
func sendSample(t *testing.T, root string) (events.APIGatewayV2HTTPRequest, tasks.SendRequest) {
	t.Helper()
	var tmpl events.APIGatewayV2HTTPRequest
	var body tasks.SendRequest
	raw, err := os.ReadFile(filepath.Join(root, "events", "send-message.json"))
	if err == nil {
		err = json.Unmarshal(raw, &tmpl)
	}
	if err == nil {
		err = json.Unmarshal([]byte(tmpl.Body), &body)
	}
	if err != nil {
		t.Fatal(err)
	}
	return tmpl, body
}
