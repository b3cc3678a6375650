package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/seal"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// Rows are generated inside the server: a digits table cross-joined with
// itself numbers them 0..10^k-1 in one INSERT ... SELECT per 100,000 rows.
const (
	digitsTableSQL = `CREATE TABLE bench_digits (d INT NOT NULL PRIMARY KEY)`
	digitsFillSQL  = `INSERT INTO bench_digits (d) VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)`
	// numbersSQL is 0..99,999 (five digits) offset by ?.
	numbersSQL = `SELECT ? + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS i
FROM bench_digits a, bench_digits b, bench_digits c, bench_digits e, bench_digits f`
	scaleAgentsSQL = `INSERT INTO agents (agent_id, name, status, last_heartbeat_at, created_at)
SELECT CONCAT('s', LPAD(n.i, 6, '0')), 'scale', 'active', ?, ? FROM (` + numbersSQL + `) n WHERE n.i < ?`
	scaleCountersSQL = `INSERT INTO inbox_counters (recipient, last_seq)
SELECT CONCAT('s', LPAD(n.i, 6, '0')), ? FROM (` + numbersSQL + `) n WHERE n.i < ?`
	// Event i goes to recipient i mod R as its seq i div R + 1.
	scaleEventsSQL = `INSERT INTO outbox_events (recipient, seq, event_id, type, sender, task_id, context_id, message_id, key_epoch, body, occurred_at, delivery, sent_at)
SELECT CONCAT('s', LPAD(n.i MOD ?, 6, '0')), FLOOR(n.i / ?) + 1, CONCAT('e', n.i), 'message', 'scale', CONCAT('t', n.i), CONCAT('c', n.i), CONCAT('m', n.i), 1,
  '{"message":{"parts":[{"kind":"text","text":"Please translate the attached release notes into German."}]}}', ?, ?, ?
FROM (` + numbersSQL + `) n WHERE n.i < ?`
	scaleTasksSQL = `INSERT INTO tasks (task_id, context_id, initiator, recipient, status, created_at, updated_at)
SELECT CONCAT('t', n.i), CONCAT('c', n.i), CONCAT('s', LPAD(n.i, 6, '0')), CONCAT('s', LPAD((n.i + 1) MOD ?, 6, '0')), 'working', ?, ?
FROM (` + numbersSQL + `) n WHERE n.i < ?`
)

// scaleDB is a fresh database with the digits table.
func scaleDB(t *testing.T) (*mysql.DB, string) {
	db, dsn := mysqltest.New(t)
	for _, q := range []string{digitsTableSQL, digitsFillSQL} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return db, dsn
}

// fillAgents adds n active agents s000000.. with inbox counters at lastSeq.
func fillAgents(t *testing.T, db *mysql.DB, n int, lastSeq int64) {
	now := time.Now().UTC()
	for off := 0; off < n; off += 100_000 {
		if _, err := db.Exec(scaleAgentsSQL, now, now, off, n); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(scaleCountersSQL, lastSeq, off, n); err != nil {
			t.Fatal(err)
		}
	}
}

// fillEvents adds n pending events over r recipients, queued for the
// dispatcher as outbox.Append writes them, to a fresh database.
func fillEvents(t *testing.T, db *mysql.DB, n, r int) {
	at := time.Now().UTC().Add(-time.Hour)
	for off := 0; off < n; off += 100_000 {
		if _, err := db.Exec(scaleEventsSQL, r, r, at, outbox.SentDelivery, at, off, n); err != nil {
			t.Fatal(err)
		}
		if off%500_000 == 0 && off > 0 {
			say("scale:   %d of %d rows", off, n)
		}
	}
	if _, err := db.Exec("INSERT INTO outbox_queue (recipient, seq) SELECT recipient, seq FROM outbox_events"); err != nil {
		t.Fatal(err)
	}
	// A live table's index statistics are current (InnoDB recounts them in
	// the background after a tenth of its rows change); a bulk load of this
	// moment may not have been counted yet, and the plans would be those of
	// a table the optimizer thinks is empty.
	if _, err := db.Exec("ANALYZE TABLE outbox_events"); err != nil {
		t.Fatal(err)
	}
}

