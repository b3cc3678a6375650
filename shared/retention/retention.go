// Package retention bounds every table of the schema. Tables says, for each
// one, what keeps it from growing without end: the owner it lives and dies
// with (one row per agent, per pair, per slot), or an age after which the
// Janitor deletes it. A test compares Tables with the migrated schema, so a
// new table cannot be added without saying how it is bounded.
//
// The Janitor deletes in small batches that never hold long locks: rows are
// chosen by a read that locks nothing (an index range from the oldest), and
// each batch is deleted by primary key in its own short statement or
// transaction, so a send waits on the janitor for at most one batch, never
// for the whole sweep.
package retention

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/shared/backoff"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// Bound is how one table is kept from growing without end.
type Bound struct {
	// Rule says what bounds the table's rows.
	Rule string
	// Setting is the environment variable of the age after which rows are
	// deleted, "" when the rows live and die with their owner.
	Setting string
}

// Settings of the ages, read by shared/config.
const (
	SettingTasks          = "MESH_TASK_RETENTION"
	SettingAuditLog       = "MESH_AUDIT_RETENTION"
	SettingFriendRequests = "MESH_FRIEND_REQUEST_RETENTION"
	SettingSessions       = "MESH_SESSION_RETENTION"
	SettingRevokedKeys    = "MESH_REVOKED_KEY_RETENTION"
	// SettingOutbox is the outbox's own retention (shared/outbox.Janitor).
	SettingOutbox = "MESH_OUTBOX_RETENTION"
)

// Tables is every table of the schema with its bound, in one place: the
// README's retention section and the schema test both follow it.
var Tables = map[string]Bound{
	"agents":            {Rule: "one row per agent"},
	"agent_accounts":    {Rule: "one row per agent"},
	"a2a_cards":         {Rule: "one row per agent"},
	"rate_limits":       {Rule: "one row per agent, plus the admin bucket; failed-authentication buckets are deleted once refilled (identity.ExpireThrottles)"},
	"inbox_counters":    {Rule: "one row per recipient agent"},
	"dispatch_state":    {Rule: "one row per recipient agent"},
	"inbox_polls":       {Rule: "at most MESH_MAX_LONG_POLLS slots per agent, reused; each expires on its own"},
	"a2a_waits":         {Rule: "at most a2agw.MaxWaits slots per agent, reused; each expires on its own"},
	"push_connections":  {Rule: "at most push.MaxConnsPerAgent per agent; the push janitor deletes expired ones and those of revoked keys"},
	"accounts":          {Rule: "one row per account"},
	"friendships":       {Rule: "two rows per pair of friends"},
	"agent_blocks":      {Rule: "one row per blocking pair"},
	"mesh_groups":       {Rule: "one row per group"},
	"group_members":     {Rule: "one row per member of a group"},
	"api_keys":          {Rule: "live keys per agent; a revoked key is deleted this long after its revocation", Setting: SettingRevokedKeys},
	"account_sessions":  {Rule: "at most accounts.MaxSessions live per account; an expired session is deleted this long after it expired", Setting: SettingSessions},
	"friend_requests":   {Rule: "at most one pending per ordered pair; an answered request is deleted this long after its answer (never sooner than the 24 h cool-down it enforces)", Setting: SettingFriendRequests},
	"audit_log":         {Rule: "deleted this long after it was written", Setting: SettingAuditLog},
	"tasks":             {Rule: "a terminal task is deleted this long after its last change (open tasks go terminal: the task scanner fails them after MESH_TASK_IDLE_TIMEOUT)", Setting: SettingTasks},
	"task_messages":     {Rule: "deleted with their task", Setting: SettingTasks},
	"task_artifacts":    {Rule: "deleted with their task", Setting: SettingTasks},
	"task_contexts":     {Rule: "deleted once no task is left in the conversation and it is older than the task retention", Setting: SettingTasks},
	"outbox_events":     {Rule: "a delivered event is deleted this long after it occurred, a dead letter this long after it was given up on (outbox.Janitor); pending ones drain", Setting: SettingOutbox},
	"outbox_queue":      {Rule: "one row per event the dispatcher has yet to publish; deleted when it publishes or dead-letters it"},
	"idempotency_keys":  {Rule: "deleted this long after the write they answer", Setting: SettingOutbox},
	"schema_migrations": {Rule: "one row per migration file"},
}

