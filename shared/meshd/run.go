// Package meshd is the agent-host daemon's logic: it delivers the agent's
// events to a handler in seq order, exactly once per marked event, from the
// agent's own Kafka partition (or the inbox API when Kafka is out of reach),
// filling gaps from the inbox API and persisting its progress atomically.
//
// Everything is configured through Config and Run has no global state, so
// it can run in-process in tests and embedders.
package meshd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// Delivery modes.
const (
	ModeKafka = "kafka" // consume the agent's partition; fail over to nothing
	ModePoll  = "poll"  // long-poll GET /v1/inbox only
	ModeAuto  = "auto"  // kafka when the brokers answer within ProbeTimeout, else poll
)

// Config is everything Run needs. API, StateDir and Handler are required.
type Config struct {
	API      *meshclient.Client
	StateDir string
	Handler  Handler
	Log      *slog.Logger // default slog.Default()
	// InstanceID identifies this process in heartbeats; random when empty.
	// A new one after a restart lets a drained agent come back.
	InstanceID string
	Mode       string // ModeAuto when empty

	HeartbeatEvery time.Duration // default 30 s
	// StallAfter: when heartbeats report a newer seq than handled and
	// nothing was handled for this long, catch up through the inbox API
	// (a missing newest event never shows up as a gap). Default 60 s.
	StallAfter time.Duration
	PollWait   time.Duration // inbox long-poll in poll mode; default 20 s
	PageSize   int           // inbox page size; default 100
	// ProbeTimeout bounds the broker check of auto mode; default 5 s.
	ProbeTimeout time.Duration
	// RetryBase and RetryMax bound the backoff between attempts of a failing
	// handler and of failed API calls; defaults 1 s and 1 min.
	RetryBase, RetryMax time.Duration
	// FlushEvery bounds how long a consumed-but-skipped Kafka offset (records
	// of other agents, duplicates) stays unpersisted; default 5 s. Handled
	// events are persisted at once.
	FlushEvery time.Duration

	// KafkaBrokers and KafkaTopic override what the token says (e.g. when
	// the host reaches the cluster through another address).
	KafkaBrokers []string
	KafkaTopic   string
	// KafkaOpts are appended to the consumer's franz-go options.
	KafkaOpts []kgo.Opt

	Clock mesh.Clock // default mesh.SystemClock
}

func (c *Config) defaults() error {
	if c.API == nil {
		return errors.New("meshd: Config.API is required")
	}
	if c.Handler == nil {
		return errors.New("meshd: Config.Handler is required")
	}
	if c.StateDir == "" {
		return errors.New("meshd: Config.StateDir is required")
	}
	switch c.Mode {
	case "":
		c.Mode = ModeAuto
	case ModeAuto, ModeKafka, ModePoll:
	default:
		return fmt.Errorf("meshd: unknown mode %q (want %s, %s or %s)", c.Mode, ModeAuto, ModeKafka, ModePoll)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.InstanceID == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		c.InstanceID = hex.EncodeToString(b)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HeartbeatEvery, 30*time.Second)
	def(&c.StallAfter, 60*time.Second)
	def(&c.PollWait, meshclient.MaxInboxWait)
	def(&c.ProbeTimeout, 5*time.Second)
	def(&c.RetryBase, time.Second)
	def(&c.RetryMax, time.Minute)
	def(&c.FlushEvery, 5*time.Second)
	if c.PageSize <= 0 {
		c.PageSize = 100
	}
	if c.Clock == nil {
		c.Clock = mesh.SystemClock
	}
	return nil
}

// errStop ends the delivery loop because Run's context ended; the current
// event was not marked and will be delivered again next time.
var errStop = errors.New("meshd: stopping")

// runner is one Run's mutable state; only the delivery goroutine touches
// state, the heartbeat goroutine talks to it through atomics.
type runner struct {
	cfg     Config
	log     *slog.Logger
	agentID string
	mode    string
	state   State
	dirty   bool // state.Offset moved without being persisted
	flushed time.Time

	handled    atomic.Int64 // = state.LastSeq, for heartbeats
	serverLast atomic.Int64 // newest seq the API reported
	// stall detection: since when the API has reported more than handled.
	behindSince time.Time
	behindAt    int64
}

