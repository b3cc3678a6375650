package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// Janitor deletes settled outbox rows older than the retention, in small
// batches, so the outbox (which is also the inbox log) does not grow forever.
//
// What it deletes and why:
//   - delivered rows (delivery 'sent' and no longer queued) whose sent_at is
//     older than Retention. An event is written with its occurred_at as
//     sent_at (see insertEventsSQL), so retention counts from the event's
//     time: the dispatcher publishes it within a second or so, and not
//     rewriting every published row is what makes its settle cheap (the
//     migration 0013_outbox_queue.sql). Rows settled before that hold their
//     settle time;
//   - delivery='failed' (dead-lettered) rows once their settle time, stored
//     in sent_at, is older than Retention: a dead letter stays readable for
//     as long as a delivered event does. A dead letter without sent_at is
//     kept for good: deleting it by occurred_at could remove seq k while
//     k-1, settled later, is still held;
//   - pending rows never (queued, or still marked pending): they have not
//     reached Kafka yet.
//
// Per recipient, event times follow seq (up to the few milliseconds two
// concurrent sends can take to commit) and dead letters are settled in seq
// order, so each deletion removes a prefix of the recipient's seqs: the
// inbox holds the contiguous range oldest_seq..last (a dead letter without
// sent_at is the one exception: it may outlive its neighbours).
type Janitor struct {
	DB        *mysql.DB
	Clock     mesh.Clock
	Retention time.Duration
	// Batch is the number of rows per DELETE (default 500): short statements
	// that hold few locks and keep replication lag small.
	Batch int
	// Budget bounds one Run (default 20 s, and never past ctx's deadline).
	Budget time.Duration
	Log    *slog.Logger
}

// Both selects walk the index outbox_sent_age (delivery, sent_at) from its
// oldest entry, read no table rows but a queued event's queue row (the
// primary key id is in the index) and lock nothing. The delete then locks
// exactly the chosen rows by primary key, re-checking the conditions, so it
// takes no gap locks that would stall the dispatcher. A queued event is
// skipped by both; one still marked pending is not 'sent'.
const (
	notQueued      = `NOT EXISTS (SELECT 1 FROM outbox_queue q WHERE q.recipient = outbox_events.recipient AND q.seq = outbox_events.seq)`
	oldSentSQL     = `SELECT id FROM outbox_events WHERE delivery = 'sent' AND sent_at < ? AND ` + notQueued + ` ORDER BY sent_at LIMIT ?`
	oldFailedSQL   = `SELECT id FROM outbox_events WHERE delivery = 'failed' AND sent_at < ? ORDER BY sent_at LIMIT ?`
	deleteSettled  = `DELETE FROM outbox_events WHERE id IN (?) AND delivery IN ('sent', 'failed') AND sent_at < ? AND ` + notQueued
	defaultJanitor = 500
)

// Run deletes expired rows batch by batch until none are left or the budget
// is spent.
func (j Janitor) Run(ctx context.Context) error {
	budget := j.Budget
	if budget <= 0 {
		budget = 20 * time.Second
	}
	stop := time.Now().Add(budget)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-2*time.Second).Before(stop) {
		stop = dl.Add(-2 * time.Second)
	}
	total := 0
	defer func() {
		if j.Log != nil {
			j.Log.Info("outbox janitor", "deleted", total)
		}
	}()
	for time.Now().Before(stop) {
		n, more, err := j.RunOnce(ctx)
		total += n
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// BatchSize is the number of rows one statement deletes at most.
func (j Janitor) BatchSize() int {
	if j.Batch <= 0 {
		return defaultJanitor
	}
	return j.Batch
}

// RunOnce deletes one batch; more reports whether a full batch was found.
func (j Janitor) RunOnce(ctx context.Context) (deleted int, more bool, err error) {
	if j.Retention <= 0 {
		return 0, false, fmt.Errorf("outbox: janitor needs a positive retention")
	}
	clock := j.Clock
	if clock == nil {
		clock = mesh.SystemClock
	}
	batch := j.BatchSize()
	cutoff := clock().Add(-j.Retention)
	ids, err := selectIDs(ctx, j.DB, oldSentSQL, cutoff, batch)
	if err != nil {
		return 0, false, err
	}
	if len(ids) < batch {
		failed, err := selectIDs(ctx, j.DB, oldFailedSQL, cutoff, batch-len(ids))
		if err != nil {
			return 0, false, err
		}
		ids = append(ids, failed...)
	}
	if len(ids) == 0 {
		return 0, false, nil
	}
	args := append(ids, cutoff)
	res, err := j.DB.ExecContext(ctx, expand(deleteSettled, len(ids)), args...)
	if err != nil {
		return 0, false, fmt.Errorf("outbox: janitor delete: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), len(ids) == batch, nil
}

func selectIDs(ctx context.Context, q Querier, query string, cutoff time.Time, limit int) ([]any, error) {
	rows, err := q.QueryContext(ctx, query, cutoff, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []any
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