// Defaults of the Policy.
const (
	DefaultTaskRetention          = 30 * 24 * time.Hour
	DefaultAuditRetention         = 365 * 24 * time.Hour
	DefaultFriendRequestRetention = 30 * 24 * time.Hour
	DefaultSessionRetention       = 7 * 24 * time.Hour
	DefaultRevokedKeyRetention    = 30 * 24 * time.Hour
	// DefaultBatch is the number of rows (or tasks) per statement.
	DefaultBatch = 200
	// MaxBatch caps Batch: a larger one would hold more locks per statement.
	MaxBatch = 500
	// DefaultBudget bounds one Run.
	DefaultBudget = 4 * time.Minute
	// minFriendRequestRetention keeps a rejection as long as the cool-down
	// it enforces (identity.DefaultRequestCoolDown).
	minFriendRequestRetention = 24 * time.Hour
)

// Policy is how long finished rows are kept; zero fields take the defaults.
type Policy struct {
	// Tasks: after a task's last change, once it is terminal.
	Tasks time.Duration
	// AuditLog: after the entry was written.
	AuditLog time.Duration
	// FriendRequests: after the request was answered.
	FriendRequests time.Duration
	// Sessions: after the session expired.
	Sessions time.Duration
	// RevokedKeys: after the key was revoked.
	RevokedKeys time.Duration
}

func (p Policy) withDefaults() Policy {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&p.Tasks, DefaultTaskRetention)
	def(&p.AuditLog, DefaultAuditRetention)
	def(&p.FriendRequests, DefaultFriendRequestRetention)
	def(&p.Sessions, DefaultSessionRetention)
	def(&p.RevokedKeys, DefaultRevokedKeyRetention)
	p.FriendRequests = max(p.FriendRequests, minFriendRequestRetention)
	return p
}

// Janitor deletes the rows past their Policy, in batches.
type Janitor struct {
	DB     *mysql.DB
	Clock  mesh.Clock
	Policy Policy
	// Batch is the rows (tasks, for tasks) per statement: default
	// DefaultBatch, at most MaxBatch.
	Batch int
	// Budget bounds one Run (default DefaultBudget, and never past ctx's
	// deadline less 3 s).
	Budget time.Duration
	Log    *slog.Logger
	// Rest is how long the janitor waits after each batch, as a multiple
	// of the time the batch took (default 1: it works half the time). The
	// server's CPU and log are shared with the sends; a janitor running
	// flat out on a backlog slows every commit, so it yields in proportion
	// to how slow its own batches are. Negative: no rest (tests).
	Rest float64
	// AfterBatch, when set, is called after each committed batch with its
	// table and the rows it deleted (tests count batches with it).
	AfterBatch func(table string, deleted int)
	// InTx, when set, is called inside the transaction that deletes a batch
	// of tasks, while it holds their locks (tests send from it to prove a
	// send does not wait on them).
	InTx func(ctx context.Context)
}

// BatchSize is the effective Batch.
func (j *Janitor) BatchSize() int {
	switch {
	case j.Batch <= 0:
		return DefaultBatch
	case j.Batch > MaxBatch:
		return MaxBatch
	}
	return j.Batch
}

// step deletes one batch of a table; more reports that a full batch was
// found, so another may be waiting.
type step struct {
	table string
	run   func(ctx context.Context) (deleted int, more bool, err error)
}

