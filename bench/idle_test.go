package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/push"
)

// The idle cost of the push channel: measureIdle (the client, this
// process) holds idleConns idle WebSocket connections against the local
// stack, which TestIdleServer serves in a child process of its own: so the
// memory figures are the serving process's alone, and each process stays
// under the fd limit (one fd per connection on each side).
var (
	idleConns  = flag.Int("idle.conns", 10_000, "idle push connections the idle-cost stage holds (two per agent)")
	idleWindow = flag.Duration("idle.window", 60*time.Second, "how long the idle-cost stage watches the idle connections")
	idleServe  = flag.Bool("idle.serve", false, "internal: serve the local stack for the idle-cost stage (its child process)")
	idleDir    = flag.String("idle.dir", "", "internal: where the idle server writes the agents' tokens")
)

// Bounds of the idle stage.
const (
	idleDialers      = 64               // handshakes at once
	idlePingers      = 256              // pings at once
	idleStartTimeout = 10 * time.Minute // the child's database, agents and tokens
	idleDrainTimeout = 5 * time.Minute  // every $disconnect after the client closed
	idleMaxConns     = 18_000           // below the fd hard limit of 20,000, with room for the pool and files
	idleLinePrefix   = "IDLE "          // the child's protocol lines on stdout
	idleDialAttempts = 5                // handshakes of one connection answered 5xx before the stage gives up
)

// idleSnap is the serving process's state at one instant, after a GC.
type idleSnap struct {
	Conns       int              `json:"conns"`
	Invocations map[string]int64 `json:"invocations"`
	RSS         int64            `json:"rss"`        // bytes, VmRSS
	HeapInuse   int64            `json:"heap_inuse"` // bytes
	StackInuse  int64            `json:"stack_inuse"`
	Sys         int64            `json:"sys"`
	Goroutines  int              `json:"goroutines"`
	DBTrips     int              `json:"db_trips"`   // commands sent to MariaDB since "arm"
	DBQueries   []string         `json:"db_queries"` // their SQL (COM_QUERY), at most 100
}

func (s idleSnap) total() int64 {
	var n int64
	for _, v := range s.Invocations {
		n += v
	}
	return n
}

// invDelta is what each function was invoked between a and b.
func invDelta(a, b idleSnap) map[string]int64 {
	d := map[string]int64{}
	for k, v := range b.Invocations {
		if n := v - a.Invocations[k]; n != 0 {
			d[k] = n
		}
	}
	return d
}

// TestIdleServer is the serving side of the idle-cost stage, started by
// measureIdle as a child process: the local stack with its WebSocket API
// (no schedules: nothing but the connections' own events may invoke a
// function), its database reached through a counting proxy, and the agents
// the client connects as. It answers commands on stdin ("snap", "arm",
// "quit") with lines on stdout.
func TestIdleServer(t *testing.T) {
	if !*idleServe {
		t.Skip("the serving process of the idle-cost stage; measureIdle (make bench) starts it")
	}
	if *idleDir == "" || *idleConns <= 0 || *idleConns > idleMaxConns {
		t.Fatalf("-idle.dir is required and -idle.conns must be 1 to %d", idleMaxConns)
	}
	// The stack's own pool goes through the proxy: every command the
	// stack sends to MariaDB is counted, whoever else shares the server.
	_, dsn := mysqltest.New(t)
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCountingProxy(t, cfg.Addr)
	cfg.Addr = proxy.addr()
	// Warnings and errors (a refused or failed $connect) go to stderr,
	// whose tail the client shows when the stage fails.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st := localstacktest.Start(t, localstacktest.Options{Push: true, Log: log, Env: map[string]string{"MYSQL_DSN": cfg.FormatDSN()}})

	agents := (*idleConns + push.MaxConnsPerAgent - 1) / push.MaxConnsPerAgent
	agentIDs := ids("idle", agents)
	keys := identitytest.Agents(t, st.Env.DB, agentIDs...)
	tokens := make([]string, agents)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	slots := make(chan struct{}, 16)
	for i, id := range agentIDs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			tok, err := st.Env.Identity.IssueToken(context.Background(), keys[id], "")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("token of %s: %w", id, err))
				return
			}
			tokens[i] = tok.Token
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// Tokens are secrets: a file only this user reads, never a log line.
	path := filepath.Join(*idleDir, "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(tokens, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}

	out := func(kind string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(os.Stdout, "%s%s %s\n", idleLinePrefix, kind, b)
	}
	out("READY", map[string]any{"url": st.PushURL, "tokens": path, "agents": agents})
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch cmd := strings.TrimSpace(sc.Text()); cmd {
		case "arm":
			proxy.mu.Lock()
			proxy.armed, proxy.trips, proxy.queries = true, 0, nil
			proxy.mu.Unlock()
			out("OK", map[string]any{})
		case "snap":
			out("SNAP", snapIdle(t, st, proxy))
		case "quit":
			return
		default:
			t.Fatalf("idle server: unknown command %q", cmd)
		}
	}
}

