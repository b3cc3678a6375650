package identityhttp

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

const helperEnv = "IDENTITY_RATE_HELPER"

// rateResult is what one helper process reports.
type rateResult struct {
	OK, Limited, Other int
	// MissingRetryAfter counts 429s without a valid Retry-After.
	MissingRetryAfter int
	First, Last       time.Time
}

// TestRateLimitHelperProcess is not a test: it is the body of a helper
// process started by TestRateLimitAcrossProcesses. It hammers the heartbeat
// route of one agent through the real middleware until its window closes.
func TestRateLimitHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process for TestRateLimitAcrossProcesses")
	}
	ctx := context.Background()
	db, err := mysql.Open(ctx, os.Getenv("HELPER_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := identitytest.Service(t, db, mesh.SystemClock)
	handle := invokerFor(s, "HeartbeatFunction")
	startNS, _ := strconv.ParseInt(os.Getenv("HELPER_START"), 10, 64)
	window, _ := time.ParseDuration(os.Getenv("HELPER_WINDOW"))
	start := time.Unix(0, startNS)
	time.Sleep(time.Until(start))
	ev := apiEvent("POST /v1/agents/me/heartbeat", nil, nil, bearer(os.Getenv("HELPER_TOKEN")),
		fmt.Sprintf(`{"instance_id":"meshd-proc-%d"}`, os.Getpid()))
	var res rateResult
	res.First = time.Now()
	for time.Now().Before(start.Add(window)) {
		resp, err := handle(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		switch resp.StatusCode {
		case 200:
			res.OK++
		case 429:
			res.Limited++
			if n, err := strconv.Atoi(resp.Headers["Retry-After"]); err != nil || n < 1 {
				res.MissingRetryAfter++
			}
		default:
			res.Other++
			t.Logf("unexpected %d %s", resp.StatusCode, resp.Body)
		}
	}
	res.Last = time.Now()
	b, _ := json.Marshal(res)
	fmt.Printf("RATE-RESULT %s\n", b)
}

// TestRateLimitAcrossProcesses runs the heartbeat handler in several separate
// OS processes (no shared memory) against one database, all for one agent,
// and checks the per-agent ceiling holds across them: successes never exceed
// the burst plus the rate over the elapsed time, the burst is usable, and
// every 429 carries Retry-After.
func TestRateLimitAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts helper processes")
	}
	db, dsn := mysqltest.New(t)
	s := identitytest.Service(t, db, mesh.SystemClock)
	_, token := identitytest.NewAgent(t, s, "hammer")
	// Issuing the token spent one request; start from a full bucket.
	if _, err := db.Exec("UPDATE rate_limits SET tat_us = 0 WHERE agent_id = 'hammer'"); err != nil {
		t.Fatal(err)
	}

	const procs = 4
	const window = 3 * time.Second
	start := time.Now().Add(1500 * time.Millisecond) // time for every process to start
	cmds := make([]*exec.Cmd, procs)
	outs := make([]*bytes.Buffer, procs)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRateLimitHelperProcess$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), helperEnv+"=1", "HELPER_DSN="+dsn, "HELPER_TOKEN="+token,
			"HELPER_START="+strconv.FormatInt(start.UnixNano(), 10), "HELPER_WINDOW="+window.String())
		outs[i] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	var total rateResult
	pids := map[int]bool{}
	for i, cmd := range cmds {
		err := cmd.Wait()
		var r rateResult
		found := false
		sc := bufio.NewScanner(outs[i])
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "RATE-RESULT "); ok {
				found = json.Unmarshal([]byte(line), &r) == nil
			}
		}
		if err != nil || !found {
			t.Fatalf("helper %d failed (%v):\n%s", i, err, outs[i])
		}
		pids[cmd.Process.Pid] = true
		t.Logf("process %d (pid %d): %d ok, %d limited, from %s to %s", i, cmd.Process.Pid, r.OK, r.Limited,
			r.First.Format("15:04:05.000"), r.Last.Format("15:04:05.000"))
		if r.OK+r.Limited == 0 {
			t.Errorf("process %d made no request in its window", i)
		}
		total.OK += r.OK
		total.Limited += r.Limited
		total.Other += r.Other
		total.MissingRetryAfter += r.MissingRetryAfter
		if total.First.IsZero() || r.First.Before(total.First) {
			total.First = r.First
		}
		if r.Last.After(total.Last) {
			total.Last = r.Last
		}
	}
	if len(pids) != procs {
		t.Fatalf("expected %d distinct processes, got %d", procs, len(pids))
	}
	elapsed := total.Last.Sub(total.First).Seconds()
	// GCRA admits the burst at once, then one request per 1/rate s; +1 for
	// the request admitted exactly at the edge.
	ceiling := identity.RateBurst + int(math.Ceil(identity.RatePerSecond*elapsed)) + 1
	t.Logf("%d processes over %.2fs: %d ok, %d limited (ceiling %d)", procs, elapsed, total.OK, total.Limited, ceiling)
	if total.OK > ceiling {
		t.Errorf("%d requests succeeded, more than burst %d + %d/s × %.2fs = %d", total.OK, identity.RateBurst, identity.RatePerSecond, elapsed, ceiling)
	}
	if total.OK < identity.RateBurst {
		t.Errorf("only %d requests succeeded; the burst of %d was not usable", total.OK, identity.RateBurst)
	}
	if total.Limited == 0 {
		t.Errorf("no request was limited: the processes did not exceed %d/s, so the test proved nothing", identity.RatePerSecond)
	}
	if total.MissingRetryAfter > 0 {
		t.Errorf("%d of %d 429s had no valid Retry-After", total.MissingRetryAfter, total.Limited)
	}
	if total.Other > 0 {
		t.Errorf("%d answers were neither 200 nor 429", total.Other)
	}
}

