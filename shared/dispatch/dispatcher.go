// Package dispatch drains the outbox into Kafka, in seq order per recipient.
// It is its own package so that the HTTP functions, which write the outbox
// through package outbox alone, never link the Kafka client: only the
// dispatcher function does, and migrate, which creates the inbox topic
// through package kafka (shared/buildcheck holds both to that).
package dispatch

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/backoff"
	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/seal"
	"github.com/agentmesh/agentmesh/shared/textlimit"
)

// Publisher sends records and reports each one's outcome, in order. A
// *kgo.Client satisfies it through KafkaPublisher.
type Publisher interface {
	Publish(ctx context.Context, recs []*kgo.Record) []error
}

// A StreamPublisher is a Publisher that also takes a publish's records one
// by one, so that it produces the first while the dispatcher still seals
// the rest.
type StreamPublisher interface {
	Publisher
	// Stream starts a publish of up to n records, bounded by ctx.
	Stream(ctx context.Context, n int) PublishStream
}

// A PublishStream is one publish of a StreamPublisher: Add hands it the
// records in order, then Wait returns the error of each, in the same order,
// as Publish would.
type PublishStream interface {
	Add(rec *kgo.Record)
	Wait() []error
}

// KafkaPublisher publishes with a franz-go client (acks=all, idempotent).
type KafkaPublisher struct{ Client *kgo.Client }

// Publish produces recs and waits for every acknowledgement, but never past
// ctx: a record still unanswered when ctx ends is reported as failed with
// ctx's error. (The producer fails such records too, but only at its next
// retry, up to a retry backoff later; a record it still delivers afterwards
// is a duplicate that consumers drop by seq.)
func (p KafkaPublisher) Publish(ctx context.Context, recs []*kgo.Record) []error {
	s := p.Stream(ctx, len(recs))
	for _, r := range recs {
		s.Add(r)
	}
	return s.Wait()
}

// Stream is Publish one record at a time: each is produced as it is added.
func (p KafkaPublisher) Stream(ctx context.Context, n int) PublishStream {
	return &kafkaStream{client: p.Client, ctx: ctx, errs: make([]error, 0, n), answered: make([]bool, 0, n)}
}

// kafkaStream is a KafkaPublisher's publish in progress.
type kafkaStream struct {
	client *kgo.Client
	ctx    context.Context

	mu       sync.Mutex
	errs     []error
	answered []bool
	left     int           // added and not answered yet
	done     chan struct{} // closed by the last answer once Wait waits
	returned bool          // Wait has returned: later answers are ignored
}

func (s *kafkaStream) Add(rec *kgo.Record) {
	s.mu.Lock()
	i := len(s.errs)
	s.errs, s.answered = append(s.errs, nil), append(s.answered, false)
	s.left++
	s.mu.Unlock()
	s.client.Produce(s.ctx, rec, func(_ *kgo.Record, err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.returned {
			return
		}
		s.errs[i], s.answered[i] = err, true
		if s.left--; s.left == 0 && s.done != nil {
			close(s.done)
		}
	})
}