// snapIdle reads the serving process's figures after a full GC with the
// freed memory returned to the OS, so RSS tracks what is live.
func snapIdle(t *testing.T, st *localstacktest.Stack, proxy *countingProxy) idleSnap {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := idleSnap{
		Conns: st.Gateway.Connections(), Invocations: st.Gateway.Invocations(),
		HeapInuse: int64(ms.HeapInuse), StackInuse: int64(ms.StackInuse), Sys: int64(ms.Sys),
		Goroutines: runtime.NumGoroutine(),
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS: %v", err)
			}
			s.RSS = kb << 10
		}
	}
	proxy.mu.Lock()
	s.DBTrips = proxy.trips
	s.DBQueries = slices.Clone(proxy.queries[:min(len(proxy.queries), 100)])
	proxy.mu.Unlock()
	return s
}

// idleChild is the running TestIdleServer.
type idleChild struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string // its protocol lines, prefix removed
	tail  *tailBuffer
}

func (c *idleChild) await(kind string, timeout time.Duration, v any) error {
	select {
	case l, ok := <-c.lines:
		if !ok {
			return fmt.Errorf("the idle server exited (waiting for %s):\n%s", kind, c.tail)
		}
		k, body, _ := strings.Cut(l, " ")
		if k != kind {
			return fmt.Errorf("the idle server answered %s, want %s", k, kind)
		}
		return json.Unmarshal([]byte(body), v)
	case <-time.After(timeout):
		return fmt.Errorf("no %s from the idle server within %v:\n%s", kind, timeout, c.tail)
	}
}