// sessionCounters reads the connection id and this session's COMMIT and
// ROLLBACK counts. Session status is per connection, so other sessions on
// the shared server (other tests, other engineers) cannot disturb it, unlike
// the GLOBAL counter.
func sessionCounters(t *testing.T, db *mysql.DB) (conn, commits, rollbacks int64) {
	t.Helper()
	if err := db.QueryRow("SELECT CONNECTION_ID()").Scan(&conn); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query("SHOW SESSION STATUS WHERE Variable_name IN ('Com_commit', 'Com_rollback')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		if name == "Com_commit" {
			commits = v
		} else {
			rollbacks = v
		}
	}
	return conn, commits, rollbacks
}

// TestWriteCostsOneCommit measures, on a pool pinned to one connection, how
// many COMMITs each write route issues end to end (authentication, rate
// limit, the write itself): exactly one. A read route issues none (its rate
// spend is one autocommit statement), and a 429 commits nothing and rolls
// back.
func TestWriteCostsOneCommit(t *testing.T) {
	s, clock, dsn := identitytest.NewService(t)
	pinned, err := mysql.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	pinned.SetMaxOpenConns(1)
	pinned.SetMaxIdleConns(1)
	ps := identitytest.Service(t, pinned, clock.Now)

	type write struct {
		name    string
		params  func(w *world) map[string]string
		query   map[string]string
		body    func(w *world) string
		caller  string
		status  int
		commits int64
	}
	writes := []write{
		{name: "HeartbeatFunction", params: none, body: func(*world) string { return `{"instance_id":"meshd-1"}` }, caller: self, status: 200, commits: 1},
		{name: "GoOfflineFunction", params: none, body: func(*world) string { return "" }, caller: self, status: 200, commits: 1},
		{name: "SendFriendRequestFunction", params: none, body: func(w *world) string { return fmt.Sprintf(`{"to":%q}`, w.T) }, caller: stranger, status: 201, commits: 1},
		{name: "AcceptFriendRequestFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.R} }, body: func(*world) string { return "" }, caller: self, status: 200, commits: 1},
		{name: "RejectFriendRequestFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.R} }, body: func(*world) string { return "" }, caller: self, status: 200, commits: 1},
		{name: "RemoveFriendFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.T} }, body: func(*world) string { return "" }, caller: friend, status: 204, commits: 1},
		{name: "BlockAgentFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.T} }, body: func(*world) string { return "" }, caller: friend, status: 204, commits: 1},
		{name: "UnblockAgentFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.T} }, body: func(*world) string { return "" }, caller: friend, status: 204, commits: 1},
		{name: "CreateGroupFunction", params: none, body: func(*world) string { return `{"name":"g"}` }, caller: self, status: 201, commits: 1},
		{name: "AddGroupMemberFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.G} }, body: func(w *world) string { return fmt.Sprintf(`{"agent_id":%q}`, w.F) }, caller: self, status: 201, commits: 1},
		{name: "RemoveGroupMemberFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.G, "agent": w.M} }, body: func(*world) string { return "" }, caller: self, status: 204, commits: 1},
		{name: "AdminCreateAgentFunction", params: none, body: func(w *world) string { return fmt.Sprintf(`{"agent_id":"new-%s"}`, w.T) }, caller: admin, status: 201, commits: 1},
		{name: "AdminRotateKeyFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.T} }, body: func(*world) string { return "" }, caller: admin, status: 201, commits: 1},
		{name: "AdminRevokeKeyFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.T, "key_id": w.TKeyID} }, body: func(*world) string { return "" }, caller: admin, status: 200, commits: 1},
		{name: "AdminCreateFriendshipFunction", params: none, body: func(w *world) string { return fmt.Sprintf(`{"a":%q,"b":%q}`, w.T, w.S) }, caller: admin, status: 201, commits: 1},
		{name: "AdminCreateGroupFunction", params: none, body: func(w *world) string { return fmt.Sprintf(`{"name":"g","owner":%q,"members":[%q]}`, w.T, w.S) }, caller: admin, status: 201, commits: 1},
		{name: "AdminAddGroupMemberFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.G} }, body: func(w *world) string { return fmt.Sprintf(`{"agent_id":%q}`, w.S) }, caller: admin, status: 201, commits: 1},
		{name: "GetMeFunction", params: none, body: func(*world) string { return "" }, caller: self, status: 200, commits: 0},
	}
	routes := templateRoutes(t)
	for i, c := range writes {
		t.Run(fmt.Sprintf("%s issues exactly %d COMMIT", c.name, c.commits), func(t *testing.T) {
			w := buildWorld(t, s, i)
			ev := apiEvent(routes[c.name], c.params(w), c.query, w.auth[c.caller], c.body(w))
			conn1, commits1, _ := sessionCounters(t, pinned)
			resp := invoke(t, ps, c.name, ev)
			conn2, commits2, _ := sessionCounters(t, pinned)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, resp.Body)
			}
			if conn1 != conn2 {
				t.Fatalf("the pool changed connection (%d -> %d); the session counter is not comparable", conn1, conn2)
			}
			if got := commits2 - commits1; got != c.commits {
				t.Fatalf("Com_commit moved by %d, want %d", got, c.commits)
			}
		})
	}

	t.Run("a rate-limited write commits nothing, rolls back and changes nothing", func(t *testing.T) {
		w := buildWorld(t, s, len(writes))
		// Spend the whole budget: the theoretical arrival time is 10 s ahead.
		if _, err := s.DB.Exec("UPDATE rate_limits SET tat_us = ? WHERE agent_id = ?", clock.Now().Add(10*time.Second).UnixMicro(), w.T); err != nil {
			t.Fatal(err)
		}
		ev := apiEvent("POST /v1/agents/me/heartbeat", nil, nil, w.auth[self], `{"instance_id":"meshd-9"}`)
		conn1, commits1, rollbacks1 := sessionCounters(t, pinned)
		resp := invoke(t, ps, "HeartbeatFunction", ev)
		conn2, commits2, rollbacks2 := sessionCounters(t, pinned)
		if resp.StatusCode != 429 || problemCode(t, resp) != "rate_limited" {
			t.Fatalf("status %d: %s", resp.StatusCode, resp.Body)
		}
		if ra, err := strconv.Atoi(resp.Headers["Retry-After"]); err != nil || ra < 8 || ra > 9 {
			t.Errorf("Retry-After %q, want about 8 s (10 s ahead minus the 2 s burst tolerance)", resp.Headers["Retry-After"])
		}
		if conn1 != conn2 {
			t.Fatalf("the pool changed connection")
		}
		if commits2 != commits1 || rollbacks2 != rollbacks1+1 {
			t.Fatalf("commits +%d, rollbacks +%d; want +0 and +1", commits2-commits1, rollbacks2-rollbacks1)
		}
		// Read the row itself: GetMe would spend the budget this test spent.
		var status string
		var instance sql.NullString
		if err := s.DB.QueryRow("SELECT status, instance_id FROM agents WHERE agent_id = ?", w.T).Scan(&status, &instance); err != nil || status != "inactive" || instance.Valid {
			t.Fatalf("the limited heartbeat changed the agent: status %q, instance %v, %v", status, instance, err)
		}
	})
}
