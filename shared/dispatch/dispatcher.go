// Package dispatch drains the outbox into Kafka, in seq order per recipient.
// It is its own package so that only the dispatcher function links the Kafka
// client; the HTTP functions write the outbox through package outbox alone.
package dispatch

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// Publisher sends records and reports each one's outcome, in order. A
// *kgo.Client satisfies it through KafkaPublisher.
type Publisher interface {
	Publish(ctx context.Context, recs []*kgo.Record) []error
}

// KafkaPublisher publishes with a franz-go client (acks=all, idempotent).
type KafkaPublisher struct{ Client *kgo.Client }

// Publish produces recs and waits for every acknowledgement.
func (p KafkaPublisher) Publish(ctx context.Context, recs []*kgo.Record) []error {
	res := p.Client.ProduceSync(ctx, recs...)
	errs := make([]error, len(res))
	for i, r := range res {
		errs[i] = r.Err
	}
	return errs
}

// Dispatcher drains the outbox into Kafka. Guarantees:
//   - per recipient, events are published in seq order: a recipient is held
//     by one dispatcher at a time (its dispatch_state row, locked FOR UPDATE
//     SKIP LOCKED for the whole batch, so other dispatchers move on to other
//     recipients instead of waiting);
//   - a failing event blocks only later events of its own recipient: the
//     backoff (5 s × 2^n) lives on the recipient, not on the row, so no later
//     event can overtake it; after MaxAttempts it is dead-lettered
//     (delivery='failed', still served by GET /v1/inbox) and the next one goes;
//   - a dispatcher killed mid-batch rolls back: its events stay pending and are
//     published again (duplicates that meshd drops by seq).
type Dispatcher struct {
	DB        *mysql.DB
	Publisher Publisher
	Topic     string
	Sealer    *seal.Sealer
	Clock     mesh.Clock
	Log       *slog.Logger
	Metrics   *metrics.Sink

	Recipients   int           // recipients per batch (default 50)
	PerRecipient int           // events per recipient per batch (default 200)
	MaxAttempts  int           // attempts before dead-lettering (default 10)
	BaseBackoff  time.Duration // first retry delay (default 5 s), doubled per attempt

	// cursor is the last recipient of the previous batch: the next batch
	// starts after it and wraps around, so recipients that keep receiving
	// events cannot starve the ones after them in key order.
	cursorMu sync.Mutex
	cursor   string
}

// Stats counts what one batch did.
type Stats struct {
	Recipients  int
	Sent        int
	Failed      int // publish failures (will be retried)
	DeadLetters int
}

func (d *Dispatcher) defaults() {
	if d.Clock == nil {
		d.Clock = mesh.SystemClock
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Metrics == nil {
		d.Metrics = metrics.Default
	}
	if d.Recipients <= 0 {
		d.Recipients = 50
	}
	if d.PerRecipient <= 0 {
		d.PerRecipient = 200
	}
	if d.MaxAttempts <= 0 {
		d.MaxAttempts = 10
	}
	if d.BaseBackoff <= 0 {
		d.BaseBackoff = 5 * time.Second
	}
}

// Run drains until the outbox has nothing due or budget runs out, pausing
// briefly when idle so a scheduled invocation keeps delivery near-continuous.
// It stops early enough to finish inside ctx's deadline.
func (d *Dispatcher) Run(ctx context.Context, budget time.Duration) error {
	d.defaults()
	stop := time.Now().Add(budget)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-25*time.Second).Before(stop) {
		stop = dl.Add(-25 * time.Second) // room for one full publish timeout
	}
	var total Stats
	defer func() {
		d.Metrics.Emit(map[string]float64{"OutboxSent": float64(total.Sent), "OutboxPublishFailures": float64(total.Failed)})
		if age, err := d.oldestPendingAge(context.WithoutCancel(ctx)); err == nil {
			d.Metrics.Emit(map[string]float64{"OutboxOldestPendingSeconds": age.Seconds()})
		}
	}()
	idle := 100 * time.Millisecond
	for time.Now().Before(stop) {
		st, err := d.RunOnce(ctx)
		total.Sent += st.Sent
		total.Failed += st.Failed
		if err != nil {
			return err
		}
		if st.Recipients > 0 {
			idle = 100 * time.Millisecond
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(idle):
		}
		idle = min(idle*2, time.Second)
	}
	return nil
}

func (d *Dispatcher) oldestPendingAge(ctx context.Context) (time.Duration, error) {
	var oldest sql.NullTime
	if err := d.DB.QueryRowContext(ctx, "SELECT MIN(occurred_at) FROM outbox_events WHERE delivery = 'pending'").Scan(&oldest); err != nil || !oldest.Valid {
		return 0, err
	}
	return d.Clock().Sub(oldest.Time), nil
}