func (s *kafkaStream) Wait() []error {
	s.mu.Lock()
	done := make(chan struct{})
	if s.left == 0 {
		close(done)
	}
	s.done = done
	s.mu.Unlock()
	select {
	case <-done:
	case <-s.ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.returned = true
	out := make([]error, len(s.errs))
	for i := range s.errs {
		out[i] = s.errs[i]
		if !s.answered[i] {
			out[i] = fmt.Errorf("kafka: no acknowledgement: %w", s.ctx.Err())
		}
	}
	return out
}

// Dispatcher drains the outbox into Kafka. Guarantees:
//   - per recipient, events are published in seq order: a recipient is held
//     by one dispatcher at a time (its dispatch_state row, locked FOR UPDATE
//     SKIP LOCKED for the whole batch, so other dispatchers move on to other
//     recipients instead of waiting);
//   - a failing event blocks only later events of its own recipient: the
//     backoff lives on the recipient, not on the row, so no later event can
//     overtake it. An event Kafka refuses backs its recipient off 5 s × 2^n and
//     is dead-lettered after MaxAttempts (delivery='failed', still served by
//     GET /v1/inbox); Kafka being unreachable backs the recipient off
//     UnreachableBackoff and never dead-letters anything;
//   - an event whose stored body cannot be served (jsonlimit.Unservable,
//     the rule GET /v1/inbox applies too) or that cannot be sealed goes out
//     as an mesh.EventUndeliverable placeholder with its seq and event_id,
//     so one bad event never holds up its recipient or fails a batch;
//   - a dispatcher killed mid-batch rolls back: its events stay pending and are
//     published again (duplicates that meshd drops by seq);
//   - a batch is published once: a deadlock or lock wait after its publish
//     never runs the publish again, the outcome Kafka gave is settled in a
//     fresh transaction instead (see RunOnce);
//   - a batch's settle is written while Kafka takes the batch, but commits
//     only after every acknowledgement is in, and only what Kafka
//     acknowledged stays marked sent (the rest is rolled back to a savepoint
//     and settled by Kafka's answer).
//
// One Dispatcher may run several Runs at once (overlapping scheduled runs).
type Dispatcher struct {
	DB        *mysql.DB
	Publisher Publisher
	Topic     string
	Sealer    *seal.Sealer
	Clock     mesh.Clock
	Log       *slog.Logger
	Metrics   *metrics.Sink
	// Pusher, when set, gets each committed batch's published records for
	// the push channel (see Pusher); nil pushes nothing.
	Pusher Pusher

	Recipients int // recipients per batch (default DefaultRecipients)
	// BatchEvents bounds the events of one batch (default
	// DefaultBatchEvents): each held recipient takes an equal share of it,
	// so a batch of one recipient with a backlog is as large as a batch of
	// many, and the per-batch round trips and commit are paid once for all.
	BatchEvents        int
	PerRecipient       int           // at most this many events per recipient per batch, whatever its share (default BatchEvents)
	MaxAttempts        int           // attempts before dead-lettering (default 10)
	BaseBackoff        time.Duration // first retry delay after Kafka refused an event (default 5 s), doubled per attempt
	UnreachableBackoff time.Duration // retry delay after Kafka could not be reached (default 1 s)
	PublishTimeout     time.Duration // bound of one publish attempt (default DefaultPublishTimeout)
	PushDrain          time.Duration // how long the end of Run waits for queued pushes (default DefaultPushDrain)

	once sync.Once
	// cursor is the last recipient of the previous batch: the next batch
	// starts after it and wraps around, so recipients that keep receiving
	// events cannot starve the ones after them in key order.
	cursorMu sync.Mutex
	cursor   string
	pushes   pushGate
	// settleFault, set by tests only (export_test.go), runs where a batch's
	// settle starts; an error it returns fails that settle as the database
	// would (a deadlock, say).
	settleFault func() error
	// assumedSettled, set by tests only, runs once a batch's settle written
	// during its publish has returned, before the publish is waited for.
	assumedSettled func()
}

// Stats counts what one batch did.
type Stats struct {
	Recipients    int
	Sent          int
	Failed        int // publish failures (will be retried)
	DeadLetters   int
	Undeliverable int // events sent as undeliverable placeholders
}

func (s *Stats) add(o Stats) {
	s.Recipients += o.Recipients
	s.Sent += o.Sent
	s.Failed += o.Failed
	s.DeadLetters += o.DeadLetters
	s.Undeliverable += o.Undeliverable
}

// Batch bounds of a Dispatcher. A batch holds at most DefaultBatchEvents
// events (the bound of its memory and of its transaction), shared by up to
// DefaultRecipients recipients: 50 events each when all of them are busy,
// the whole batch for a recipient alone.
const (
	DefaultRecipients  = 200
	DefaultBatchEvents = 10_000
)

// Polling and retry pacing of Run.
const (
	// DefaultPublishTimeout bounds one publish attempt: Kafka acknowledges in
	// milliseconds when it is up, so this only ever cuts a broker that is not.
	DefaultPublishTimeout = 10 * time.Second
	// BusyPoll is the pause between batches while events flow (and for
	// IdleAfter after the last one), so a new event waits at most this long.
	BusyPoll = 50 * time.Millisecond
	// IdlePoll is the longest pause between batches when nothing is due.
	IdlePoll = 250 * time.Millisecond
	// IdleAfter is how long after the last event Run keeps polling at BusyPoll
	// before it backs off towards IdlePoll.
	IdleAfter = 5 * time.Second
	// errorBackoffMax caps the pause after a failed batch (database or
	// broker unreachable), so delivery resumes within a second of recovery.
	errorBackoffMax = time.Second
	// finishMargin is kept free before the caller's deadline: the work of a
	// run ends this much earlier, leaving time to emit its metrics.
	finishMargin = 2 * time.Second
)

func (d *Dispatcher) defaults() {
	d.once.Do(func() {
		if d.Clock == nil {
			d.Clock = mesh.SystemClock
		}
		if d.Log == nil {
			d.Log = slog.Default()
		}
		if d.Metrics == nil {
			d.Metrics = metrics.Default
		}
		orDefault(&d.Recipients, DefaultRecipients)
		orDefault(&d.BatchEvents, DefaultBatchEvents)
		orDefault(&d.PerRecipient, d.BatchEvents)
		orDefault(&d.MaxAttempts, 10)
		orDefault(&d.BaseBackoff, 5*time.Second)
		orDefault(&d.UnreachableBackoff, time.Second)
		orDefault(&d.PublishTimeout, DefaultPublishTimeout)
		orDefault(&d.PushDrain, DefaultPushDrain)
	})
}

// orDefault sets *p to v unless it is positive.
func orDefault[T int | time.Duration](p *T, v T) {
	if *p <= 0 {
		*p = v
	}
}

// Run drains the outbox for budget: it publishes batch after batch while
// events flow, polls every BusyPoll while they keep coming and backs off to
// IdlePoll when idle. A failed batch (database connection lost, broker
// unreachable) does not end the run: the next one follows after a short
// backoff. Run returns before ctx's deadline: after the first batch it starts
// none that could not finish in time, and it bounds every batch by that
// deadline. It returns the last error that was not a transient one, if any,
// so the invocation shows as failed while delivery went on.
func (d *Dispatcher) Run(ctx context.Context, budget time.Duration) error {
	d.defaults()
	stop := time.Now().Add(budget)
	work, cancel := ctx, context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		// The last batch may start at stop and take a publish timeout plus
		// its database round trips; the work itself ends finishMargin early.
		if last := dl.Add(-finishMargin - d.PublishTimeout - time.Second); last.Before(stop) {
			stop = last
		}
		work, cancel = context.WithDeadline(ctx, dl.Add(-finishMargin))
	}
	defer cancel()
	var total Stats
	defer func() {
		// Pushes queued by this run get a bounded moment to go out before
		// the invocation returns and the Lambda is frozen.
		pctx, cancel := d.pushDrainContext(ctx)
		d.drainPushes(pctx)
		cancel()
		d.emitRunMetrics(ctx, total)
	}()
	var lastErr error
	lastActive := time.Now()
	// After a failed batch the pause doubles from 50 ms up to
	// errorBackoffMax, without jitter; progress starts it over.
	errBackoff := backoff.Policy{Base: 50 * time.Millisecond, Max: errorBackoffMax}
	failures := 0 // consecutive failed batches
	// The first batch runs whatever the budget; it is still bounded by work.
	for first := true; (first || time.Now().Before(stop)) && work.Err() == nil; first = false {
		st, err := d.RunOnce(work)
		total.add(st)
		pause := BusyPoll
		switch {
		case err != nil && work.Err() != nil:
			return lastErr
		case err != nil:
			failures++
			pause = errBackoff.Delay(failures)
			if transient(err) {
				d.Log.Warn("dispatcher batch failed; retrying in this run", "err", err, "retry_in", pause)
			} else {
				lastErr = err
				d.Log.Error("dispatcher batch failed; retrying in this run", "err", err, "retry_in", pause)
			}
		case st.Sent > 0 || st.Undeliverable > 0 || st.DeadLetters > 0:
			failures = 0
			lastActive = time.Now()
			continue // more may be waiting: go again at once
		case st.Failed > 0 && st.Failed == st.Recipients:
			// Nothing got through (broker unreachable): the recipients are
			// backed off; pace the retries like any failure.
			failures++
			pause = errBackoff.Delay(failures)
		default:
			failures = 0
			if idle := time.Since(lastActive); idle > IdleAfter {
				// Back off smoothly from BusyPoll to IdlePoll as idleness grows.
				pause = min(BusyPoll*time.Duration(1+(idle-IdleAfter)/IdleAfter), IdlePoll)
			}
		}
		select {
		case <-work.Done():
			return lastErr
		case <-time.After(min(pause, time.Until(stop))):
		}
	}
	return lastErr
}