// Run sweeps every policy until nothing is past its age or the budget is
// spent, and returns the rows deleted per table. The steps take turns, one
// batch each, so a large backlog in one table does not starve the others.
func (j *Janitor) Run(ctx context.Context) (map[string]int, error) {
	budget := j.Budget
	if budget <= 0 {
		budget = DefaultBudget
	}
	stop := time.Now().Add(budget)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-3*time.Second).Before(stop) {
		stop = dl.Add(-3 * time.Second)
	}
	clock := j.Clock
	if clock == nil {
		clock = mesh.SystemClock
	}
	now := clock()
	p := j.Policy.withDefaults()
	r := &run{j: j, batch: j.BatchSize(), deleted: map[string]int{}, now: now,
		taskCutoff: now.Add(-p.Tasks), last: time.Now()}
	steps := []step{
		{"tasks", r.tasks},
		{"task_contexts", r.contexts},
		{"audit_log", r.auditLog(now.Add(-p.AuditLog))},
		{"friend_requests", r.simple(friendRequestsSQL, now.Add(-p.FriendRequests), scanInt)},
		{"account_sessions", r.simple(sessionsSQL, now.Add(-p.Sessions), scanBytes)},
		{"api_keys", r.simple(revokedKeysSQL, now.Add(-p.RevokedKeys), scanString)},
	}
	defer func() {
		if j.Log != nil {
			j.Log.Info("retention janitor", "deleted", r.deleted)
		}
	}()
	for len(steps) > 0 && time.Now().Before(stop) {
		left := steps[:0]
		for _, s := range steps {
			if err := ctx.Err(); err != nil {
				return r.deleted, err
			}
			n, more, err := s.run(ctx)
			if err != nil {
				return r.deleted, fmt.Errorf("retention: %s: %w", s.table, err)
			}
			r.count(ctx, s.table, n)
			if more {
				left = append(left, s)
			}
		}
		steps = left
	}
	return r.deleted, nil
}

// run is the state of one Run: cutoffs fixed at its start, and the cursors
// of the walks that may pass rows they keep (so a kept row is not read
// again and again).
type run struct {
	j          *Janitor
	batch      int
	now        time.Time
	taskCutoff time.Time
	deleted    map[string]int
	// last is when the previous batch (or the run) ended.
	last time.Time
	// tasks: the terminal status walked now and the last task passed.
	status     int
	taskAfter  *cursor
	ctxAfter   *cursor
	auditDone  bool
	simpleDone map[string]bool
}

// cursor is a position in an index ordered by (time, id).
type cursor struct {
	at time.Time
	id string
}

// count records a batch and rests after it (see Janitor.Rest).
func (r *run) count(ctx context.Context, table string, n int) {
	if n > 0 {
		r.deleted[table] += n
	}
	if r.j.AfterBatch != nil && n > 0 {
		r.j.AfterBatch(table, n)
	}
	rest := r.j.Rest
	if rest == 0 {
		rest = 1
	}
	if rest > 0 {
		backoff.Wait(ctx, time.Duration(float64(time.Since(r.last))*rest))
	}
	r.last = time.Now()
}

// ---- simple ages: one index range, delete by primary key ----

// A simple policy's statements: the select reads the oldest keys past the
// cutoff from an index (locking nothing); the delete takes exactly those
// rows by primary key and nothing else. It does not re-check the age: the
// rows it deletes never change once past it (an answered request stays
// answered, a revocation or an expiry is never moved), and a condition on
// the indexed age would let the server pick that index's range instead,
// locking every row and gap in it.
type simpleSQL struct {
	table, sel, del string
}

var (
	friendRequestsSQL = simpleSQL{"friend_requests",
		`SELECT request_id FROM friend_requests WHERE decided_at < ? ORDER BY decided_at LIMIT ?`,
		`DELETE FROM friend_requests WHERE request_id IN (?)`}
	sessionsSQL = simpleSQL{"account_sessions",
		`SELECT token_hash FROM account_sessions WHERE expires_at < ? ORDER BY expires_at LIMIT ?`,
		`DELETE FROM account_sessions WHERE token_hash IN (?)`}
	revokedKeysSQL = simpleSQL{"api_keys",
		`SELECT key_id FROM api_keys WHERE revoked_at < ? ORDER BY revoked_at LIMIT ?`,
		`DELETE FROM api_keys WHERE key_id IN (?)`}
)

