package bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/retention"
)

var janitorOnly = flag.Bool("janitor", false, "run the janitor stage alone (TestJanitorStage)")

// TestJanitorStage runs measureJanitor on its own:
// go test -run TestJanitorStage -args -janitor [-quick].
func TestJanitorStage(t *testing.T) {
	if !*janitorOnly {
		t.Skip("a stage of make bench: run it alone with -args -janitor")
	}
	measureJanitor(t, newResults())
}

// The janitor stage: old terminal tasks (with two messages and an artifact
// each) are deleted by the retention janitor while senders send at a steady
// rate through the real send route; the same rate runs first without the
// janitor. Figures: the janitor's delete rate, the sends' p99 and max
// latency in both phases, the longest time between two batch ends (a batch
// and the rest before it: no send can wait on the janitor's locks longer
// than the batch holding them) and the row lock waits the server counted
// during the run (every session's).
const (
	janitorRate    = 200 // sends per second, spread over the senders
	janitorSenders = 16  // 12.5/s each, far below the 50/s limit
)

func measureJanitor(t *testing.T, r *Results) {
	ctx := context.Background()
	root := repoRoot(t)
	db, dsn := mysqltest.New(t)
	tmpl, body := sendSample(t, root)
	e := newSendEnv(t, db, tmpl, body, []byte("bench-jwt-secret-0123456789abcdef-0123"))
	senders, recipients := ids("jsender-", janitorSenders), ids("jrcpt-", janitorSenders)
	tokens := credentials(t, e, senders)
	insertAgents(t, db, recipients)
	pairs := make([][2]string, len(senders))
	for i := range senders {
		pairs[i] = [2]string{senders[i], recipients[i]}
	}
	befriend(t, db, pairs)

	nOld := sized(50_000, 5_000)
	say("janitor: %d old terminal tasks, each with 2 messages and an artifact", nOld)
	fillOldTasks(t, db, senders, recipients, nOld)

	phase := sized(10*time.Second, 3*time.Second)
	say("janitor: %d sends/s for %v without the janitor", janitorRate, phase)
	base := steadySends(ctx, t, e, tokens, recipients, "base", func() bool { return false }, phase)

	waits0, time0 := rowLockStatus(t, db)
	var (
		mu      sync.Mutex
		last    = time.Now()
		gapMax  time.Duration
		batches int
	)
	// Its own pool, as the janitor is its own function on AWS.
	jdb, err := mysql.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer jdb.Close()
	slowest := map[string]time.Duration{}
	j := &retention.Janitor{DB: jdb, Batch: retention.DefaultBatch, Budget: 10 * time.Minute,
		AfterBatch: func(table string, _ int) {
			mu.Lock()
			defer mu.Unlock()
			now := time.Now()
			gapMax = max(gapMax, now.Sub(last))
			slowest[table] = max(slowest[table], now.Sub(last))
			last = now
			batches++
		}}
	done := make(chan struct{})
	var deleted map[string]int
	var took time.Duration
	var runErr error
	say("janitor: deleting them while %d sends/s go on", janitorRate)
	go func() {
		defer close(done)
		begin := time.Now()
		mu.Lock()
		last = begin
		mu.Unlock()
		deleted, runErr = j.Run(ctx)
		took = time.Since(begin)
	}()
	during := steadySends(ctx, t, e, tokens, recipients, "during", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}, 10*time.Minute)
	<-done
	if runErr != nil {
		t.Fatal(runErr)
	}
	waits1, time1 := rowLockStatus(t, db)
	if left := mysqltest.Count(t, db, "SELECT COUNT(*) FROM tasks WHERE status = 'completed'"); left != 0 {
		t.Fatalf("%d old tasks left after the janitor", left)
	}
	rows := 0
	for _, n := range deleted {
		rows += n
	}
	say("janitor: slowest batch per table %v", slowest)
	r.set("janitor.tasks_per_s", float64(deleted["tasks"])/took.Seconds(), "tasks/s")
	r.set("janitor.rows_per_s", float64(rows)/took.Seconds(), "rows/s")
	r.set("janitor.batch_interval_max_ms", millis(gapMax), "ms")
	r.set("janitor.base_p99_ms", millis(quantile(base, 0.99)), "ms")
	r.set("janitor.base_max_ms", millis(slices.Max(base)), "ms")
	r.set("janitor.send_p99_ms", millis(quantile(during, 0.99)), "ms")
	r.set("janitor.send_max_ms", millis(slices.Max(during)), "ms")
	r.set("janitor.lock_waits", float64(waits1-waits0), "waits")
	r.set("janitor.lock_wait_ms", float64(time1-time0), "ms")
	r.note("Janitor: %d old tasks (%d rows) deleted in %v, %d batches of at most %d, while %d sends/s went on (%d sends during it); "+
		"the longest time between two batch ends (a batch and the rest before it) was %.1f ms, send p99 %.1f ms and max %.1f ms against %.1f / %.1f ms without it; "+
		"the server counted %d row lock waits (%d ms in all, every session) during the run.",
		deleted["tasks"], rows, took.Round(time.Millisecond), batches, retention.DefaultBatch, janitorRate, len(during),
		millis(gapMax), millis(quantile(during, 0.99)), millis(slices.Max(during)), millis(quantile(base, 0.99)), millis(slices.Max(base)), waits1-waits0, time1-time0)
}