// transient reports whether a batch error is a passing condition (database
// unreachable, lock contention) rather than a bug.
func transient(err error) bool {
	return mysql.IsUnavailable(err) || mysql.IsRetryable(err)
}

// emitRunMetrics emits what a run did and the age of the oldest pending
// event, the latter bounded so a database outage cannot hold the run past
// its deadline.
func (d *Dispatcher) emitRunMetrics(ctx context.Context, total Stats) {
	d.Metrics.Emit(map[string]float64{"OutboxSent": float64(total.Sent), "OutboxPublishFailures": float64(total.Failed)})
	end := time.Now().Add(finishMargin / 2)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-finishMargin/4).Before(end) {
		end = dl.Add(-finishMargin / 4)
	}
	qctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	defer cancel()
	if age, err := d.oldestPendingAge(qctx); err == nil {
		d.Metrics.Emit(map[string]float64{"OutboxOldestPendingSeconds": age.Seconds()})
	}
}

func (d *Dispatcher) oldestPendingAge(ctx context.Context) (time.Duration, error) {
	var oldest sql.NullTime
	if err := d.DB.QueryRowContext(ctx, "SELECT MIN(e.occurred_at) FROM "+outbox.PendingEventsSQL+" p JOIN outbox_events e ON e.recipient = p.recipient AND e.seq = p.seq").Scan(&oldest); err != nil || !oldest.Valid {
		return 0, err
	}
	return d.Clock().Sub(oldest.Time), nil
}

// RunOnce publishes one batch: up to Recipients due recipients, each with its
// share of BatchEvents (at most PerRecipient) pending events in seq order.
//
// A batch is published at most once per call. The transaction that locks,
// reads, publishes and settles it is retried by InTx on a deadlock or lock
// wait only until it has published; a retryable failure after that (in the
// settle or at the commit) settles the outcome Kafka already gave in a fresh
// transaction (resettle) and never publishes again.
func (d *Dispatcher) RunOnce(ctx context.Context) (Stats, error) {
	d.defaults()
	now := d.Clock()
	due, legacy, err := d.dueRecipients(ctx, now)
	if err != nil || len(due) == 0 {
		return Stats{}, err
	}
	var st Stats
	var published []pushed
	var out *outcome // set once Publish has returned: Kafka has the batch
	err = d.DB.InTx(ctx, func(tx *sql.Tx) error {
		if out != nil {
			// InTx retries a deadlock by running this again, which would
			// publish the batch a second time: stop, and resettle below.
			return errPublished
		}
		st, published = Stats{}, nil
		held, err := lockRecipients(ctx, tx, due, now)
		if err != nil || len(held) == 0 {
			return err
		}
		if err := queueLegacy(ctx, tx, held, legacy); err != nil {
			return err
		}
		// Settle times (a dead letter's sent_at) are read once the
		// recipients are held, so per recipient they grow with seq even
		// across dispatchers.
		o := &outcome{settledAt: d.Clock(), batches: make([]batch, 0, len(held))}
		o.st.Recipients = len(held)
		pending, err := pendingRows(ctx, tx, held, min(d.PerRecipient, max(1, d.BatchEvents/len(held))))
		if err != nil {
			return err
		}
		// The settle is written while the batch is sealed and published:
		// it assumes every row goes out (the usual case), behind a
		// savepoint, and the commit waits for Kafka's answer. A batch that
		// did not go out whole rolls back to the savepoint and is settled
		// by what Kafka said. Nothing commits before every ack is in.
		assumed := make([]batch, len(held))
		for i, h := range held {
			o.batches = append(o.batches, batch{holder: h, rows: pending[i], errs: make([]error, len(pending[i]))})
			assumed[i] = batch{holder: h, rows: pending[i], errs: make([]error, len(pending[i])), sent: len(pending[i])}
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT dispatch_assumed"); err != nil {
			return err
		}
		publishing := make(chan struct{})
		var crashed any
		go func() {
			defer close(publishing)
			// A panic while publishing is raised again in this goroutine,
			// where InTx rolls the transaction back, as it was before the
			// publish ran alongside the settle.
			defer func() { crashed = recover() }()
			d.buildAndPublish(ctx, o)
		}()
		var ast Stats
		assumedErr := d.settleAll(ctx, tx, o, assumed, &ast, nil)
		if d.assumedSettled != nil {
			d.assumedSettled()
		}
		<-publishing
		if crashed != nil {
			panic(crashed)
		}
		// Kafka has (some of) the batch from here on: this transaction is
		// never run again (see errPublished).
		out = o
		if assumedErr != nil {
			return assumedErr
		}
		st, published = o.st, nil
		if wentOutWhole(o.batches) {
			st.Sent = ast.Sent
			published = d.pushedOf(o, o.batches)
			return nil
		}
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT dispatch_assumed"); err != nil {
			// The failed publishes still count in the run's metrics, as
			// settle would have counted them.
			for _, b := range o.batches {
				if sentPrefix(b.errs) < len(b.rows) {
					st.Failed++
				}
			}
			return err
		}
		return d.settleAll(ctx, tx, o, o.batches, &st, &published)
	})
	if errors.Is(err, errPublished) {
		// The transaction that published failed retryably after the publish.
		st, published, err = d.resettle(ctx, out)
	}
	if err != nil {
		return st, err
	}
	// Only now, committed: a rolled-back batch pushes nothing.
	if n := d.push(published); n > 0 {
		d.Log.Warn("push handoff full; records not pushed (hosts fetch them from the inbox)", "records", n)
		d.Metrics.Emit(map[string]float64{"PushDropped": float64(n)})
	}
	// Emitted per batch, after the commit, so the alarms fire at once.
	if st.DeadLetters > 0 {
		d.Metrics.Emit(map[string]float64{"OutboxDeadLetters": float64(st.DeadLetters)})
	}
	if st.Undeliverable > 0 {
		d.Metrics.Emit(map[string]float64{"OutboxUndeliverable": float64(st.Undeliverable)})
	}
	return st, nil
}