// Run delivers the agent's events to cfg.Handler until ctx ends, then
// finishes the current handler, persists its state, tells the API the agent
// is going offline and returns nil. It returns an error only for what
// retrying cannot fix: bad configuration, a rejected API key, a state file
// of another agent, a state write failure.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	r := &runner{cfg: cfg, log: cfg.Log}
	tok, err := r.initialToken(ctx)
	if err != nil || ctx.Err() != nil {
		return err
	}
	r.agentID = tok.AgentID
	r.log = r.log.With("agent_id", r.agentID, "instance_id", cfg.InstanceID)
	unlock, err := lockState(cfg.StateDir, r.agentID)
	if err != nil {
		return err
	}
	defer unlock()
	if r.state, err = LoadState(cfg.StateDir, r.agentID); err != nil {
		return err
	}
	r.handled.Store(r.state.LastSeq)
	r.flushed = cfg.Clock()
	if err := r.firstHeartbeat(ctx); err != nil {
		return err
	}

	consumer, part, err := r.chooseMode(ctx, tok)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	r.log.Info("meshd started", "mode", r.mode, "last_seq", r.state.LastSeq, "state", StatePath(cfg.StateDir, r.agentID))

	hbCtx, stopHB := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.heartbeats(hbCtx)
	}()

	var loopErr error
	if consumer != nil {
		loopErr = r.kafkaLoop(ctx, consumer, part)
		consumer.Close()
	} else {
		loopErr = r.pollLoop(ctx)
	}
	if errors.Is(loopErr, errStop) {
		loopErr = nil
	}
	stopHB()
	wg.Wait()

	// Shutdown runs on a context of its own: ctx is already canceled.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if r.dirty {
		if err := r.persist(); err != nil && loopErr == nil {
			loopErr = err
		}
	}
	if _, err := cfg.API.GoOffline(sctx, cfg.InstanceID); err != nil {
		r.log.Warn("could not mark the agent offline", "err", err)
	}
	r.log.Info("meshd stopped", "last_seq", r.state.LastSeq)
	return loopErr
}

// initialToken gets the first token, waiting out an unreachable API but
// failing at once on a rejected key.
func (r *runner) initialToken(ctx context.Context) (meshclient.Token, error) {
	for attempt := 1; ; attempt++ {
		tok, err := r.cfg.API.Token(ctx)
		if err == nil {
			if !mesh.ValidAgentID(tok.AgentID) {
				return meshclient.Token{}, fmt.Errorf("meshd: the API returned an invalid agent id %q", tok.AgentID)
			}
			return tok, nil
		}
		if fatal(err) {
			return meshclient.Token{}, fmt.Errorf("meshd: cannot get a token: %w", err)
		}
		if ctx.Err() != nil {
			return meshclient.Token{}, nil
		}
		r.log.Warn("mesh API unreachable; retrying", "api", r.cfg.API.BaseURL(), "err", err)
		if !r.sleep(ctx, attempt) {
			return meshclient.Token{}, nil
		}
	}
}

// fatal reports errors retrying cannot fix: client errors other than 408
// and 429 (a rejected key, a forbidden route, a missing agent).
func fatal(err error) bool {
	var ae *meshclient.APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Status >= 400 && ae.Status < 500 && ae.Status != http.StatusRequestTimeout && ae.Status != http.StatusTooManyRequests
}