func (c *idleChild) snap(t *testing.T) idleSnap {
	t.Helper()
	if _, err := io.WriteString(c.in, "snap\n"); err != nil {
		t.Fatal(err)
	}
	var s idleSnap
	if err := c.await("SNAP", time.Minute, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// tailBuffer keeps the last lines written to it (the child's log).
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
	part  string
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ls := strings.Split(b.part+string(p), "\n")
	b.part = ls[len(ls)-1]
	b.lines = append(b.lines, ls[:len(ls)-1]...)
	if len(b.lines) > 30 {
		b.lines = b.lines[len(b.lines)-30:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(append(slices.Clone(b.lines), b.part), "\n")
}

// startIdleServer runs this test binary again as TestIdleServer.
func startIdleServer(t *testing.T, dir string, conns int) *idleChild {
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleServer$", "-test.count=1", "-test.timeout=60m",
		"-idle.serve", "-idle.dir="+dir, "-idle.conns="+strconv.Itoa(conns))
	// localstacktest finds template.yaml from the working directory, and
	// bench/ is a module of its own.
	cmd.Dir = repoRoot(t)
	c := &idleChild{cmd: cmd, lines: make(chan string, 16), tail: &tailBuffer{}}
	cmd.Stderr = c.tail
	var err error
	if c.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), idleLinePrefix); ok {
				c.lines <- l
			} else {
				_, _ = c.tail.Write([]byte(sc.Text() + "\n"))
			}
		}
	}()
	// However the stage ends, the child does not outlive it.
	t.Cleanup(func() {
		_ = c.in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(idleDrainTimeout):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return c
}

// idleClient is one held connection.
type idleClient struct {
	c      *websocket.Conn
	closed chan struct{} // its reader ended
}

// measureIdle holds *idleConns idle push connections for *idleWindow and
// reports what they cost the serving process: function invocations,
// database commands, memory. Midway it pings every connection once, as
// meshd does every 5 minutes, and checks the pings invoked nothing.
func measureIdle(t *testing.T, r *Results) {
	n := sized(*idleConns, min(*idleConns, 1_000))
	window := sized(*idleWindow, min(*idleWindow, 15*time.Second))
	if n <= 0 || n > idleMaxConns {
		t.Fatalf("-idle.conns must be 1 to %d", idleMaxConns)
	}
	say("idle: %d push connections (%d agents) held idle for %v against a local stack in a child process", n, (n+1)/2, window)
	child := startIdleServer(t, t.TempDir(), n)
	var ready struct {
		URL    string `json:"url"`
		Tokens string `json:"tokens"`
		Agents int    `json:"agents"`
	}
	if err := child.await("READY", idleStartTimeout, &ready); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(ready.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	tokens := strings.Split(string(raw), "\n")
	if len(tokens)*push.MaxConnsPerAgent < n {
		t.Fatalf("%d tokens for %d connections", len(tokens), n)
	}
	base := child.snap(t)

	// Connect: each agent twice (its cap), as meshd would, with the token
	// in the Authorization header.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := make([]*idleClient, n)
	var dataFrames atomic.Int64  // any message the server sends at idle
	var answered5xx atomic.Int64 // handshakes the gateway answered 5xx (retried)
	var (
		dialErrs []error
		mu       sync.Mutex
		wg       sync.WaitGroup
	)
	slots := make(chan struct{}, idleDialers)
	began := time.Now()
	for i := range n {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			c, err := dialIdle(ctx, ready.URL, tokens[i/push.MaxConnsPerAgent], fmt.Sprintf("idle-%d", i), &answered5xx)
			if err != nil {
				mu.Lock()
				dialErrs = append(dialErrs, fmt.Errorf("connection %d: %w", i, err))
				mu.Unlock()
				return
			}
			ic := &idleClient{c: c, closed: make(chan struct{})}
			clients[i] = ic
			// A reader is what answers pongs; it counts any data message.
			go func() {
				defer close(ic.closed)
				for {
					if _, _, err := c.Read(ctx); err != nil {
						return
					}
					dataFrames.Add(1)
				}
			}()
		}()
	}
	wg.Wait()
	connectTook := time.Since(began)
	defer func() {
		for _, ic := range clients {
			if ic != nil {
				_ = ic.c.CloseNow()
			}
		}
	}()
	if len(dialErrs) > 0 {
		t.Fatalf("%d of %d handshakes failed, first: %v\nthe server's log:\n%s", len(dialErrs), n, dialErrs[0], child.tail)
	}
	say("idle: %d connections open in %v (%.0f handshakes/s)", n, connectTook.Round(time.Millisecond), float64(n)/connectTook.Seconds())

	held := child.snap(t)
	if held.Conns != n {
		t.Fatalf("the gateway holds %d connections, want %d", held.Conns, n)
	}
	if _, err := io.WriteString(child.in, "arm\n"); err != nil {
		t.Fatal(err)
	}
	if err := child.await("OK", time.Minute, &struct{}{}); err != nil {
		t.Fatal(err)
	}
	start := child.snap(t)
	windowBegan := time.Now()

	// A third into the window: one ping per connection (a control frame,
	// answered by the gateway itself).
	if !waitCtx(ctx, window/3) {
		t.Fatal("canceled")
	}
	prePing := child.snap(t)
	var pongs, pingErrs atomic.Int64
	pslots := make(chan struct{}, idlePingers)
	for _, ic := range clients {
		wg.Add(1)
		pslots <- struct{}{}
		go func() {
			defer func() { <-pslots; wg.Done() }()
			pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
			defer pcancel()
			if err := ic.c.Ping(pctx); err != nil {
				pingErrs.Add(1)
				return
			}
			pongs.Add(1)
		}()
	}
	wg.Wait()
	postPing := child.snap(t)
	if !waitCtx(ctx, time.Until(windowBegan.Add(window))) {
		t.Fatal("canceled")
	}
	end := child.snap(t)
	took := time.Since(windowBegan)

	closedEarly := 0
	for _, ic := range clients {
		select {
		case <-ic.closed:
			closedEarly++
		default:
		}
	}
	inv := invDelta(start, end)
	pingInv := invDelta(prePing, postPing)
	var invTotal, pingTotal int64
	for _, v := range inv {
		invTotal += v
	}
	for _, v := range pingInv {
		pingTotal += v
	}
	inbox := 0
	for _, q := range end.DBQueries {
		if strings.Contains(strings.ToLower(q), "inbox") || strings.Contains(strings.ToLower(q), "outbox") {
			inbox++
		}
	}
	perConn := func(a, b int64) float64 { return float64(b-a) / float64(n) }
	r.set("idle.conns", float64(n), "connections")
	r.set("idle.agents", float64(ready.Agents), "agents")
	r.set("idle.window", took.Seconds(), "s")
	r.set("idle.connect", float64(n)/connectTook.Seconds(), "handshakes/s")
	r.set("idle.connect.5xx", float64(answered5xx.Load()), "handshakes")
	r.set("idle.invocations", float64(invTotal), "invocations")
	r.set("idle.invps", float64(invTotal)/took.Seconds(), "invocations/s")
	r.set("idle.db", float64(end.DBTrips), "commands")
	r.set("idle.db.inbox", float64(inbox), "queries")
	r.set("idle.pongs", float64(pongs.Load()), "pongs")
	r.set("idle.ping.errors", float64(pingErrs.Load()), "pings")
	r.set("idle.ping.invocations", float64(pingTotal), "invocations")
	r.set("idle.data", float64(dataFrames.Load()), "messages")
	r.set("idle.closed", float64(closedEarly), "connections")
	r.set("idle.rss.per", perConn(base.RSS, held.RSS)/1024, "KiB")
	r.set("idle.heap.per", perConn(base.HeapInuse, held.HeapInuse)/1024, "KiB")
	r.set("idle.stack.per", perConn(base.StackInuse, held.StackInuse)/1024, "KiB")
	r.set("idle.goroutines.per", perConn(int64(base.Goroutines), int64(held.Goroutines)), "goroutines")
	r.set("idle.rss.drift", float64(end.RSS-start.RSS)/(1<<20), "MiB")
	r.set("idle.rss.total", float64(held.RSS)/(1<<20), "MiB")
	say("idle: invocations over the window %v (the pings: %v); %d database commands", inv, pingInv, end.DBTrips)
	if len(end.DBQueries) > 0 {
		r.note("Idle push connections: the database commands of the idle window were: %s", strings.Join(end.DBQueries, "; "))
	}
	r.note("Idle push connections: connect (%s handshakes, each a $connect run) took %v; the window then ran %v, pings a third in; invocations before the window (every $connect) are not counted: %v.",
		commas(int64(n)), connectTook.Round(time.Millisecond), took.Round(time.Second), invDelta(base, start))

	// Close from the client and wait for every $disconnect, so the child
	// ends with nothing in flight.
	for _, ic := range clients {
		_ = ic.c.CloseNow()
	}
	deadline := time.Now().Add(idleDrainTimeout)
	for s := child.snap(t); s.Conns > 0; s = child.snap(t) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open %v after the client closed them", s.Conns, idleDrainTimeout)
		}
		if !waitCtx(ctx, 500*time.Millisecond) {
			t.Fatal("canceled")
		}
	}
	_, _ = io.WriteString(child.in, "quit\n")
	if invTotal != 0 || inbox != 0 || pingTotal != 0 || pingErrs.Load() != 0 || closedEarly != 0 {
		t.Errorf("idle connections were not free: %d invocations (%d by pings), %d inbox queries, %d pings failed, %d connections closed", invTotal, pingTotal, inbox, pingErrs.Load(), closedEarly)
	}
}