// errPublished stops InTx from running a batch's transaction again once it
// has published. It is not retryable, so InTx returns it at once.
var errPublished = errors.New("dispatch: batch already published; settling its outcome")

// outcome is a published batch: what Kafka said about each record, kept so
// that a failed settle can be redone without publishing again.
type outcome struct {
	settledAt time.Time
	batches   []batch
	recs      []*kgo.Record
	st        Stats // Recipients and Undeliverable, known before the settle
}

// settleAll settles bs (batches of o) in tx, adding to st what it marks and
// to published the records to push once tx commits.
func (d *Dispatcher) settleAll(ctx context.Context, tx *sql.Tx, o *outcome, bs []batch, st *Stats, published *[]pushed) error {
	if d.settleFault != nil {
		if err := d.settleFault(); err != nil {
			return err
		}
	}
	if err := d.markSent(ctx, tx, bs, o.settledAt, st); err != nil {
		return err
	}
	for _, b := range bs {
		if err := d.settle(ctx, tx, b.holder, b.rows, b.errs, o.settledAt, st); err != nil {
			return err
		}
	}
	if published != nil {
		*published = append(*published, d.pushedOf(o, bs)...)
	}
	return nil
}

// pushedOf lists what markSent marks sent of bs, the prefix of each batch
// Kafka acknowledged, for the push channel (nil without a Pusher).
func (d *Dispatcher) pushedOf(o *outcome, bs []batch) []pushed {
	if d.Pusher == nil {
		return nil
	}
	var out []pushed
	for _, b := range bs {
		for i := 0; i < b.sent && b.errs[i] == nil; i++ {
			out = append(out, pushed{agentID: b.recipient, seq: b.rows[i].env.Seq, value: o.recs[b.first+i].Value})
		}
	}
	return out
}

// buildAndPublish seals every batch of o into o.recs and publishes them,
// recording each row's outcome in its batch's errs. A recipient whose row
// cannot be built, not even as a placeholder, stops at that row: nothing
// after it is published.
//
// Sealing is most of the dispatcher's own CPU (make bench's relay stage),
// so the rows are sealed in runs of sealRun on up to GOMAXPROCS goroutines
// while this one hands the records, in order, to a StreamPublisher as each
// run is ready; any other Publisher gets them all at once.
func (d *Dispatcher) buildAndPublish(ctx context.Context, o *outcome) {
	var rows []row
	for _, b := range o.batches {
		rows = append(rows, b.rows...)
	}
	pctx, cancel := context.WithTimeout(ctx, d.PublishTimeout)
	defer cancel()
	stream := streamOf(pctx, d.Publisher, len(rows))
	built := d.buildAll(rows)
	k := 0
	for i := range o.batches {
		b := &o.batches[i]
		b.first = len(o.recs)
		n := len(b.rows)
		for j := range n {
			r := built(k + j)
			if r.err != nil {
				b.rows, b.errs = b.rows[:j+1], b.errs[:j+1]
				b.errs[j] = r.err
				break
			}
			if r.placeholder {
				o.st.Undeliverable++
			}
			o.recs = append(o.recs, r.rec)
			stream.Add(r.rec)
			b.sent++
		}
		k += n
	}
	errs := stream.Wait()
	for _, b := range o.batches {
		copy(b.errs, errs[b.first:b.first+b.sent])
	}
}

// streamOf is p's stream of up to n records, or, for a Publisher that is
// not a StreamPublisher, one that publishes them all at once in Wait.
func streamOf(ctx context.Context, p Publisher, n int) PublishStream {
	if sp, ok := p.(StreamPublisher); ok {
		return sp.Stream(ctx, n)
	}
	return &batchStream{p: p, ctx: ctx, recs: make([]*kgo.Record, 0, n)}
}

// batchStream is the PublishStream of a plain Publisher.
type batchStream struct {
	p    Publisher
	ctx  context.Context
	recs []*kgo.Record
}

func (s *batchStream) Add(rec *kgo.Record) { s.recs = append(s.recs, rec) }
func (s *batchStream) Wait() []error       { return s.p.Publish(s.ctx, s.recs) }

// builtRecord is buildRecord's answer for one row.
type builtRecord struct {
	rec         *kgo.Record
	placeholder bool
	err         error
}

// sealRun is the rows one sealing goroutine takes at a time.
const sealRun = 256

