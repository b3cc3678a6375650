package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/backoff"
	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
)

// Querier is satisfied by *sql.DB, *sql.Tx and *sql.Conn.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Inbox page limits.
const (
	DefaultInboxLimit = 100
	MaxInboxLimit     = 500
	MaxInboxWait      = 20 * time.Second
)

// Both statements below are served by the unique key outbox_recipient_seq
// (recipient, seq): a range read from after+1 in seq order (each event
// pending while its queue row is there, see SentDelivery), and a MIN over
// one recipient's prefix. Neither ever scans another recipient's rows.
const (
	readInboxSQL = `SELECT e.seq, e.event_id, e.type, e.sender, e.task_id, e.context_id, e.group_id, e.message_id, e.key_epoch, e.trace_id, e.body, e.occurred_at,
` + DeliveryOfSQL + `
FROM outbox_events e LEFT JOIN outbox_queue q ON q.recipient = e.recipient AND q.seq = e.seq
WHERE e.recipient = ? AND e.seq > ? ORDER BY e.seq LIMIT ?`

	// oldestSeqSQL runs as one statement so MIN(seq) and the counter come
	// from the same snapshot: when nothing is held any more, the answer is
	// the seq the next event will get.
	oldestSeqSQL = `SELECT COALESCE((SELECT MIN(e.seq) FROM outbox_events e WHERE e.recipient = ?), c.last_seq + 1)
FROM inbox_counters c WHERE c.recipient = ?`
)

// MaxInboxPageBytes bounds one inbox page by size as well as by count: the
// events' JSON as it travels in the Lambda response (jsonlimit.WireSize)
// stays at or below it, except that a page always holds at least one event.
// At 4 MiB it leaves room under Lambda's 6 MB for any single event.
const MaxInboxPageBytes = 4 << 20

// Codes of the undeliverable placeholder (mesh.UndeliverableBody.Code). Which
// stored bodies cannot be served is decided by jsonlimit.Unservable, the rule
// the dispatcher and task reads apply too.
const (
	UndeliverableUnencodable = jsonlimit.Unencodable // stored body is not valid JSON/UTF-8
	UndeliverableTooDeep     = jsonlimit.TooDeep     // stored body nests deeper than jsonlimit.MaxServedDepth
	UndeliverableTooLarge    = "too_large"           // the event alone would not fit a response
)

// MetricUndeliverable counts events the inbox served as placeholders.
const MetricUndeliverable = "InboxUndeliverable"

// Read returns up to limit events of recipient with seq > after, in seq
// order, with their bodies opened and their delivery state (pending, sent or
// failed: dead-lettered events are served like any other). It stops before
// the page's size would pass MaxInboxPageBytes (but returns at least one
// event), so the last returned seq is an exact cursor. An event whose stored
// body cannot be served goes out as a mesh.EventUndeliverable placeholder
// with its seq and event_id: one bad event never fails the page.
func (in Inbox) Read(ctx context.Context, recipient string, after int64, limit int) ([]mesh.Envelope, error) {
	out := []mesh.Envelope{}
	size := 0
	// Batches keep what is read but not served small: a page of 500 large
	// events stops after a few MiB, and the driver discards the rest of the
	// batch it has started, not of the whole limit.
	for len(out) < limit {
		batch := min(limit-len(out), inboxReadBatch)
		got, full, err := in.readBatch(ctx, recipient, after, batch, &out, &size)
		if err != nil || full || got < batch {
			return out, err
		}
		after = out[len(out)-1].Seq
	}
	return out, nil
}

// inboxReadBatch is the most rows one inbox query reads.
const inboxReadBatch = 32