func (r *run) simple(q simpleSQL, cutoff time.Time, scan func(*sql.Rows) (any, error)) func(ctx context.Context) (int, bool, error) {
	return func(ctx context.Context) (int, bool, error) {
		keys, err := query(ctx, r.j.DB, scan, q.sel, cutoff, r.batch)
		if err != nil || len(keys) == 0 {
			return 0, false, err
		}
		n, err := execRC(ctx, r.j.DB, expand(q.del, len(keys)), keys...)
		return n, len(keys) == r.batch, err
	}
}

// ---- audit log: a prefix of the primary key ----

// The audit log is written in id order with the writer's clock, so its
// oldest entries are a prefix of the primary key: the walk reads the first
// ids and stops at the first entry inside the retention, never scanning
// the young rest. No index on occurred_at is needed.
const (
	auditHeadSQL   = `SELECT id, occurred_at FROM audit_log ORDER BY id LIMIT ?`
	auditDeleteSQL = `DELETE FROM audit_log WHERE id IN (?)`
)

func (r *run) auditLog(cutoff time.Time) func(ctx context.Context) (int, bool, error) {
	return func(ctx context.Context) (int, bool, error) {
		rows, err := r.j.DB.QueryContext(ctx, auditHeadSQL, r.batch)
		if err != nil {
			return 0, false, err
		}
		var ids []any
		young := false
		for rows.Next() {
			var id int64
			var at time.Time
			if err := rows.Scan(&id, &at); err != nil {
				rows.Close()
				return 0, false, err
			}
			if !at.Before(cutoff) {
				young = true
				break
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return 0, false, err
		}
		n, err := execRC(ctx, r.j.DB, expand(auditDeleteSQL, len(ids)), ids...)
		return n, !young && len(ids) == r.batch, err
	}
}

// ---- helpers ----

// inTx runs fn in a READ COMMITTED transaction, again on a deadlock or a
// lock-wait timeout. READ COMMITTED takes no gap locks: under REPEATABLE
// READ a delete by primary key locks the gaps beside the deleted rows too,
// and a send inserting a new task (a random id) into such a gap would wait
// for the janitor's commit. Every read fn needs after its locks is a plain
// read, which then sees what committed before it.
func inTx(ctx context.Context, db *mysql.DB, fn func(tx *sql.Tx) error) error {
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		var tx *sql.Tx
		if tx, err = db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}); err != nil {
			return err
		}
		if err = fn(tx); err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
		if !mysql.IsRetryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// execRC runs one statement in its own READ COMMITTED transaction.
func execRC(ctx context.Context, db *mysql.DB, stmt string, args ...any) (int, error) {
	n := 0
	err := inTx(ctx, db, func(tx *sql.Tx) error {
		var err error
		n, err = exec(ctx, tx, stmt, args...)
		return err
	})
	return n, err
}

func scanInt(rows *sql.Rows) (any, error) {
	var v int64
	err := rows.Scan(&v)
	return v, err
}

func scanString(rows *sql.Rows) (any, error) {
	var v string
	err := rows.Scan(&v)
	return v, err
}

func scanBytes(rows *sql.Rows) (any, error) {
	var v []byte
	err := rows.Scan(&v)
	return v, err
}

// querier is what query reads with: the pool or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// query returns the first column of every row, scanned by scan.
func query(ctx context.Context, q querier, scan func(*sql.Rows) (any, error), stmt string, args ...any) ([]any, error) {
	rows, err := q.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []any
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// execer is what exec writes with: the pool or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func exec(ctx context.Context, e execer, stmt string, args ...any) (int, error) {
	res, err := e.ExecContext(ctx, stmt, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// expand replaces the "IN (?)" lists of stmt, in order, with ns[i]
// placeholders each.
func expand(stmt string, ns ...int) string {
	for _, n := range ns {
		stmt = strings.Replace(stmt, "IN (?)", "IN ("+mysql.Placeholders(n)+"\x00", 1)
	}
	return strings.ReplaceAll(stmt, "\x00", ")")
}