// chooseMode returns a consumer on the agent's partition (kafka) or nil
// (poll).
func (r *runner) chooseMode(ctx context.Context, tok meshclient.Token) (*kgo.Client, int32, error) {
	if r.cfg.Mode == ModePoll {
		r.mode = ModePoll
		return nil, 0, nil
	}
	brokers, topic := tok.Kafka.Brokers, tok.Kafka.Topic
	if len(r.cfg.KafkaBrokers) > 0 {
		brokers = r.cfg.KafkaBrokers
	}
	if r.cfg.KafkaTopic != "" {
		topic = r.cfg.KafkaTopic
	}
	if len(brokers) == 0 || topic == "" {
		if r.cfg.Mode == ModeKafka {
			return nil, 0, errors.New("meshd: mode kafka but the mesh gave no Kafka brokers or topic")
		}
		r.log.Info("no Kafka brokers known; delivering through the inbox API (poll mode)")
		r.mode = ModePoll
		return nil, 0, nil
	}
	opts, err := kafka.Options{Brokers: brokers, Auth: tok.Kafka.Auth}.ClientOpts(ctx)
	if err != nil {
		return nil, 0, err
	}
	for attempt := 1; ; attempt++ {
		n, err := probe(ctx, opts, topic, r.cfg.ProbeTimeout)
		if err == nil {
			part := kafka.PartitionFor(r.agentID, int(n))
			cl, err := r.consumer(opts, topic, part)
			if err != nil {
				return nil, 0, err
			}
			r.mode = ModeKafka
			r.log.Info("consuming the agent's own partition", "brokers", brokers, "topic", topic, "partition", part, "partitions", n)
			return cl, part, nil
		}
		if ctx.Err() != nil {
			return nil, 0, nil
		}
		if r.cfg.Mode == ModeAuto {
			r.log.Warn("Kafka unreachable; delivering through the inbox API (poll mode)", "brokers", brokers, "err", err)
			r.mode = ModePoll
			return nil, 0, nil
		}
		r.log.Warn("Kafka unreachable; retrying", "brokers", brokers, "err", err)
		if !r.sleep(ctx, attempt) {
			return nil, 0, nil
		}
	}
}

// probe returns the topic's partition count if the brokers answer in time.
func probe(ctx context.Context, opts []kgo.Opt, topic string, timeout time.Duration) (int32, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		return 0, err
	}
	return kafka.Partitions(pctx, cl, topic)
}

func (r *runner) consumer(opts []kgo.Opt, topic string, part int32) (*kgo.Client, error) {
	start := kgo.NewOffset().AtStart()
	if r.state.Offset >= 0 && r.state.Topic == topic && r.state.Partition == part {
		start = kgo.NewOffset().At(r.state.Offset + 1)
	} else if r.state.Offset >= 0 {
		// The topic or partition count changed: the old offset means
		// nothing here. Re-reading from the start is safe (seq dedup).
		r.log.Warn("Kafka position belongs to another topic or partition; reading the partition from its start",
			"old_topic", r.state.Topic, "old_partition", r.state.Partition, "topic", topic, "partition", part)
	}
	r.state.Topic, r.state.Partition = topic, part
	opts = append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: start}}),
		// Lost or reset positions re-read rather than skip: seq dedup makes
		// re-reading harmless, skipping would not be.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// One buffered fetch of bounded size and no fetching while it is
		// undrained: a slow handler grows lag on the broker, not memory here.
		kgo.MaxConcurrentFetches(1),
		kgo.FetchMaxBytes(4<<20),
		kgo.FetchMaxPartitionBytes(1<<20),
		kgo.FetchMaxWait(time.Second),
	)
	opts = append(opts, r.cfg.KafkaOpts...)
	return kgo.NewClient(opts...)
}

// kafkaLoop consumes one record at a time from the agent's partition.
func (r *runner) kafkaLoop(ctx context.Context, cl *kgo.Client, part int32) error {
	var lastFetchWarn time.Time
	for {
		if ctx.Err() != nil {
			return errStop
		}
		if err := r.catchUpIfStalled(ctx); err != nil {
			return err
		}
		// A short poll so stall checks and offset flushes run while idle.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollRecords(pctx, 1)
		cancel()
		if ctx.Err() != nil {
			return errStop
		}
		fs.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			if now := r.cfg.Clock(); now.Sub(lastFetchWarn) > 30*time.Second {
				lastFetchWarn = now
				r.log.Warn("Kafka fetch error (the client retries; heartbeats catch up through the inbox API meanwhile)", "topic", topic, "partition", p, "err", err)
			}
		})
		var recs []*kgo.Record
		fs.EachRecord(func(rec *kgo.Record) { recs = append(recs, rec) })
		for _, rec := range recs {
			if rec.Partition != part {
				continue
			}
			if err := r.onRecord(ctx, rec); err != nil {
				return err
			}
		}
		if r.dirty && r.cfg.Clock().Sub(r.flushed) >= r.cfg.FlushEvery {
			if err := r.persist(); err != nil {
				return err
			}
		}
	}
}