// RunOnce publishes one batch: up to Recipients due recipients, each with up
// to PerRecipient pending events in seq order.
func (d *Dispatcher) RunOnce(ctx context.Context) (Stats, error) {
	d.defaults()
	now := d.Clock()
	due, err := d.dueRecipients(ctx, now)
	if err != nil || len(due) == 0 {
		return Stats{}, err
	}
	var st Stats
	err = d.DB.InTx(ctx, func(tx *sql.Tx) error {
		st = Stats{}
		held, err := lockRecipients(ctx, tx, due, now)
		if err != nil || len(held) == 0 {
			return err
		}
		// Settle times are read once the recipients are held, so per
		// recipient sent_at grows with seq even across dispatchers, and the
		// janitor always expires a prefix.
		settledAt := d.Clock()
		st.Recipients = len(held)
		batches := make([][]row, 0, len(held))
		var recs []*kgo.Record
		for _, h := range held {
			rows, err := pendingRows(ctx, tx, h.recipient, d.PerRecipient)
			if err != nil {
				return err
			}
			for _, r := range rows {
				rec, err := d.record(r)
				if err != nil {
					return err
				}
				recs = append(recs, rec)
			}
			batches = append(batches, rows)
		}
		errs := d.Publisher.Publish(ctx, recs)
		i := 0
		for bi, rows := range batches {
			res := errs[i : i+len(rows)]
			i += len(rows)
			if err := d.settle(ctx, tx, held[bi], rows, res, settledAt, &st); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && st.DeadLetters > 0 {
		// Emitted per batch, after the commit, so the alarm fires at once.
		d.Metrics.Emit(map[string]float64{"OutboxDeadLetters": float64(st.DeadLetters)})
	}
	return st, err
}

// dueRecipients finds recipients with pending events whose backoff has
// passed, and makes sure each has a dispatch_state row to lock.
func (d *Dispatcher) dueRecipients(ctx context.Context, now time.Time) ([]string, error) {
	d.cursorMu.Lock()
	after := d.cursor
	d.cursorMu.Unlock()
	// Round robin: the recipients after the cursor, then from the start.
	out, err := queryRecipients(ctx, d.DB, dueAfterSQL, after, now, d.Recipients)
	if err != nil {
		return nil, err
	}
	if len(out) < d.Recipients && after != "" {
		more, err := queryRecipients(ctx, d.DB, dueUpToSQL, after, now, d.Recipients-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	if len(out) == 0 {
		d.cursorMu.Lock()
		d.cursor = ""
		d.cursorMu.Unlock()
		return nil, nil
	}
	d.cursorMu.Lock()
	d.cursor = out[len(out)-1]
	d.cursorMu.Unlock()
	args := make([]any, 0, len(out)*2)
	vals := make([]string, len(out))
	for i, r := range out {
		vals[i] = "(?, 0, ?)"
		args = append(args, r, now)
	}
	_, err = d.DB.ExecContext(ctx, "INSERT IGNORE INTO dispatch_state (recipient, attempts, next_attempt_at) VALUES "+strings.Join(vals, ","), args...)
	return out, err
}

// The due recipients after (dueAfterSQL) or up to (dueUpToSQL) a key, in
// key order.
const (
	dueAfterSQL = `SELECT p.recipient FROM
  (SELECT DISTINCT recipient FROM outbox_events WHERE delivery = 'pending' AND recipient > ?) p
  LEFT JOIN dispatch_state s ON s.recipient = p.recipient
WHERE s.recipient IS NULL OR s.next_attempt_at <= ?
ORDER BY p.recipient LIMIT ?`
	dueUpToSQL = `SELECT p.recipient FROM
  (SELECT DISTINCT recipient FROM outbox_events WHERE delivery = 'pending' AND recipient <= ?) p
  LEFT JOIN dispatch_state s ON s.recipient = p.recipient
WHERE s.recipient IS NULL OR s.next_attempt_at <= ?
ORDER BY p.recipient LIMIT ?`
)

func queryRecipients(ctx context.Context, db *mysql.DB, query, bound string, now time.Time, limit int) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, bound, now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

type holder struct {
	recipient string
	attempts  int
}

// lockRecipients takes the recipients no other dispatcher holds.
func lockRecipients(ctx context.Context, tx *sql.Tx, due []string, now time.Time) ([]holder, error) {
	args := make([]any, 0, len(due)+1)
	for _, r := range due {
		args = append(args, r)
	}
	args = append(args, now)
	rows, err := tx.QueryContext(ctx, "SELECT recipient, attempts FROM dispatch_state WHERE recipient IN ("+mysql.Placeholders(len(due))+") AND next_attempt_at <= ? ORDER BY recipient FOR UPDATE SKIP LOCKED", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []holder
	for rows.Next() {
		var h holder
		if err := rows.Scan(&h.recipient, &h.attempts); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

type row struct {
	env     mesh.Envelope
	body    []byte
	traceID string
}

func pendingRows(ctx context.Context, tx *sql.Tx, recipient string, limit int) ([]row, error) {
	rows, err := tx.QueryContext(ctx, `SELECT seq, event_id, type, sender, task_id, context_id, group_id, message_id, key_epoch, body, trace_id, occurred_at
FROM outbox_events WHERE delivery = 'pending' AND recipient = ? ORDER BY seq LIMIT ?`, recipient, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		r := row{env: mesh.Envelope{V: mesh.EnvelopeVersion, To: recipient}}
		var group, trace sql.NullString
		if err := rows.Scan(&r.env.Seq, &r.env.EventID, &r.env.Type, &r.env.From, &r.env.TaskID, &r.env.ContextID,
			&group, &r.env.MessageID, &r.env.KeyEpoch, &r.body, &trace, &r.env.OccurredAt); err != nil {
			return nil, err
		}
		r.env.GroupID, r.traceID = group.String, trace.String
		out = append(out, r)
	}
	return out, rows.Err()
}

// record builds the Kafka record: key = recipient, value = envelope with the
// body sealed for the recipient's key epoch.
func (d *Dispatcher) record(r row) (*kgo.Record, error) {
	env := r.env
	sealed, err := d.Sealer.Seal(env.To, env.KeyEpoch, r.body, seal.AAD(env))
	if err != nil {
		return nil, err
	}
	env.Sealed = sealed
	value, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	headers := []kgo.RecordHeader{{Key: "type", Value: []byte(env.Type)}, {Key: "message_id", Value: []byte(env.MessageID)}}
	if r.traceID != "" {
		headers = append(headers, kgo.RecordHeader{Key: "trace_id", Value: []byte(r.traceID)})
	}
	return &kgo.Record{Topic: d.Topic, Key: []byte(env.To), Value: value, Headers: headers}, nil
}

// settle marks the published prefix sent and backs the recipient off at its
// first failure (or dead-letters that event after MaxAttempts). A dead
// letter's sent_at is when it was given up on: the janitor expires it with the
// sent rows around it, so retention always leaves a clean prefix.
func (d *Dispatcher) settle(ctx context.Context, tx *sql.Tx, h holder, rows []row, errs []error, now time.Time, st *Stats) error {
	ok := 0
	for ok < len(rows) && errs[ok] == nil {
		ok++
	}
	if ok > 0 {
		if _, err := tx.ExecContext(ctx, "UPDATE outbox_events SET delivery = 'sent', sent_at = ? WHERE recipient = ? AND seq BETWEEN ? AND ? AND delivery = 'pending'",
			now, h.recipient, rows[0].env.Seq, rows[ok-1].env.Seq); err != nil {
			return err
		}
		st.Sent += ok
	}
	if ok == len(rows) {
		if h.attempts != 0 {
			_, err := tx.ExecContext(ctx, "UPDATE dispatch_state SET attempts = 0, last_error = NULL, next_attempt_at = ? WHERE recipient = ?", now, h.recipient)
			return err
		}
		return nil
	}
	st.Failed++
	head := rows[ok].env
	msg := truncate(errs[ok].Error(), 500)
	attempts := h.attempts + 1
	if ok > 0 {
		attempts = 1 // progress was made: the head is a new event
	}
	if attempts >= d.MaxAttempts {
		if _, err := tx.ExecContext(ctx, "UPDATE outbox_events SET delivery = 'failed', last_error = ?, sent_at = ? WHERE recipient = ? AND seq = ? AND delivery = 'pending'",
			msg, now, h.recipient, head.Seq); err != nil {
			return err
		}
		st.DeadLetters++
		d.Log.Error("outbox event dead-lettered", "recipient", h.recipient, "seq", head.Seq, "event_id", head.EventID, "attempts", attempts, "err", msg)
		_, err := tx.ExecContext(ctx, "UPDATE dispatch_state SET attempts = 0, last_error = ?, next_attempt_at = ? WHERE recipient = ?", msg, now, h.recipient)
		return err
	}
	next := now.Add(d.BaseBackoff << (attempts - 1))
	d.Log.Warn("outbox publish failed; recipient backs off", "recipient", h.recipient, "seq", head.Seq, "attempt", attempts, "retry_at", next, "err", msg)
	_, err := tx.ExecContext(ctx, "UPDATE dispatch_state SET attempts = ?, last_error = ?, next_attempt_at = ? WHERE recipient = ?", attempts, msg, next, h.recipient)
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// ErrNoTopic is returned when the dispatcher has no topic configured.
var ErrNoTopic = errors.New("dispatch: no Kafka topic configured")

// Validate checks the dispatcher is wired.
func (d *Dispatcher) Validate() error {
	switch {
	case d.DB == nil:
		return fmt.Errorf("dispatch: dispatcher without DB")
	case d.Publisher == nil:
		return fmt.Errorf("dispatch: dispatcher without publisher")
	case d.Sealer == nil:
		return fmt.Errorf("dispatch: dispatcher without sealer")
	case d.Topic == "":
		return ErrNoTopic
	}
	return nil
}

// ScheduledBudget is how long one scheduled invocation keeps draining: most
// of the one-minute schedule, so delivery is near-continuous without two runs
// of one schedule overlapping.
const ScheduledBudget = 50 * time.Second

// Job is the scheduled unit of work of the DispatcherFunction, the same in
// Lambda and in the local stack.
func (d *Dispatcher) Job(ctx context.Context) error { return d.Run(ctx, ScheduledBudget) }