// fillOldTasks bulk-inserts n completed tasks 60 days old, with two
// messages and an artifact each, 500 tasks per statement.
func fillOldTasks(t *testing.T, db *mysql.DB, senders, recipients []string, n int) {
	old := time.Now().UTC().Add(-60 * 24 * time.Hour)
	for start := 0; start < n; start += 500 {
		c := min(500, n-start)
		var ts, msgs, as []any
		for i := range c {
			k := start + i
			id := fmt.Sprintf("old-%08d", k)
			s, rc := senders[k%len(senders)], recipients[k%len(recipients)]
			ts = append(ts, id, id, s, rc, old, old)
			msgs = append(msgs, id, id+"-1", s, old, id, id+"-2", rc, old)
			as = append(as, id, id+"-a", rc, old)
		}
		rows := func(stmt, tuple string, k int) string { return stmt + strings.Repeat(", "+tuple, k-1) }
		for _, q := range []struct {
			stmt, tuple string
			k           int
			args        []any
		}{
			{"INSERT INTO tasks (task_id, context_id, initiator, recipient, status, created_at, updated_at) VALUES (?, ?, ?, ?, 'completed', ?, ?)", "(?, ?, ?, ?, 'completed', ?, ?)", c, ts},
			{`INSERT INTO task_messages (task_id, message_id, sender, parts, created_at) VALUES (?, ?, ?, '[{"kind":"text","text":"an old message"}]', ?)`, `(?, ?, ?, '[{"kind":"text","text":"an old message"}]', ?)`, 2 * c, msgs},
			{`INSERT INTO task_artifacts (task_id, artifact_id, name, parts, created_by, created_at) VALUES (?, ?, 'result', '[{"kind":"text","text":"an old result"}]', ?, ?)`, `(?, ?, 'result', '[{"kind":"text","text":"an old result"}]', ?, ?)`, c, as},
		} {
			if _, err := db.Exec(rows(q.stmt, q.tuple, q.k), q.args...); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// steadySends sends janitorRate messages a second, round-robin over the
// senders, until stop reports true or d passes, and returns each send's
// latency. At most 64 sends are in flight; a tick that finds them all busy
// is still sent (late), so a stall shows up as latency, not as fewer sends.
func steadySends(ctx context.Context, t *testing.T, e *sendEnv, tokens, recipients []string, tag string, stop func() bool, d time.Duration) []time.Duration {
	var (
		mu   sync.Mutex
		lat  []time.Duration
		wg   sync.WaitGroup
		fail error
	)
	sem := make(chan struct{}, 64)
	tick := time.NewTicker(time.Second / janitorRate)
	defer tick.Stop()
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end) && !stop(); i++ {
		<-tick.C
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s := i % len(tokens)
			begin := time.Now()
			err := e.send(ctx, tokens[s], recipients[s], fmt.Sprintf("%s-%d", tag, i))
			mu.Lock()
			defer mu.Unlock()
			if err != nil && fail == nil {
				fail = err
			}
			lat = append(lat, time.Since(begin))
		}()
	}
	wg.Wait()
	if fail != nil {
		t.Fatal(fail)
	}
	slices.Sort(lat)
	return lat
}

// rowLockStatus is the server's Innodb_row_lock_waits and
// Innodb_row_lock_time (ms), counted since it started.
func rowLockStatus(t *testing.T, db *mysql.DB) (waits, lockMS int64) {
	rows, err := db.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_row_lock_waits', 'Innodb_row_lock_time')")
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
		if strings.EqualFold(name, "Innodb_row_lock_waits") {
			waits = v
		} else {
			lockMS = v
		}
	}
	return waits, lockMS
}

// millis is d in milliseconds, for a figure.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
