// Package outbox writes events for recipients inside the caller's
// transaction, each with a gapless per-recipient seq (Append), reads them back
// for GET /v1/inbox (Read, Inbox) and deletes settled rows after the
// retention (Janitor). Package dispatch drains the same rows to Kafka in seq
// order; MySQL stays the source of truth. This package links no Kafka code,
// so every HTTP function may use it.
package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// SentDelivery is the delivery an event is written with, its state once
// the dispatcher has published it; while it waits for that, its row in
// outbox_queue makes it pending (see the migration 0013_outbox_queue.sql),
// and a dead letter's becomes 'failed'. It is "sent" padded with spaces to
// the length of "pending", the value rows of earlier versions were written
// with and a redrive still writes, so the dispatcher that queues such a row
// rewrites it in place (InnoDB moves a clustered record whose field changes
// length). The column's collation, ascii_bin, is PAD SPACE on MariaDB and
// on MySQL 8.0 alike, so delivery = 'sent' matches this value and the
// unpadded 'sent' of older rows; a read that hands the value out trims it.
const SentDelivery = "sent   "

// PendingEventsSQL is every pending event as a derived table of (recipient,
// seq): the queued ones and those still marked pending in outbox_events
// (written by an earlier version, or redriven), which the dispatcher
// queues when it next takes their recipient.
const PendingEventsSQL = `(SELECT recipient, seq FROM outbox_queue UNION ALL SELECT recipient, seq FROM outbox_events WHERE delivery = 'pending')`

// DeliveryOfSQL is an event's delivery state (pending, sent or failed) in
// a query of outbox_events e LEFT JOIN outbox_queue q ON q.recipient =
// e.recipient AND q.seq = e.seq: pending while it is queued, else as
// stored (trimmed, see SentDelivery).
const DeliveryOfSQL = `IF(q.seq IS NULL, RTRIM(e.delivery), 'pending')`

// Event is one event to append for a recipient. Seq and EventID are filled by
// Append.
type Event struct {
	EventID    string
	Seq        int64
	Type       string
	To         string
	From       string
	TaskID     string
	ContextID  string
	GroupID    string
	MessageID  string
	OccurredAt time.Time
	Body       json.RawMessage
	TraceID    string
}

// NewEventID returns a random 128-bit id in UUID text form.
func NewEventID() string { return uuid.NewString() }

// The statements of Append are complete literals; at run time only their
// placeholder lists grow (expand).
const (
	// lockCountersSQL bumps and locks a chunk of counters. The range
	// optimizer reads an IN list in key order, and FORCE INDEX keeps it on
	// that range: on a small table the optimizer would rather scan the whole
	// index, locking every counter of the mesh, not just the recipients'.
	lockCountersSQL = `UPDATE inbox_counters FORCE INDEX (PRIMARY) SET last_seq = last_seq + CASE recipient WHEN ? THEN ? END
WHERE recipient IN (?) ORDER BY recipient`
	// bumpCounterSQL is lockCountersSQL for a lone recipient: the UPDATE
	// hands back the new last_seq as its insert id (LAST_INSERT_ID(expr)),
	// so the write answers what readCountersSQL would be asked (one round
	// trip fewer for every two-party send).
	bumpCounterSQL = `UPDATE inbox_counters SET last_seq = LAST_INSERT_ID(last_seq + ?) WHERE recipient = ?`
	// The counters were just updated by this transaction, so a plain read
	// sees their new values; it must not be a locking read, which can lock a
	// neighbouring counter outside the sorted order and deadlock two fan-outs.
	readCountersSQL = `SELECT recipient, last_seq FROM inbox_counters WHERE recipient IN (?)`
	// key_epoch is read with a shared lock: a rotation that committed after
	// this transaction's snapshot must not leave new events sealed under the
	// retired key. Only single-agent transactions (heartbeat, key rotation,
	// friend requests) lock agents rows exclusively, and none of them goes on
	// to lock a counter, so waiting here cannot close a cycle.
	readEpochsSQL = `SELECT agent_id, key_epoch FROM agents WHERE agent_id IN (?) LOCK IN SHARE MODE`
	// An event is written with its final delivery and its occurred_at as
	// sent_at (the time retention counts from), and queued for the
	// dispatcher: publishing it then deletes its queue row and leaves the
	// event as it is (see SentDelivery).
	insertEventsSQL = `INSERT INTO outbox_events
(recipient, seq, event_id, type, sender, task_id, context_id, group_id, message_id, key_epoch, body, trace_id, occurred_at, sent_at, delivery)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '` + SentDelivery + `')`
	insertQueueSQL  = `INSERT INTO outbox_queue (recipient, seq) VALUES (?, ?)`
	maxCounterChunk = 500
)