// buildAll starts buildRecord for every row, in runs of sealRun on up to
// GOMAXPROCS goroutines, and returns a function that waits for rows[i]'s
// answer and returns it. A panic of buildRecord is raised again by that
// function, in the caller's goroutine.
func (d *Dispatcher) buildAll(rows []row) func(i int) builtRecord {
	out := make([]builtRecord, len(rows))
	runs := (len(rows) + sealRun - 1) / sealRun
	ready := make([]chan struct{}, runs)
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	type crash struct{ v any }
	var next atomic.Int64
	var crashed atomic.Value // a crash
	work := func() {
		for {
			c := int(next.Add(1) - 1)
			if c >= runs {
				return
			}
			func() {
				defer close(ready[c])
				defer func() {
					if p := recover(); p != nil {
						crashed.CompareAndSwap(nil, crash{p})
					}
				}()
				for i := c * sealRun; i < min((c+1)*sealRun, len(rows)); i++ {
					out[i].rec, out[i].placeholder, out[i].err = d.buildRecord(rows[i])
				}
			}()
		}
	}
	for range min(runtime.GOMAXPROCS(0), runs) {
		go work()
	}
	return func(i int) builtRecord {
		<-ready[i/sealRun]
		if c, ok := crashed.Load().(crash); ok {
			panic(c.v)
		}
		return out[i]
	}
}

// wentOutWhole reports whether every row of bs was built and acknowledged:
// the outcome the settle written during the publish assumed.
func wentOutWhole(bs []batch) bool {
	for _, b := range bs {
		if b.sent != len(b.rows) || sentPrefix(b.errs) != len(b.errs) {
			return false
		}
	}
	return true
}

// resettle settles a published batch whose own transaction failed after the
// publish, in a fresh transaction that publishes nothing, so InTx may retry
// it (a bounded number of times). It re-locks the recipients, SKIP LOCKED
// like any batch: one held by another dispatcher is that one's to settle.
// A recipient whose first row of the batch is no longer pending has been
// published and settled again since the rollback (an overlapping run): its
// state is left alone. Otherwise its rows are all still pending, and settle
// marks exactly those (it deletes queue rows, and dead-letters only a row
// it took out of the queue).
//
// If this fails too, the rows stay pending and a later run publishes them
// again: delivery is at least once, and meshd drops the duplicates by seq.
func (d *Dispatcher) resettle(ctx context.Context, o *outcome) (Stats, []pushed, error) {
	byRecipient := make(map[string]int, len(o.batches))
	due := make([]string, 0, len(o.batches))
	for i, b := range o.batches {
		if len(b.rows) > 0 {
			byRecipient[b.recipient] = i
			due = append(due, b.recipient)
		}
	}
	var st Stats
	var published []pushed
	err := d.DB.InTx(ctx, func(tx *sql.Tx) error {
		st, published = o.st, nil
		if len(due) == 0 {
			return nil
		}
		held, err := relockRecipients(ctx, tx, due)
		if err != nil {
			return err
		}
		bs := make([]batch, 0, len(held))
		for _, h := range held {
			b := o.batches[byRecipient[h.recipient]]
			var still bool
			if err := tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM outbox_queue WHERE recipient = ? AND seq = ?)", h.recipient, b.rows[0].env.Seq).Scan(&still); err != nil {
				return err
			}
			if still {
				b.holder = h // its attempts as they are now
				bs = append(bs, b)
			}
		}
		return d.settleAll(ctx, tx, o, bs, &st, &published)
	})
	if err != nil {
		return Stats{}, nil, fmt.Errorf("dispatch: settling a published batch (its rows stay pending and are published again): %w", err)
	}
	return st, published, nil
}

// relockRecipients locks the dispatch_state rows of recipients no other
// dispatcher holds, whatever their backoff (resettle's batch was due).
func relockRecipients(ctx context.Context, tx *sql.Tx, recipients []string) ([]holder, error) {
	args := make([]any, len(recipients))
	for i, r := range recipients {
		args[i] = r
	}
	return scanHolders(tx.QueryContext(ctx, "SELECT recipient, attempts FROM dispatch_state WHERE recipient IN ("+mysql.Placeholders(len(recipients))+") ORDER BY recipient FOR UPDATE SKIP LOCKED", args...))
}

// batch is one held recipient's share of a publish: its rows, the outcome of
// each, and where its records start in the published slice.
type batch struct {
	holder
	rows  []row
	errs  []error
	first int // index of its first record in the published slice
	sent  int // records of it in the published slice
}

// dueRecipients finds up to Recipients recipients with pending events whose
// backoff has passed, round robin from the cursor, and gives the ones seen
// for the first time a dispatch_state row to lock. Rows that exist are left
// alone: even an INSERT IGNORE of an existing row waits for the dispatcher
// holding it, which would undo SKIP LOCKED.
//
// Its cost follows the recipients it looks at, not the backlog: candidates
// come from a loose index scan (one index entry per recipient), their
// backoff from dispatch_state by primary key, and one call looks at no more
// than maxScanned candidates. A backlog of a million pending events costs a
// batch what fifty recipients cost. legacy holds the due recipients with
// events still marked pending in outbox_events (see pendingAfterSQL).
func (d *Dispatcher) dueRecipients(ctx context.Context, now time.Time) (due []string, legacy map[string]bool, err error) {
	d.cursorMu.Lock()
	start := d.cursor
	d.cursorMu.Unlock()
	page := 2 * d.Recipients
	maxScanned := 20 * d.Recipients
	var out, fresh []string
	seen := map[string]bool{}
	after, wrapped := start, start == ""
	last, scanned := "", 0
	for len(out) < d.Recipients && scanned < maxScanned {
		cands, err := pendingRecipients(ctx, d.DB, after, page, seen)
		if err != nil {
			return nil, nil, err
		}
		end := len(cands) < page
		if wrapped && start != "" {
			// The second lap stops where the first began.
			for i, r := range cands {
				if r > start {
					cands, end = cands[:i], true
					break
				}
			}
		}
		if len(cands) > 0 {
			due, err := dueStates(ctx, d.DB, cands, now)
			if err != nil {
				return nil, nil, err
			}
			for _, r := range cands {
				if len(out) == d.Recipients {
					break
				}
				last = r
				scanned++
				switch ok, known := due[r]; {
				case !known:
					out, fresh = append(out, r), append(fresh, r)
				case ok:
					out = append(out, r)
				}
			}
			after = cands[len(cands)-1]
		}
		if end {
			if wrapped {
				break
			}
			wrapped, after = true, ""
		}
	}
	// The next batch starts after the last recipient this one looked at, so
	// recipients that keep receiving events cannot starve the ones after them.
	d.cursorMu.Lock()
	d.cursor = last
	d.cursorMu.Unlock()
	for _, r := range out {
		if seen[r] {
			if legacy == nil {
				legacy = map[string]bool{}
			}
			legacy[r] = true
		}
	}
	if len(fresh) == 0 {
		return out, legacy, nil
	}
	args := make([]any, 0, len(fresh)*2)
	vals := make([]string, len(fresh))
	for i, r := range fresh {
		vals[i] = "(?, 0, ?)"
		args = append(args, r, now)
	}
	_, err = d.DB.ExecContext(ctx, "INSERT IGNORE INTO dispatch_state (recipient, attempts, next_attempt_at) VALUES "+strings.Join(vals, ","), args...)
	return out, legacy, err
}