// onRecord handles one Kafka record: skip what is not ours or already
// handled, fill a gap from the inbox API, open the body, deliver.
func (r *runner) onRecord(ctx context.Context, rec *kgo.Record) error {
	skip := func() error {
		r.state.Offset = rec.Offset
		r.dirty = true
		return nil
	}
	var env mesh.Envelope
	if err := json.Unmarshal(rec.Value, &env); err != nil {
		// Not an envelope: it cannot carry one of our seqs in a readable
		// way; if it was ours, the next record's gap brings it from MySQL.
		r.log.Warn("skipping an undecodable Kafka record", "offset", rec.Offset, "err", err)
		return skip()
	}
	if env.To != r.agentID {
		return skip() // another agent's mail on the shared partition
	}
	if env.Seq <= r.state.LastSeq {
		return skip() // a duplicate (dispatcher retry) or a re-read
	}
	if env.Seq > r.state.LastSeq+1 {
		r.log.Info("gap in the Kafka stream; fetching the missing events from the inbox API", "have", r.state.LastSeq, "got", env.Seq)
		if err := r.catchUp(ctx, env.Seq-1); err != nil {
			return err
		}
		if env.Seq <= r.state.LastSeq {
			return skip() // the catch-up delivered it already
		}
	}
	opened, err := r.open(ctx, env)
	if errors.Is(err, errExpired) {
		// Kafka kept the record longer than MySQL kept the event, and the
		// copy does not open: nothing can deliver it any more.
		r.log.Error("events expired before they were handled; they cannot be delivered",
			"from_seq", env.Seq, "to_seq", env.Seq, "err", err)
		r.state.LastSeq, r.state.Offset = env.Seq, rec.Offset
		if err := r.persist(); err != nil {
			return err
		}
		r.handled.Store(env.Seq)
		return nil
	}
	if err != nil {
		return err
	}
	return r.deliver(ctx, opened, rec.Offset)
}

// errExpired: the inbox API no longer holds the event (retention).
var errExpired = errors.New("meshd: the event is past the inbox retention")

// open decrypts env's body with the agent's key; when the epoch differs or
// the body does not open, it reads that event from the inbox API (MySQL is
// the source of truth).
func (r *runner) open(ctx context.Context, env mesh.Envelope) (mesh.Envelope, error) {
	tok, err := r.cfg.API.Token(ctx)
	if err == nil && env.KeyEpoch > tok.KeyEpoch {
		// The agent's key was rotated since our token was issued.
		tok, err = r.cfg.API.RefreshToken(ctx)
	}
	if err == nil && env.KeyEpoch == tok.KeyEpoch && env.Sealed != "" {
		key, kerr := tok.Key()
		if kerr == nil {
			body, oerr := seal.Open(key, env.Sealed, seal.AAD(env))
			if oerr == nil {
				env.Body, env.Sealed = body, ""
				return env, nil
			}
			err = oerr
		} else {
			err = kerr
		}
	} else if err == nil && env.Sealed == "" {
		err = errors.New("the record carries no sealed body")
	} else if err == nil {
		err = fmt.Errorf("sealed under key epoch %d, the token has epoch %d", env.KeyEpoch, tok.KeyEpoch)
	}
	r.log.Info("cannot open the Kafka copy; reading the event from the inbox API", "seq", env.Seq, "reason", err)
	return r.fetchOne(ctx, env.Seq)
}

// fetchOne reads event seq from the inbox API, retrying transient failures.
func (r *runner) fetchOne(ctx context.Context, seq int64) (mesh.Envelope, error) {
	for attempt := 1; ; attempt++ {
		page, err := r.cfg.API.Inbox(ctx, seq-1, 1, 0)
		if err == nil {
			if len(page.Events) > 0 && page.Events[0].Seq == seq {
				return page.Events[0], nil
			}
			if page.OldestSeq > seq {
				// Retrying cannot bring it back.
				return mesh.Envelope{}, fmt.Errorf("%w: seq %d, oldest retained %d", errExpired, seq, page.OldestSeq)
			}
			err = fmt.Errorf("the inbox API did not return seq %d", seq)
		} else if fatal(err) {
			return mesh.Envelope{}, err
		}
		r.log.Warn("cannot read an event from the inbox API; retrying", "seq", seq, "attempt", attempt, "err", err)
		if !r.sleep(ctx, attempt) {
			return mesh.Envelope{}, errStop
		}
	}
}