// Append assigns seqs and inserts events in tx. Counters are locked with one
// UPDATE per chunk of the sorted recipient set, so every transaction locks
// counter rows in ascending key order and two fan-outs cannot deadlock.
// Events for one recipient keep their slice order. An unknown recipient is a
// 404 agent_not_found (the caller's transaction should roll back).
func Append(ctx context.Context, tx *sql.Tx, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	count := map[string]int64{}
	for _, e := range events {
		count[e.To]++
	}
	recipients := make([]string, 0, len(count))
	for r := range count {
		recipients = append(recipients, r)
	}
	sort.Strings(recipients)

	// Lock and bump the counters in key order, in chunks to bound statement size.
	next := map[string]int64{}
	epochs := map[string]int{}
	for start := 0; start < len(recipients); start += maxCounterChunk {
		chunk := recipients[start:min(start+maxCounterChunk, len(recipients))]
		args := make([]any, 0, len(chunk)*3)
		for _, r := range chunk {
			args = append(args, r, count[r])
		}
		in := make([]any, len(chunk))
		for i, r := range chunk {
			in[i] = r
		}
		args = append(args, in...)
		lasts, err := bumpCounters(ctx, tx, chunk, count, args, in)
		if err != nil {
			return err
		}
		for r, last := range lasts {
			next[r] = last - count[r] + 1
		}
		chunkEpochs, err := readKeyed[int](ctx, tx, expand(readEpochsSQL, len(chunk)), in)
		if err != nil {
			return err
		}
		maps.Copy(epochs, chunkEpochs)
	}
	for i := range events {
		e := &events[i]
		e.Seq = next[e.To]
		next[e.To]++
		if e.EventID == "" {
			e.EventID = NewEventID()
		}
	}
	// Multi-row inserts in chunks: a 1,000-member fan-out is a few statements.
	// A chunk is also cut by body bytes to bound the memory and the size of
	// one statement when every body is a maximal message.
	const cols = 13
	for start, end := 0, 0; start < len(events); start = end {
		end = chunkEnd(events, start, maxInsertRows, maxInsertBytes)
		chunk := events[start:end]
		args := make([]any, 0, len(chunk)*(cols+2))
		for _, e := range chunk {
			var group any
			if e.GroupID != "" {
				group = e.GroupID
			}
			var trace any
			if e.TraceID != "" {
				trace = e.TraceID
			}
			args = append(args, e.To, e.Seq, e.EventID, e.Type, e.From, e.TaskID, e.ContextID, group,
				e.MessageID, epochs[e.To], string(e.Body), trace, e.OccurredAt, e.OccurredAt)
		}
		for _, e := range chunk {
			args = append(args, e.To, e.Seq)
		}
		// The events and their queue rows in one text, one round trip.
		if _, err := tx.ExecContext(ctx, expand(insertEventsSQL, len(chunk))+";\n"+expand(insertQueueSQL, len(chunk)), args...); err != nil {
			return fmt.Errorf("outbox: insert: %w", err)
		}
	}
	return nil
}