// proxied opens a second pool on db's database through a counting proxy,
// to capture the statements a job issues.
func proxied(t *testing.T, dsn string) (*mysql.DB, *countingProxy) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := newCountingProxy(t, cfg.Addr)
	cfg.Addr = p.addr()
	pdb, err := mysql.Open(context.Background(), cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pdb.Close() })
	return pdb, p
}

// timeJob runs job (on the direct pool) runs times and returns the median,
// then runs it once through the proxy and EXPLAINs each distinct read or
// write it issued.
func timeJob(t *testing.T, db *mysql.DB, p *countingProxy, pdb *mysql.DB, runs int, job func(db *mysql.DB) error) (time.Duration, string) {
	var took []time.Duration
	for range runs {
		start := time.Now()
		if err := job(db); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	_, queries, err := p.capture(func() error { return job(pdb) })
	if err != nil {
		t.Fatal(err)
	}
	return took[len(took)/2], explainAll(t, db, queries)
}

// explainAll returns the EXPLAIN of each distinct statement shape in qs.
func explainAll(t *testing.T, db *mysql.DB, qs []string) string {
	seen := map[string]bool{}
	var b strings.Builder
	for _, q := range qs {
		w := strings.Fields(q)
		if len(w) == 0 || !slices.Contains([]string{"SELECT", "UPDATE", "DELETE"}, strings.ToUpper(w[0])) {
			continue
		}
		shape := abbrev(q, 60)
		if seen[shape] {
			continue
		}
		seen[shape] = true
		fmt.Fprintf(&b, "%s\n", abbrev(q, 200))
		if strings.EqualFold(w[0], "SELECT") {
			// A read can run again on its own: its time alone.
			start := time.Now()
			if rows, err := db.Query(q); err == nil {
				for rows.Next() {
				}
				rows.Close()
				fmt.Fprintf(&b, "  -- alone: %v\n", time.Since(start).Round(time.Microsecond))
			}
		}
		rows, err := db.Query("EXPLAIN " + q)
		if err != nil {
			fmt.Fprintf(&b, "  (EXPLAIN failed: %v)\n", err)
			continue
		}
		cols, vals, err := mysqltest.StringRows(rows)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "  %s\n", strings.Join(cols, " | "))
		for _, row := range vals {
			fmt.Fprintf(&b, "  %s\n", mysqltest.JoinRow(row, " | "))
		}
	}
	return strings.TrimSpace(b.String())
}

func (r *Results) addScale(s scaleRow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scale = append(r.scale, s)
	say("  %s at %d: %v (%s)", s.what, s.size, s.took, s.perUnit)
}

// measureScale times each periodic query at growing table sizes, each with
// its EXPLAIN: a dispatcher batch with 1,000,000 pending events over 10,
// 1,000 and 100,000 recipients, the inbox read and the janitor at
// 10,000 and 1,000,000 rows, the presence and task scanners at 1,000 and
// 100,000 agents and tasks.
func measureScale(t *testing.T, r *Results) {
	ctx := context.Background()
	pending := sized(1_000_000, 100_000)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, relayPartitions)
	prod, err := kafka.NewProducer(ctx, kafka.Options{Brokers: brokers}, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	sealer, err := seal.New(make([]byte, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))

	for _, rc := range []int{10, 1_000, 100_000} {
		say("scale: %d pending events over %d recipients", pending, rc)
		db, dsn := scaleDB(t)
		fillAgents(t, db, rc, int64(pending/rc))
		fillEvents(t, db, pending, rc)
		pdb, p := proxied(t, dsn)
		var sent int
		job := func(db *mysql.DB) error {
			d := &dispatch.Dispatcher{DB: db, Publisher: dispatch.KafkaPublisher{Client: prod}, Topic: topic, Sealer: sealer,
				Log: quiet, Metrics: &metrics.Sink{W: io.Discard}}
			st, err := d.RunOnce(ctx)
			sent = st.Sent
			return err
		}
		took, plan := timeJob(t, db, p, pdb, 3, job)
		r.addScale(scaleRow{what: "dispatcher batch", size: rc, took: took, unit: "recipients pending", work: sent,
			perUnit: fmt.Sprintf("%d events in the batch, %.1f µs/event", sent, float64(took.Microseconds())/float64(max(sent, 1))), explain: plan})

		if rc == 10 {
			inboxCase(t, r, db, p, pdb, pending, rc)
		}
		if rc == 100_000 {
			janitorCase(t, r, db, p, pdb, pending)
			scannerCases(t, r, db, p, pdb, rc, sealer, quiet)
		}
	}

	// The same jobs on small tables, for the slope.
	small := sized(10_000, 1_000)
	say("scale: the same jobs at %d events, %d agents and tasks", small, small/10)
	db, dsn := scaleDB(t)
	fillAgents(t, db, small/10, 10)
	fillEvents(t, db, small, 10)
	pdb, p := proxied(t, dsn)
	inboxCase(t, r, db, p, pdb, small, 10)
	janitorCase(t, r, db, p, pdb, small)
	scannerCases(t, r, db, p, pdb, small/10, sealer, quiet)
	r.mu.Lock()
	slices.SortStableFunc(r.scale, func(a, b scaleRow) int {
		if c := strings.Compare(a.what, b.what); c != 0 {
			return c
		}
		return a.size - b.size
	})
	r.mu.Unlock()
}