// catchUp delivers events from the inbox API until seq upTo is handled.
func (r *runner) catchUp(ctx context.Context, upTo int64) error {
	for attempt := 1; r.state.LastSeq < upTo; {
		page, err := r.cfg.API.Inbox(ctx, r.state.LastSeq, r.cfg.PageSize, 0)
		if err != nil {
			if fatal(err) {
				return err
			}
			if ctx.Err() != nil {
				return errStop
			}
		} else {
			before := r.state.LastSeq
			if err = r.applyPage(ctx, page); err != nil && !errors.Is(err, errInboxGap) {
				return err
			}
			if r.state.LastSeq > before {
				attempt = 1
				continue
			}
			if err == nil {
				err = fmt.Errorf("the inbox API has nothing after seq %d yet, want up to %d", before, upTo)
			}
		}
		r.log.Warn("inbox catch-up incomplete; retrying", "last_seq", r.state.LastSeq, "want", upTo, "err", err)
		if !r.sleep(ctx, attempt) {
			return errStop
		}
		attempt++
	}
	return nil
}

var errInboxGap = errors.New("meshd: the inbox API skipped a seq it still retains")

// applyPage delivers a page's new events in order. Events before the page's
// oldest_seq are gone for good (retention); a hole inside retention is an
// error to retry, never a skip.
func (r *runner) applyPage(ctx context.Context, page meshclient.InboxPage) error {
	if len(page.Events) == 0 && page.OldestSeq > r.state.LastSeq+1 {
		// Everything we had not handled expired and nothing newer exists.
		r.log.Error("events expired before they were handled; they cannot be delivered",
			"from_seq", r.state.LastSeq+1, "to_seq", page.OldestSeq-1, "oldest_retained", page.OldestSeq)
		r.state.LastSeq = page.OldestSeq - 1
		r.handled.Store(r.state.LastSeq)
		return r.persist()
	}
	for _, ev := range page.Events {
		if ev.Seq <= r.state.LastSeq {
			continue
		}
		if ev.Seq > r.state.LastSeq+1 {
			if page.OldestSeq < ev.Seq {
				return fmt.Errorf("%w: have %d, next is %d, oldest retained %d", errInboxGap, r.state.LastSeq, ev.Seq, page.OldestSeq)
			}
			r.log.Error("events expired before they were handled; they cannot be delivered",
				"from_seq", r.state.LastSeq+1, "to_seq", ev.Seq-1, "oldest_retained", page.OldestSeq)
		}
		if ev.To != "" && ev.To != r.agentID {
			return fmt.Errorf("meshd: the inbox API returned an event for %q", ev.To)
		}
		if err := r.deliver(ctx, ev, -1); err != nil {
			return err
		}
	}
	return nil
}

// deliver runs the handler for env until it succeeds, then marks env
// handled (and offset consumed, when ≥ 0) durably. Later events wait: a
// failing event is retried, never skipped.
func (r *runner) deliver(ctx context.Context, env mesh.Envelope, offset int64) error {
	log := r.log.With("seq", env.Seq, "event_id", env.EventID, "type", env.Type, "from", env.From, "task_id", env.TaskID)
	if ctx.Err() != nil {
		return errStop // asked to stop: start no new handler
	}
	// The handler may finish after a stop request, so its event is marked.
	hctx := context.WithoutCancel(ctx)
	for attempt := 1; ; attempt++ {
		err := callHandler(hctx, r.cfg.Handler, env)
		if err == nil {
			break
		}
		log.Warn("handler failed; retrying the same event (later events wait)", "attempt", attempt, "err", err)
		if !r.sleep(ctx, attempt) {
			return errStop
		}
	}
	r.state.LastSeq = env.Seq
	if offset >= 0 {
		r.state.Offset = offset
	}
	if err := r.persist(); err != nil {
		return err
	}
	r.handled.Store(env.Seq)
	log.Debug("event handled")
	return nil
}

// callHandler turns a handler panic into a failure, so one bad event is
// retried instead of taking the daemon down.
func callHandler(ctx context.Context, h Handler, env mesh.Envelope) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panic: %v\n%s", p, debug.Stack())
		}
	}()
	return h.Handle(ctx, env)
}

func (r *runner) persist() error {
	r.state.UpdatedAt = r.cfg.Clock()
	if err := SaveState(r.cfg.StateDir, r.state); err != nil {
		return err
	}
	r.dirty = false
	r.flushed = r.cfg.Clock()
	return nil
}