// InsertTaken inserts one event whose seq the caller already took from the
// recipient's counter in tx (e.Seq, see identity.TakeRateBumping), sealed
// under epoch, the recipient's key_epoch read under a share lock that tx
// still holds (identity.OpenSendGate): Append's INSERT without its
// counter and epoch statements. It fills e.EventID when empty.
func InsertTaken(ctx context.Context, tx mysql.Execer, e *Event, epoch int) error {
	if e.EventID == "" {
		e.EventID = NewEventID()
	}
	var group, trace any
	if e.GroupID != "" {
		group = e.GroupID
	}
	if e.TraceID != "" {
		trace = e.TraceID
	}
	if _, err := tx.ExecContext(ctx, insertEventsSQL, e.To, e.Seq, e.EventID, e.Type, e.From, e.TaskID, e.ContextID, group,
		e.MessageID, epoch, string(e.Body), trace, e.OccurredAt, e.OccurredAt); err != nil {
		return fmt.Errorf("outbox: insert: %w", err)
	}
	if _, err := tx.ExecContext(ctx, insertQueueSQL, e.To, e.Seq); err != nil {
		return fmt.Errorf("outbox: queue: %w", err)
	}
	return nil
}

// bumpCounters adds count to the counters of chunk (sorted) and returns
// their new values; args and in are lockCountersSQL's and readCountersSQL's
// arguments.
func bumpCounters(ctx context.Context, tx *sql.Tx, chunk []string, count map[string]int64, args, in []any) (map[string]int64, error) {
	notFound := mesh.Errorf(mesh.KindNotFound, "agent_not_found", "a recipient does not exist")
	if len(chunk) == 1 {
		res, err := tx.ExecContext(ctx, bumpCounterSQL, count[chunk[0]], chunk[0])
		if err != nil {
			return nil, fmt.Errorf("outbox: lock counters: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil, notFound
		}
		last, err := res.LastInsertId()
		if err != nil {
			return nil, err
		}
		return map[string]int64{chunk[0]: last}, nil
	}
	res, err := tx.ExecContext(ctx, expand(lockCountersSQL, len(chunk)), args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: lock counters: %w", err)
	}
	if n, _ := res.RowsAffected(); n != int64(len(chunk)) {
		return nil, notFound
	}
	return readKeyed[int64](ctx, tx, expand(readCountersSQL, len(chunk)), in)
}

// expand grows the placeholder lists of stmt for n items: "WHEN ? THEN ?"
// and "IN (?)" n times, and a trailing VALUES tuple n times. The statement
// stays a complete, parseable literal in the source.
func expand(stmt string, n int) string {
	if n <= 1 {
		return stmt
	}
	if strings.Contains(stmt, "WHEN ? THEN ?") {
		stmt = strings.Replace(stmt, "WHEN ? THEN ?", strings.TrimSuffix(strings.Repeat("WHEN ? THEN ? ", n), " "), 1)
	}
	if strings.Contains(stmt, "IN (?)") {
		return strings.Replace(stmt, "IN (?)", "IN ("+placeholders(n)+")", 1)
	}
	if i := strings.LastIndex(stmt, "VALUES "); i >= 0 {
		tuple := stmt[i+len("VALUES "):]
		return stmt + strings.Repeat(", "+tuple, n-1)
	}
	return stmt
}

// Limits of one multi-row INSERT of outbox rows.
const (
	maxInsertRows  = 200
	maxInsertBytes = 4 << 20
)

// chunkEnd returns the end of the chunk starting at start: at most maxRows
// events and, unless a single body is larger, at most maxBytes of bodies.
func chunkEnd(events []Event, start, maxRows, maxBytes int) int {
	end, size := start, 0
	for end < len(events) && end-start < maxRows {
		size += len(events[end].Body)
		if end > start && size > maxBytes {
			break
		}
		end++
	}
	return end
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// readKeyed runs a query returning (recipient, value) rows and maps them.
func readKeyed[V any](ctx context.Context, tx *sql.Tx, query string, args []any) (map[string]V, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]V{}
	for rows.Next() {
		var k string
		var v V
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}