// readBatch appends up to n events after the cursor to out while they fit
// the page; full reports that the page is full.
func (in Inbox) readBatch(ctx context.Context, recipient string, after int64, n int, out *[]mesh.Envelope, size *int) (got int, full bool, err error) {
	rows, err := in.DB.QueryContext(ctx, readInboxSQL, recipient, after, n)
	if err != nil {
		return 0, false, err
	}
	defer rows.Close()
	for rows.Next() {
		got++
		e := mesh.Envelope{V: mesh.EnvelopeVersion, To: recipient}
		var group, trace sql.NullString
		var body []byte
		if err := rows.Scan(&e.Seq, &e.EventID, &e.Type, &e.From, &e.TaskID, &e.ContextID, &group,
			&e.MessageID, &e.KeyEpoch, &trace, &body, &e.OccurredAt, &e.Delivery); err != nil {
			return got, false, err
		}
		e.GroupID, e.TraceID = group.String, trace.String
		e.Body = body
		if code := jsonlimit.Unservable(body); code != "" {
			in.undeliverable(ctx, &e, code)
		}
		w, err := wireSize(e)
		if err == nil && w > MaxInboxPageBytes {
			in.undeliverable(ctx, &e, UndeliverableTooLarge)
			w, err = wireSize(e)
		}
		if err != nil {
			return got, false, err // a placeholder always encodes: a bug
		}
		if len(*out) > 0 && *size+w+1 > MaxInboxPageBytes {
			return got, true, nil
		}
		*size += w + 1 // the comma between events
		*out = append(*out, e)
	}
	return got, false, rows.Err()
}

// undeliverable replaces e's content by the typed placeholder, keeping its
// seq and event_id so the recipient's stream stays gapless, and tells the
// operators: an error log and a metric.
func (in Inbox) undeliverable(ctx context.Context, e *mesh.Envelope, code string) {
	log := in.Log
	if log == nil {
		log = slog.Default()
	}
	log.ErrorContext(ctx, "inbox event served as undeliverable", "recipient", e.To, "seq", e.Seq,
		"event_id", e.EventID, "type", e.Type, "code", code, "body_bytes", len(e.Body))
	sink := in.Metrics
	if sink == nil {
		sink = metrics.Default
	}
	sink.Emit(map[string]float64{MetricUndeliverable: 1})
	b, _ := json.Marshal(mesh.UndeliverableBody{Code: code, OriginalType: e.Type})
	e.Type, e.Body = mesh.EventUndeliverable, b
}

func wireSize(e mesh.Envelope) (int, error) {
	b, err := json.Marshal(e)
	return jsonlimit.WireSize(b), err
}

// OldestSeq is the smallest seq the outbox still holds for recipient (older
// ones were removed by the janitor after the retention); when it holds
// nothing, it is the seq the next event will get. A reader whose cursor is
// below OldestSeq-1 has missed events that are gone.
func OldestSeq(ctx context.Context, q Querier, recipient string) (int64, error) {
	var oldest int64
	err := q.QueryRowContext(ctx, oldestSeqSQL, recipient, recipient).Scan(&oldest)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, mesh.Errorf(mesh.KindNotFound, "agent_not_found", "no inbox for this agent")
	}
	return oldest, err
}

// Page is one answer of the inbox API: the wire type, defined once in api.
type Page = api.InboxPage

// Inbox serves GET /v1/inbox, including its long poll.
type Inbox struct {
	DB Querier
	// Leases takes and frees the long-poll slots (see MaxPolls). When nil,
	// DB is used if it can execute statements (*sql.DB can); otherwise
	// polls are not capped.
	Leases Execer
	// Uncapped makes waits take no slot at all: for a reader that bounds
	// its waits itself and must not use the slots an agent's own meshd
	// polls with (the A2A gateway following a caller's inbox).
	Uncapped bool
	// MaxPolls caps how many long polls one agent holds at once, across
	// every function instance (default DefaultMaxPolls): a further request
	// that would wait answers at once with what there is (an empty page),
	// so one agent cannot pin a thousand concurrent 20-second functions.
	MaxPolls int
	// MinPoll and MaxPoll bound the pause between two polls of a waiting
	// request: it starts at MinPoll and doubles up to MaxPoll while nothing
	// arrives (defaults 100 ms and 1 s). Each poll is one indexed query.
	MinPoll, MaxPoll time.Duration
	// Sleep waits for d or until ctx ends; tests may count polls through it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Clock tells the time the wait's deadline is measured by (default
	// time.Now, whose monotonic reading no wall-clock step can shift); a
	// test pairs it with a Sleep that advances it.
	Clock mesh.Clock
	// Log and Metrics receive the undeliverable reports (defaults:
	// slog.Default and metrics.Default).
	Log     *slog.Logger
	Metrics *metrics.Sink
}