// dialIdle opens one connection as meshd does (token in the Authorization
// header, its instance id), retrying a handshake answered 5xx up to
// idleDialAttempts times, as meshd's backoff would; each 5xx is counted in
// answered5xx, for the report.
func dialIdle(ctx context.Context, url, token, instance string, answered5xx *atomic.Int64) (*websocket.Conn, error) {
	var err error
	for attempt := range idleDialAttempts {
		if attempt > 0 && !waitCtx(ctx, time.Duration(attempt)*100*time.Millisecond) {
			return nil, ctx.Err()
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		c, resp, derr := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPHeader: http.Header{
			"Authorization":   {"Bearer " + token},
			"X-Mesh-Instance": {instance},
		}})
		cancel()
		if derr == nil {
			return c, nil
		}
		err = derr
		if resp != nil && resp.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			err = fmt.Errorf("%w: %s", derr, body)
		}
		if resp == nil || resp.StatusCode < 500 {
			return nil, err
		}
		answered5xx.Add(1)
	}
	return nil, err
}

// waitCtx waits d or until ctx ends; false when ctx ended.
func waitCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// writeIdle writes the idle-cost section and the cost table. Called with
// r.mu held.
func (r *Results) writeIdle(w func(string, ...any), f func(string) string) {
	// Counts read better without decimals.
	n := func(key string) string {
		v, ok := r.figs[key]
		if !ok {
			return "—"
		}
		return commas(int64(v.v))
	}
	if _, ok := r.figs["idle.conns"]; ok {
		w("## Push: what %s idle connections cost\n\n", n("idle.conns"))
		w("The client (this process) opened %s connections (%s agents, two per agent, each handshake a real `$connect` with the agent's token: %s), then held them idle for %s without a heartbeat; the local stack served them in a child process of its own (meshlocal's gateway and handlers, its database reached through a counting proxy, no schedules running).\n\n",
			n("idle.conns"), n("idle.agents"), f("idle.connect"), f("idle.window"))
		w("| Over the idle window | Value |\n|---|---|\n")
		w("| Handshakes answered 5xx while connecting (each retried, as meshd does) | %s |\n", n("idle.connect.5xx"))
		w("| Function invocations (every function of the template) | %s (%s per second) |\n", n("idle.invocations"), n("idle.invps"))
		w("| Database commands of the stack (inbox queries among them) | %s (%s) |\n", n("idle.db"), n("idle.db.inbox"))
		w("| One ping per connection a third into the window: pongs, failed pings, invocations they caused | %s, %s, %s |\n", n("idle.pongs"), n("idle.ping.errors"), n("idle.ping.invocations"))
		w("| Messages the server sent, connections it closed | %s, %s |\n", n("idle.data"), n("idle.closed"))
		w("| Serving process: RSS per connection (RSS delta ÷ connections) | %s |\n", f("idle.rss.per"))
		w("| … Go heap in use per connection | %s |\n", f("idle.heap.per"))
		w("| … goroutine stacks per connection, goroutines per connection | %s, %s |\n", f("idle.stack.per"), n("idle.goroutines.per"))
		w("| … RSS with every connection open; its drift over the window | %s; %s |\n\n", f("idle.rss.total"), f("idle.rss.drift"))
	}
	if *report {
		w("## Cost per agent (AWS list prices)\n\n")
		per := 0.0
		if v, ok := r.figs["idle.rss.per"]; ok {
			per = v.v
		}
		writeCost(w, per)
	}
}