// catchUpIfStalled reads from the inbox API when heartbeats keep reporting
// a seq newer than handled and nothing was handled for StallAfter: the
// newest event may be missing from Kafka (dead-lettered, dispatcher down),
// and with no later event no gap would ever reveal it.
func (r *runner) catchUpIfStalled(ctx context.Context) error {
	srv := r.serverLast.Load()
	last := r.state.LastSeq
	if srv <= last {
		r.behindSince = time.Time{}
		return nil
	}
	now := r.cfg.Clock()
	if r.behindSince.IsZero() || r.behindAt != last {
		r.behindSince, r.behindAt = now, last
		return nil
	}
	if now.Sub(r.behindSince) < r.cfg.StallAfter {
		return nil
	}
	r.log.Info("the API reports newer events than Kafka delivered; catching up through the inbox API", "last_seq", last, "api_last_seq", srv)
	r.behindSince = time.Time{}
	return r.catchUp(ctx, srv)
}

// pollLoop long-polls the inbox API.
func (r *runner) pollLoop(ctx context.Context) error {
	for attempt := 1; ; {
		if ctx.Err() != nil {
			return errStop
		}
		began := r.cfg.Clock()
		page, err := r.cfg.API.Inbox(ctx, r.state.LastSeq, r.cfg.PageSize, r.cfg.PollWait)
		if err == nil {
			err = r.applyPage(ctx, page)
			if err == nil {
				attempt = 1
				if len(page.Events) == 0 && r.cfg.Clock().Sub(began) < time.Second && !r.sleep(ctx, 1) {
					// An empty answer that did not long-poll (a proxy cut
					// it short, say) must not turn into a busy loop.
					return errStop
				}
				continue
			}
			if !errors.Is(err, errInboxGap) {
				return err
			}
		}
		if ctx.Err() != nil {
			return errStop
		}
		if fatal(err) {
			return err
		}
		r.log.Warn("inbox poll failed; retrying", "attempt", attempt, "err", err)
		if !r.sleep(ctx, attempt) {
			return errStop
		}
		attempt++
	}
}

// firstHeartbeat announces the agent before delivery starts and checks the
// state against the mesh: inbox seqs never go back, so an inbox that ends
// below what the state says was handled is another mesh (or a database that
// was reset), and trusting the state would silently skip its events.
func (r *runner) firstHeartbeat(ctx context.Context) error {
	res, err := r.cfg.API.Heartbeat(ctx, r.cfg.InstanceID, map[string]any{"last_seq": r.state.LastSeq, "starting": true})
	if err != nil {
		if fatal(err) {
			return fmt.Errorf("meshd: heartbeat refused: %w", err)
		}
		r.log.Warn("heartbeat failed", "err", err)
		return nil
	}
	if res.LastSeq < r.state.LastSeq {
		return fmt.Errorf("meshd: state file %s says seq %d was handled but this mesh's inbox for %q ends at seq %d: the state belongs to another mesh or the database was reset; move the file away to start over",
			StatePath(r.cfg.StateDir, r.agentID), r.state.LastSeq, r.agentID, res.LastSeq)
	}
	r.serverLast.Store(res.LastSeq)
	return nil
}

// heartbeats reports presence every HeartbeatEvery (the first beat was
// sent by firstHeartbeat) and records the API's newest seq for stall
// detection.
func (r *runner) heartbeats(ctx context.Context) {
	t := time.NewTicker(r.cfg.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		stats := map[string]any{"last_seq": r.handled.Load(), "mode": r.mode}
		res, err := r.cfg.API.Heartbeat(ctx, r.cfg.InstanceID, stats)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("heartbeat failed", "err", err)
		} else if err == nil {
			r.serverLast.Store(res.LastSeq)
			if tok, terr := r.cfg.API.Token(ctx); terr == nil && res.KeyEpoch > tok.KeyEpoch {
				// The agent's inbox key was rotated: fetch the new one now
				// rather than at the first record that fails to open.
				if _, err := r.cfg.API.RefreshToken(ctx); err != nil {
					r.log.Warn("could not refresh the token after a key rotation", "err", err)
				}
			}
		}
	}
}

// sleep waits the backoff of attempt (RetryBase doubling up to RetryMax);
// false when ctx ended first.
func (r *runner) sleep(ctx context.Context, attempt int) bool {
	d := r.cfg.RetryBase
	for i := 1; i < attempt && d < r.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, r.cfg.RetryMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