// inboxCase times the read of a page of 100 from the middle of one
// recipient's inbox, with n events stored over rc recipients.
func inboxCase(t *testing.T, r *Results, db *mysql.DB, p *countingProxy, pdb *mysql.DB, n, rc int) {
	in := outbox.Inbox{DB: db}
	took, plan := timeJob(t, db, p, pdb, 5, func(db *mysql.DB) error {
		in.DB = db
		_, err := in.Read(context.Background(), "s000003", int64(n/rc/2), 100)
		return err
	})
	r.addScale(scaleRow{what: "inbox read (page of 100)", size: n, took: took, unit: "stored events", perUnit: "per page", explain: plan})
}

// janitorCase marks every event sent two days ago and times one janitor
// batch.
func janitorCase(t *testing.T, r *Results, db *mysql.DB, p *countingProxy, pdb *mysql.DB, n int) {
	say("scale: marking %d events sent two days ago", n)
	if _, err := db.Exec("UPDATE outbox_events SET sent_at = ?", time.Now().UTC().Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DELETE FROM outbox_queue"); err != nil {
		t.Fatal(err)
	}
	took, plan := timeJob(t, db, p, pdb, 3, func(db *mysql.DB) error {
		_, _, err := outbox.Janitor{DB: db, Clock: mesh.SystemClock, Retention: 24 * time.Hour}.RunOnce(context.Background())
		return err
	})
	r.addScale(scaleRow{what: "janitor batch", size: n, took: took, unit: "expired rows", perUnit: "per batch of 500", explain: plan})
}

// scannerCases times the presence and task scanners over n active agents
// and n tasks, none due: their cost every minute.
func scannerCases(t *testing.T, r *Results, db *mysql.DB, p *countingProxy, pdb *mysql.DB, n int, sealer *seal.Sealer, log *slog.Logger) {
	ctx := context.Background()
	now := time.Now().UTC()
	for off := 0; off < n; off += 100_000 {
		if _, err := db.Exec(scaleTasksSQL, n, now, now, off, n); err != nil {
			t.Fatal(err)
		}
	}
	id := &identity.Service{DB: db, Clock: mesh.SystemClock, Sealer: sealer}
	took, plan := timeJob(t, db, p, pdb, 3, func(db *mysql.DB) error {
		id.DB = db
		return id.ScanPresence(ctx)
	})
	r.addScale(scaleRow{what: "presence scanner", size: n, took: took, unit: "agents", perUnit: "per run, none due", explain: plan})
	svc := &tasks.Service{DB: db, Clock: mesh.SystemClock, Log: log, IdleTimeout: 24 * time.Hour}
	took, plan = timeJob(t, db, p, pdb, 3, func(db *mysql.DB) error {
		svc.DB = db
		return svc.ScanIdleTasks(ctx)
	})
	r.addScale(scaleRow{what: "task scanner", size: n, took: took, unit: "tasks", perUnit: "per run, none due", explain: plan})
}