// Wait returns recipient's events after the cursor. If there are none and
// wait > 0, it polls until one arrives, wait elapses or ctx ends; an expired
// wait is an empty page, not an error.
func (in Inbox) Wait(ctx context.Context, recipient string, after int64, limit int, wait time.Duration) (Page, error) {
	minPoll, maxPoll := in.MinPoll, in.MaxPoll
	if minPoll <= 0 {
		minPoll = 100 * time.Millisecond
	}
	if maxPoll < minPoll {
		maxPoll = max(minPoll, time.Second)
	}
	sleep := in.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	now := in.Clock
	if now == nil {
		now = time.Now
	}
	deadline := now().Add(wait)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-time.Second).Before(deadline) {
		deadline = dl.Add(-time.Second) // leave time to answer before the function times out
	}
	// The pause doubles from minPoll up to maxPoll, without jitter.
	pause := backoff.Policy{Base: minPoll, Max: maxPoll}
	polls := 0
	var events []mesh.Envelope
	held := false
	for {
		var err error
		if events, err = in.Read(ctx, recipient, after, limit); err != nil {
			if ctx.Err() != nil {
				// Canceled while polling (not before): the same empty page
				// as a cancel during the pause.
				events = nil
				break
			}
			return Page{}, err
		}
		left := deadline.Sub(now())
		if len(events) > 0 || left <= 0 {
			break
		}
		if !held {
			// Only a request that is about to wait takes a slot; one that
			// finds events or does not wait costs no lease statements.
			release, ok, err := in.hold(ctx, recipient, left)
			if err != nil {
				return Page{}, err
			}
			if !ok {
				break // the agent's slots are taken: answer now, hold nothing
			}
			defer release()
			held = true
		}
		polls++
		if err := sleep(ctx, min(pause.Delay(polls), left)); err != nil {
			// The client went away or the function is about to time out:
			// answer with what we have (nothing) rather than an error.
			break
		}
	}
	page := Page{Events: events, NextAfter: after}
	if n := len(events); n > 0 {
		page.NextAfter = events[n-1].Seq
	}
	var err error
	page.OldestSeq, err = OldestSeq(context.WithoutCancel(ctx), in.DB, recipient)
	return page, err
}

// DefaultMaxPolls is how many long polls of one agent are held at once
// unless Inbox.MaxPolls says otherwise: one meshd polls once at a time;
// the second slot covers a restart overlapping the old process's poll.
const DefaultMaxPolls = 2

// leaseGrace keeps a slot past its poll's deadline: long enough that a
// live request always frees it itself, short enough that the slot of a
// function instance that died comes back within seconds.
const leaseGrace = 5 * time.Second

// Execer runs statements; *sql.DB satisfies it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// The lease statements: each is one autocommitted row change on the
// primary key, so nothing is locked while a request waits. Expiry is the
// database's clock, the same for every function instance.
const (
	takeFreeSlotSQL = `INSERT IGNORE INTO inbox_polls (agent_id, slot, holder, expires_at)
VALUES (?, ?, ?, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND))`
	takeExpiredSlotSQL = `UPDATE inbox_polls SET holder = ?, expires_at = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)
WHERE agent_id = ? AND slot = ? AND expires_at < UTC_TIMESTAMP(6)`
	freeSlotSQL = `DELETE FROM inbox_polls WHERE agent_id = ? AND slot = ? AND holder = ?`
)

// hold takes one of recipient's long-poll slots for up to wait (plus a
// grace): ok is false when all are held by live polls. release frees it.
func (in Inbox) hold(ctx context.Context, recipient string, wait time.Duration) (release func(), ok bool, err error) {
	if in.Uncapped {
		return func() {}, true, nil
	}
	db := in.Leases
	if db == nil {
		if db, ok = in.DB.(Execer); !ok {
			return func() {}, true, nil
		}
	}
	slots := in.MaxPolls
	if slots <= 0 {
		slots = DefaultMaxPolls
	}
	holder := NewEventID()
	ttl := (wait + leaseGrace).Microseconds()
	for slot := range slots {
		for _, take := range []func() (sql.Result, error){
			func() (sql.Result, error) { return db.ExecContext(ctx, takeFreeSlotSQL, recipient, slot, holder, ttl) },
			func() (sql.Result, error) {
				return db.ExecContext(ctx, takeExpiredSlotSQL, holder, ttl, recipient, slot)
			},
		} {
			res, err := take()
			if err != nil {
				return nil, false, err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return nil, false, err
			}
			if n == 1 {
				return func() {
					// Freed even when the client went away; if this fails,
					// the slot expires on its own.
					ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					defer cancel()
					_, _ = db.ExecContext(ctx, freeSlotSQL, recipient, slot, holder)
				}, true, nil
			}
		}
	}
	return nil, false, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