const (
	// pendingAfterSQL lists the recipients with pending events after a key,
	// in key order, each with whether it has events still marked pending in
	// outbox_events (legacy: see the migration 0013_outbox_queue.sql), which
	// the batch first moves to the queue (queueLegacy). Both halves are loose
	// index scans ("Using index for group-by"): one index dive per recipient,
	// on outbox_queue's key and on the index outbox_pending (delivery,
	// recipient, seq), whose 'pending' part is empty but for a deploy's
	// switch-over or a redrive.
	pendingAfterSQL = `SELECT recipient, MAX(legacy) FROM (
(SELECT recipient, 0 AS legacy FROM outbox_queue WHERE recipient > ? GROUP BY recipient ORDER BY recipient LIMIT ?)
UNION ALL
(SELECT recipient, 1 AS legacy FROM outbox_events WHERE delivery = 'pending' AND recipient > ?
GROUP BY delivery, recipient ORDER BY delivery, recipient LIMIT ?)) p GROUP BY recipient ORDER BY recipient LIMIT ?`
	// dueStatesSQL reads the backoff of candidates that have a state row.
	dueStatesSQL = `SELECT recipient, next_attempt_at <= ? FROM dispatch_state WHERE recipient IN (?)`
)

// pendingRecipients returns up to limit recipients with pending events after
// the key, in key order, and adds to legacy those with events still marked
// pending in outbox_events.
func pendingRecipients(ctx context.Context, db *mysql.DB, after string, limit int, legacy map[string]bool) ([]string, error) {
	rows, err := db.QueryContext(ctx, pendingAfterSQL, after, limit, after, limit, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		var old bool
		if err := rows.Scan(&r, &old); err != nil {
			return nil, err
		}
		if old {
			legacy[r] = true
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// dueStates maps each candidate with a dispatch_state row to whether its
// backoff has passed; candidates without a row are absent (never tried: due).
func dueStates(ctx context.Context, db *mysql.DB, cands []string, now time.Time) (map[string]bool, error) {
	args := make([]any, 0, len(cands)+1)
	args = append(args, now)
	for _, r := range cands {
		args = append(args, r)
	}
	rows, err := db.QueryContext(ctx, strings.Replace(dueStatesSQL, "IN (?)", "IN ("+mysql.Placeholders(len(cands))+")", 1), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]bool, len(cands))
	for rows.Next() {
		var r string
		var due bool
		if err := rows.Scan(&r, &due); err != nil {
			return nil, err
		}
		out[r] = due
	}
	return out, rows.Err()
}

type holder struct {
	recipient string
	attempts  int
}

// queueLegacySQL moves the events of the held recipients (IN (?)) that
// are still marked pending in outbox_events into the queue, and
// unmarkLegacySQL then marks them as the queue's events are marked
// (outbox.SentDelivery): events written by the previous version's
// functions during a deploy, or put back by a redrive. They move whole,
// under the recipients' locks, before their queues are read, so the queue
// stays in seq order with them in it.
const (
	queueLegacySQL = `INSERT IGNORE INTO outbox_queue (recipient, seq)
SELECT recipient, seq FROM outbox_events FORCE INDEX (outbox_pending) WHERE delivery = 'pending' AND recipient IN (?)`
	unmarkLegacySQL = `UPDATE outbox_events FORCE INDEX (outbox_pending) SET delivery = '` + outbox.SentDelivery + `' WHERE delivery = 'pending' AND recipient IN (?)`
)

// queueLegacy runs queueLegacySQL and unmarkLegacySQL for the held
// recipients in legacy.
func queueLegacy(ctx context.Context, tx *sql.Tx, held []holder, legacy map[string]bool) error {
	var rs []any
	for _, h := range held {
		if legacy[h.recipient] {
			rs = append(rs, h.recipient)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	in := "IN (" + mysql.Placeholders(len(rs)) + ")"
	for _, q := range []string{queueLegacySQL, unmarkLegacySQL} {
		if _, err := tx.ExecContext(ctx, strings.Replace(q, "IN (?)", in, 1), rs...); err != nil {
			return err
		}
	}
	return nil
}

// lockRecipients takes the recipients no other dispatcher holds.
func lockRecipients(ctx context.Context, tx *sql.Tx, due []string, now time.Time) ([]holder, error) {
	args := make([]any, 0, len(due)+1)
	for _, r := range due {
		args = append(args, r)
	}
	args = append(args, now)
	return scanHolders(tx.QueryContext(ctx, "SELECT recipient, attempts FROM dispatch_state WHERE recipient IN ("+mysql.Placeholders(len(due))+") AND next_attempt_at <= ? ORDER BY recipient FOR UPDATE SKIP LOCKED", args...))
}

// scanHolders reads the (recipient, attempts) rows of a locking query.
func scanHolders(rows *sql.Rows, err error) ([]holder, error) {
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

// pendingRowsSQL reads one recipient's next pending events in seq order:
// the first rows of its queue, each joined to its event by the unique key
// (recipient, seq). pendingRows sends one per held recipient in a single
// UNION ALL statement. The join order is fixed: inside a UNION the optimizer
// does not weigh the LIMIT and could start from the events.
const pendingRowsSQL = `(SELECT e.recipient, e.seq, e.event_id, e.type, e.sender, e.task_id, e.context_id, e.group_id, e.message_id, e.key_epoch, e.body, e.trace_id, e.occurred_at
FROM outbox_queue q STRAIGHT_JOIN outbox_events e ON e.recipient = q.recipient AND e.seq = q.seq WHERE q.recipient = ? ORDER BY q.seq LIMIT ?)`

// pendingRows returns up to limit pending events of each held recipient, in
// seq order, in one round trip: out[i] are held[i]'s.
func pendingRows(ctx context.Context, tx *sql.Tx, held []holder, limit int) ([][]row, error) {
	out := make([][]row, len(held))
	if len(held) == 0 {
		return out, nil
	}
	index := make(map[string]int, len(held))
	args := make([]any, 0, 2*len(held))
	for i, h := range held {
		index[h.recipient] = i
		args = append(args, h.recipient, limit)
	}
	rows, err := tx.QueryContext(ctx, strings.Repeat(pendingRowsSQL+" UNION ALL ", len(held)-1)+pendingRowsSQL, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var r row
		var group, trace sql.NullString
		if err := rows.Scan(&r.env.To, &r.env.Seq, &r.env.EventID, &r.env.Type, &r.env.From, &r.env.TaskID, &r.env.ContextID,
			&group, &r.env.MessageID, &r.env.KeyEpoch, &r.body, &trace, &r.env.OccurredAt); err != nil {
			return nil, err
		}
		i, ok := index[r.env.To]
		if !ok {
			return nil, fmt.Errorf("dispatch: pending rows: unexpected recipient %q", r.env.To)
		}
		r.env.V, r.env.To = mesh.EnvelopeVersion, held[i].recipient
		r.env.GroupID, r.traceID = group.String, trace.String
		out[i] = append(out[i], r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// A UNION ALL promises no order of its rows: each recipient's are put
	// in seq order here (they nearly always arrive in it already).
	for _, rs := range out {
		if !slices.IsSortedFunc(rs, bySeq) {
			slices.SortFunc(rs, bySeq)
		}
	}
	return out, nil
}

func bySeq(a, b row) int { return cmp.Compare(a.env.Seq, b.env.Seq) }

// Codes of UndeliverableBody. Which stored bodies cannot be served is
// decided by jsonlimit.Unservable, the rule GET /v1/inbox and task reads
// apply too, so an event is never whole on one path and a placeholder on the
// other.
const (
	UndeliverableUnencodable = jsonlimit.Unencodable // the stored body is not valid JSON/UTF-8
	UndeliverableTooDeep     = jsonlimit.TooDeep     // the stored body nests deeper than jsonlimit.MaxServedDepth
	UndeliverableUnsealable  = "unsealable"          // sealing or encoding the record failed
)

// buildRecord builds r's Kafka record, or, when r cannot be served as it is,
// a placeholder of type mesh.EventUndeliverable with r's seq and event_id
// (placeholder true). The error is set only when not even the placeholder
// could be built.
func (d *Dispatcher) buildRecord(r row) (rec *kgo.Record, placeholder bool, err error) {
	var cause error
	code := jsonlimit.Unservable(r.body)
	if code == "" {
		// Unservable has checked the body is valid JSON: it is not scanned
		// again to be sealed.
		if rec, cause = d.record(r, true); cause == nil {
			return rec, false, nil
		}
		code = UndeliverableUnsealable
	} else {
		cause = fmt.Errorf("stored body cannot be served: %s", code)
	}
	d.Log.Error("outbox event cannot be served; publishing an undeliverable placeholder",
		"recipient", r.env.To, "seq", r.env.Seq, "event_id", r.env.EventID, "type", r.env.Type, "code", code, "err", cause)
	body, _ := json.Marshal(mesh.UndeliverableBody{Code: code, OriginalType: r.env.Type})
	p := r
	p.env.Type, p.body = mesh.EventUndeliverable, body
	rec, err = d.record(p, false)
	if err != nil {
		return nil, false, fmt.Errorf("undeliverable placeholder for seq %d: %w (original: %v)", r.env.Seq, err, cause)
	}
	return rec, true, nil
}

// record builds the Kafka record of envelope v2: key = the recipient's
// opaque routing id, value = {v, key_epoch, sealed} with the whole event
// (ids, trace id, body) sealed and padded to a size bucket, and no headers:
// the shared topic names nobody.
func (d *Dispatcher) record(r row, validBody bool) (*kgo.Record, error) {
	env := r.env
	env.Body, env.TraceID = r.body, r.traceID
	seal := d.Sealer.SealEvent
	if validBody {
		seal = d.Sealer.SealValidEvent
	}
	key, value, err := seal(env)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: d.Topic, Key: key, Value: value}, nil
}

// unreachable reports whether a publish error means Kafka could not be
// reached or did not answer in time (a condition of the cluster, not of the
// event), as opposed to Kafka refusing this record.
func unreachable(err error) bool {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrRecordRetries) ||
		errors.Is(err, kgo.ErrClientClosed) || errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// sentPrefix is how many of rows, from the first, Kafka acknowledged.
func sentPrefix(errs []error) int {
	ok := 0
	for ok < len(errs) && errs[ok] == nil {
		ok++
	}
	return ok
}

// markSentChunk bounds the recipients of one markSent text, so that its
// size stays small (a batch holds up to DefaultRecipients of them).
const markSentChunk = 200

// unqueueSQL deletes one recipient's published range from the queue. A
// batch's ranges go as one text of such statements (the pool allows
// multi-statement texts): each is a range on the primary key, where one
// statement with an OR of the ranges costs MariaDB an evaluation of every
// range for every row it reads (measured alone, 10,000 queue rows of 200
// recipients: 19-20 ms against 36-38 ms; the UPDATE of the same events'
// delivery and sent_at that settled them before the queue took 117-153 ms
// for 10,000 rows of 50 recipients). Deleting a row that is no longer
// there does nothing, so a resettle marks exactly what is still pending.
const unqueueSQL = "DELETE FROM outbox_queue WHERE recipient = ? AND seq BETWEEN ? AND ?;"

// markSent takes the published prefix of every batch of bs out of the
// queue, and clears the backoff of the recipients whose batch went out
// whole. Failures are settle's.
func (d *Dispatcher) markSent(ctx context.Context, tx *sql.Tx, bs []batch, now time.Time, st *Stats) error {
	var ranges [][3]any
	var reset []any
	for _, b := range bs {
		ok := sentPrefix(b.errs)
		if ok > 0 {
			ranges = append(ranges, [3]any{b.recipient, b.rows[0].env.Seq, b.rows[ok-1].env.Seq})
		}
		st.Sent += ok
		if ok == len(b.rows) && b.attempts != 0 {
			reset = append(reset, b.recipient)
		}
	}
	for len(ranges) > 0 {
		chunk := ranges[:min(markSentChunk, len(ranges))]
		ranges = ranges[len(chunk):]
		args := make([]any, 0, 3*len(chunk))
		for _, r := range chunk {
			args = append(args, r[:]...)
		}
		if _, err := tx.ExecContext(ctx, strings.Repeat(unqueueSQL, len(chunk)), args...); err != nil {
			return err
		}
	}
	if len(reset) > 0 {
		if _, err := tx.ExecContext(ctx, "UPDATE dispatch_state SET attempts = 0, last_error = NULL, next_attempt_at = ? WHERE recipient IN ("+mysql.Placeholders(len(reset))+")", append([]any{now}, reset...)...); err != nil {
			return err
		}
	}
	return nil
}

// settle backs the recipient off at its first failure (markSent has marked
// the published prefix before it sent): UnreachableBackoff when Kafka could not be reached (no
// attempt is counted: an outage must not dead-letter events), else 5 s × 2^n,
// dead-lettering that event after MaxAttempts. A dead letter's sent_at is
// when it was given up on: the janitor expires it with the sent rows around
// it, so retention always leaves a clean prefix.
func (d *Dispatcher) settle(ctx context.Context, tx *sql.Tx, h holder, rows []row, errs []error, now time.Time, st *Stats) error {
	ok := sentPrefix(errs)
	if ok == len(rows) {
		return nil
	}
	st.Failed++
	head := rows[ok].env
	// last_error is a VARCHAR(500) of utf8mb4: a cut through a character (or
	// an invalid byte in the error) would make strict mode refuse the UPDATE
	// and roll back the whole batch, at every run.
	msg := textlimit.Truncate(strings.ToValidUTF8(errs[ok].Error(), "\uFFFD"), maxErrorBytes)
	if unreachable(errs[ok]) {
		attempts := h.attempts
		if ok > 0 {
			attempts = 0 // progress was made: the head is a new event
		}
		next := now.Add(d.UnreachableBackoff)
		d.Log.Warn("outbox publish failed: Kafka unreachable; recipient backs off", "recipient", h.recipient, "seq", head.Seq, "retry_at", next, "err", msg)
		_, err := tx.ExecContext(ctx, "UPDATE dispatch_state SET attempts = ?, last_error = ?, next_attempt_at = ? WHERE recipient = ?", attempts, msg, next, h.recipient)
		return err
	}
	attempts := h.attempts + 1
	if ok > 0 {
		attempts = 1 // progress was made: the head is a new event
	}
	if attempts >= d.MaxAttempts {
		if _, err := tx.ExecContext(ctx, deadLetterSQL, msg, now, h.recipient, head.Seq, h.recipient, head.Seq); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, unqueueSQL, h.recipient, head.Seq, head.Seq); err != nil {
			return err
		}
		st.DeadLetters++
		d.Log.Error("outbox event dead-lettered", "recipient", h.recipient, "seq", head.Seq, "event_id", head.EventID, "attempts", attempts, "err", msg)
		_, err := tx.ExecContext(ctx, "UPDATE dispatch_state SET attempts = 0, last_error = ?, next_attempt_at = ? WHERE recipient = ?", msg, now, h.recipient)
		return err
	}
	next := now.Add(backoff.Policy{Base: d.BaseBackoff}.Delay(attempts))
	d.Log.Warn("outbox publish failed; recipient backs off", "recipient", h.recipient, "seq", head.Seq, "attempt", attempts, "retry_at", next, "err", msg)
	_, err := tx.ExecContext(ctx, "UPDATE dispatch_state SET attempts = ?, last_error = ?, next_attempt_at = ? WHERE recipient = ?", attempts, msg, next, h.recipient)
	return err
}

// deadLetterSQL dead-letters one event: marked failed with its error and
// the time it was given up on while it is still queued (an event no longer
// queued, after an overlapping run, is left alone); then unqueueSQL takes
// it out of the queue.
const deadLetterSQL = `UPDATE outbox_events SET delivery = 'failed', last_error = ?, sent_at = ?
WHERE recipient = ? AND seq = ? AND EXISTS (SELECT 1 FROM outbox_queue q WHERE q.recipient = ? AND q.seq = ?)`

// maxErrorBytes bounds a stored last_error (a VARCHAR(500): 500 bytes are at
// most 500 characters).
const maxErrorBytes = 500

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

// ScheduledBudget is how long one scheduled invocation keeps draining. The
// schedule fires every minute and the function's timeout (90 s in
// template.yaml) leaves room for the last batch after the budget, so each run
// overlaps the next by a couple of seconds: on AWS and in the local stack
// alike, some run is draining at every second of every minute.
const ScheduledBudget = 62 * time.Second

// Job is the scheduled unit of work of the DispatcherFunction, the same in
// Lambda and in the local stack.
func (d *Dispatcher) Job(ctx context.Context) error { return d.Run(ctx, ScheduledBudget) }
