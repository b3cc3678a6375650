// Package meshd is the agent-host daemon's logic: it delivers the agent's
// events to a handler in seq order, exactly once per marked event, from the
// agent's own Kafka partition or the push channel (a WebSocket the mesh
// posts the same records to), or the inbox API when neither is in reach,
// filling gaps from the inbox API and persisting its progress atomically. A
// handler failure is retried with backoff, then parked (dead-letter file,
// task failed) so one event never stops the agent's mail.
//
// Everything is configured through Config and Run has no global state, so
// it can run in-process in tests and embedders.
//
// The code is split by responsibility: run.go (lifecycle), presence.go
// (heartbeats and goodbye), kafka.go (mode choice, consumer, switching
// back), push.go (the push channel: connections, pings, planned
// reconnects), inbox.go (poll mode and catch-up), deliver.go (handler runs,
// retry, park), deadletter.go (the parked events' files and retry),
// control.go (what a supervisor sees and does: the mode hook, what a stop
// waits for, the interrupt that kills a handler, a recreated topic),
// handlerctl.go (the handler's control channel: it replies through meshd
// with a capability that lives as long as its run, never with the API key).
package meshd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/backoff"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/push"
)

// Delivery modes.
const (
	ModeKafka = "kafka" // consume the agent's partition; fail over to nothing
	ModePoll  = "poll"  // long-poll GET /v1/inbox only
	// ModePush holds a WebSocket to the token's push_url and gets the
	// agent's records pushed; it reconnects (with backoff) when it is lost.
	ModePush = "push"
	// ModeAuto uses push when the token announces a push_url, else Kafka
	// when the brokers answer within ProbeTimeout; when that channel is out
	// of reach it polls the inbox API while probing the channel (Kafka every
	// ProbeEvery, push with the PushRetryBase backoff), and moves back to it
	// as soon as it answers. A push channel that answers handshakes with
	// 429 or 5xx is retried with backoff, not polled around, until several
	// in a row failed.
	ModeAuto = "auto"
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
	// ProbeTimeout bounds one broker check of auto mode; default 5 s.
	ProbeTimeout time.Duration
	// PartitionCheckEvery is how often meshd, on Kafka, checks the topic's
	// partition count: when the topic grew and the agent's routing id now
	// hashes to another partition, it finishes the old one (up to its end
	// at the check, for at most maxPartitionDrain), moves to the new one and
	// catches up from the inbox API. Default kafka.MetadataMaxAge (30 s),
	// the bound the dispatcher follows a grown topic within.
	PartitionCheckEvery time.Duration
	// ProbeEvery is how often auto mode, while polling the inbox API,
	// checks whether Kafka is reachable again; default 20 s (back on Kafka
	// within ProbeEvery + ProbeTimeout of the broker's return). The push
	// channel is probed with the PushRetryBase backoff instead.
	ProbeEvery time.Duration
	// RetryBase and RetryMax bound the backoff between failed API calls
	// (inbox reads, the token at start); defaults 1 s and 1 min.
	RetryBase, RetryMax time.Duration

	// HandlerAttempts is how many times a transient handler failure is
	// tried before the event is parked; default 10.
	HandlerAttempts int
	// HandlerBackoff and HandlerBackoffMax bound the wait between handler
	// attempts (doubling from HandlerBackoff, capped at HandlerBackoffMax);
	// defaults 5 s and 10 min: ten attempts span about 30 minutes.
	HandlerBackoff, HandlerBackoffMax time.Duration
	// MaxDeadLetters bounds the parked events kept in the state directory;
	// the oldest are dropped (with an error log) beyond it. Default 1000.
	MaxDeadLetters int
	// GoodbyeTimeout bounds the DELETE /v1/agents/me/online call at stop
	// (and the last heartbeat in flight before it); default 5 s.
	GoodbyeTimeout time.Duration

	// Batch is the most events an exec handler (a BatchHandler such as
	// CommandHandler) gets in one run, 1..MaxBatch; default 1 (one run per
	// event). Only events already received are batched, never waited for:
	// from Kafka, the records of one poll; from the inbox API (poll mode,
	// catch-ups), one page. A batch is marked once, at its last event; a
	// failed batch marks nothing and its events run again one by one (the
	// usual retries, then parking), so one bad event is parked alone.
	// Pushed frames arrive one at a time and are not batched.
	Batch int

	// FlushEvery bounds how long a consumed-but-skipped Kafka offset (records
	// of other agents, duplicates) stays unpersisted; default 5 s. Handled
	// events are made durable at once, before the next handler starts.
	FlushEvery time.Duration

	// KafkaBrokers and KafkaTopic override what the token says (e.g. when
	// the host reaches the cluster through another address).
	KafkaBrokers []string
	KafkaTopic   string
	// KafkaOpts are appended to the consumer's franz-go options.
	KafkaOpts []kgo.Opt

	// PushURL overrides the push channel URL the token announces.
	PushURL string
	// PushPingEvery is how often an idle push connection is pinged, and
	// PushPingTimeout how long a pong may take before the connection is
	// given up; defaults DefaultPushPingEvery and DefaultPushPingTimeout.
	PushPingEvery, PushPingTimeout time.Duration
	// PushMaxAge is the gateway's limit on a connection's life (default
	// push.MaxConnAge); meshd replaces a connection 1/12 to 2/12 of it
	// before (planned reconnect: the new one opens first).
	PushMaxAge time.Duration
	// PushRetryBase is the window the first reconnect after a lost
	// connection is spread over, doubling per failure up to PushRetryMax;
	// defaults DefaultPushRetryBase and DefaultPushRetryMax. Auto mode's
	// probes while polling follow the same schedule, and a handshake's
	// Retry-After lengthens a wait up to PushRetryMax.
	PushRetryBase, PushRetryMax time.Duration
	// PushDialsPerMinute caps the handshakes a minute; default
	// DefaultPushDialsPerMinute.
	PushDialsPerMinute int
	// PushQueue bounds the received frames waiting for the handler; beyond
	// it frames are dropped and read from the inbox API. Default
	// DefaultPushQueue.
	PushQueue int
	// PushDialTimeout bounds one handshake; default DefaultPushDialTimeout.
	PushDialTimeout time.Duration

	// OnMode is called with the agent and the delivery mode (ModeKafka,
	// ModePush or ModePoll) when delivery starts and at every switch, e.g. to publish
	// it to `meshd status`. It must not block.
	OnMode func(agentID, mode string)
	// Interrupt, when closed during a stop, kills the handler in flight
	// (its process group) instead of waiting for it; its event is not
	// marked and is delivered again at the next start.
	Interrupt <-chan struct{}

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
	case ModeAuto, ModeKafka, ModePoll, ModePush:
	default:
		return fmt.Errorf("meshd: unknown mode %q (want %s, %s, %s or %s)", c.Mode, ModeAuto, ModePush, ModeKafka, ModePoll)
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
	def(&c.ProbeEvery, 20*time.Second)
	def(&c.PartitionCheckEvery, kafka.MetadataMaxAge)
	def(&c.RetryBase, time.Second)
	def(&c.RetryMax, time.Minute)
	def(&c.HandlerBackoff, 5*time.Second)
	def(&c.HandlerBackoffMax, 10*time.Minute)
	def(&c.GoodbyeTimeout, 5*time.Second)
	def(&c.FlushEvery, 5*time.Second)
	def(&c.PushPingEvery, DefaultPushPingEvery)
	def(&c.PushPingTimeout, DefaultPushPingTimeout)
	def(&c.PushMaxAge, push.MaxConnAge)
	def(&c.PushRetryBase, DefaultPushRetryBase)
	def(&c.PushRetryMax, DefaultPushRetryMax)
	def(&c.PushDialTimeout, DefaultPushDialTimeout)
	if c.PushDialsPerMinute <= 0 {
		c.PushDialsPerMinute = DefaultPushDialsPerMinute
	}
	if c.PushQueue <= 0 {
		c.PushQueue = DefaultPushQueue
	}
	if c.Batch == 0 {
		c.Batch = 1
	}
	if err := CheckBatch(c.Batch); err != nil {
		return err
	}
	if c.HandlerAttempts <= 0 {
		c.HandlerAttempts = 10
	}
	if c.MaxDeadLetters <= 0 {
		c.MaxDeadLetters = 1000
	}
	if c.PageSize <= 0 {
		c.PageSize = 100
	}
	if c.Clock == nil {
		c.Clock = mesh.SystemClock
	}
	return nil
}

// MaxBatch bounds Config.Batch (and meshd run --batch).
const MaxBatch = 1000

// MaxBatchBytes bounds one batch's stdin: a batch stops before the event
// whose line would take it past this (a single event is never cut).
const MaxBatchBytes = 8 << 20

// CheckBatch reports a batch size outside 1..MaxBatch.
func CheckBatch(n int) error {
	if n < 1 || n > MaxBatch {
		return fmt.Errorf("meshd: batch size %d is out of range (1..%d)", n, MaxBatch)
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
	// routingID is the agent's record key on the inbox topic (from the
	// token): the partition it hashes to is the one consumed.
	routingID string
	// keys are the inbox keys of the token keysOf, by epoch; refreshedFor
	// is the newest record epoch a token refresh was made for, so a record
	// of an epoch the mesh does not hand out costs one refresh, not one per
	// record.
	keys         map[int][]byte
	keysOf       keysID
	refreshedFor int
	mode         atomic.Value // string: ModeKafka, ModePush or ModePoll, read by heartbeats
	state        State
	stateFile    *stateFile     // open for the run; persist saves through it
	ahead        *opener        // the records of the current Kafka poll, opened ahead
	watch        partitionWatch // how the consumer follows a grown topic
	dirty        bool           // state.Offset moved without being persisted
	flushed      time.Time

	// parkedAhead are the seqs above the handled one with a dead letter at
	// start (a crash between parking and marking): handling one again
	// removes its file. Read once, so a handled event costs no unlink.
	parkedAhead map[int64]bool

	running    inFlight     // the handler run in progress
	announced  atomic.Bool  // the first heartbeat was answered
	handled    atomic.Int64 // = state.LastSeq, for heartbeats
	serverLast atomic.Int64 // newest seq the API reported
	// stall detection: since when the API has reported more than handled.
	behindSince time.Time
	behindAt    int64

	// lost is state.Lost once an event was lost, for heartbeats (inbox.go).
	lost atomic.Pointer[LostEvents]

	// interrupt is canceled when Config.Interrupt closes (nil without
	// one): one watcher per Run, so a handler's context follows it
	// without a goroutine of its own (handlerContext).
	interrupt context.Context
}

func (r *runner) currentMode() string {
	m, _ := r.mode.Load().(string)
	return m
}

// Checker is implemented by handlers that can tell before the first event
// that they cannot run (CommandHandler: the program does not exist). Run
// refuses to start when Check fails.
type Checker interface {
	Check() error
}

// Run delivers the agent's events to cfg.Handler until ctx ends, then
// finishes the current handler, persists its state, tells the API the agent
// is going offline and returns nil. It returns an error only for what
// retrying cannot fix: bad configuration, a handler that cannot start, a
// rejected API key, a state file of another agent, a state write failure.
//
// Once it holds a token, every way out of Run (a stop at any phase, an
// error) ends with the goodbye (DELETE /v1/agents/me/online), so a stopped
// agent reads draining instead of active until the presence scanner.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	if c, ok := cfg.Handler.(Checker); ok {
		if err := c.Check(); err != nil {
			return err
		}
	}
	r := &runner{cfg: cfg, log: cfg.Log}
	if cfg.Interrupt != nil {
		ictx, interrupt := context.WithCancel(context.Background())
		ran := make(chan struct{})
		defer close(ran)
		go func() {
			defer interrupt()
			select {
			case <-cfg.Interrupt:
			case <-ran:
			}
		}()
		r.interrupt = ictx
	}
	tok, err := r.initialToken(ctx)
	if err != nil || tok.AgentID == "" {
		return err // no token: the mesh never heard of this instance
	}
	r.agentID, r.routingID = tok.AgentID, tok.RoutingID
	r.log = r.log.With("agent_id", r.agentID, "instance_id", cfg.InstanceID)
	unlock, err := lockState(cfg.StateDir, r.agentID)
	if err != nil {
		return err // another meshd runs for this agent: its presence is not ours to end
	}
	defer unlock()
	// The handler replies through meshd, never with the API key; the
	// socket goes before the lock does.
	ctl := NewHandlerControl(cfg.API, cfg.StateDir, r.agentID, r.log)
	defer ctl.Close()
	if _, err := ctl.Listen(); err != nil {
		return err
	}
	r.cfg.Handler = ctl.Wrap(cfg.Handler)
	said := make(chan struct{})
	go r.sayWhatStopWaitsFor(ctx, said)
	err = r.run(ctx, tok)
	close(said)
	if errors.Is(err, errStop) {
		err = nil
	}
	r.goodbye(ctx)
	r.log.Info("meshd stopped", "last_seq", r.state.LastSeq)
	return err
}

// run is Run from the lock to the end of delivery. It does not check ctx
// before the first heartbeat: a stop that arrives meanwhile still announces
// this instance, so the goodbye that follows applies to it.
func (r *runner) run(ctx context.Context, tok meshclient.Token) error {
	var err error
	// The state file stays open for the run (under the state lock Run took):
	// each mark is then one write and one fdatasync.
	if r.stateFile, r.state, err = openStateFile(r.cfg.StateDir, r.agentID); err != nil {
		return err
	}
	defer r.stateFile.Close()
	r.handled.Store(r.state.LastSeq)
	r.flushed = r.cfg.Clock()
	parked, err := deadLetterSeqs(DeadLetterDir(r.cfg.StateDir, r.agentID))
	if err != nil {
		return err
	}
	for _, seq := range parked {
		if seq > r.state.LastSeq {
			if r.parkedAhead == nil {
				r.parkedAhead = map[int64]bool{}
			}
			r.parkedAhead[seq] = true
		}
	}
	if err := r.firstHeartbeat(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return errStop
	}

	hbCtx, stopHB := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.heartbeats(hbCtx)
	}()
	loopErr := r.deliverLoop(ctx, tok)
	// The heartbeat in flight finishes before the goodbye: a heartbeat the
	// server applies after the goodbye would make the agent active again.
	stopHB()
	wg.Wait()
	if r.dirty {
		if err := r.persist(); err != nil && (loopErr == nil || errors.Is(loopErr, errStop)) {
			loopErr = err
		}
	}
	return loopErr
}

// deliverLoop chooses the mode and delivers until ctx ends: by push, on
// Kafka, or through the inbox API, switching back to push or Kafka when
// auto mode finds it reachable again.
func (r *runner) deliverLoop(ctx context.Context, tok meshclient.Token) error {
	if r.cfg.Mode == ModePush || r.cfg.Mode == ModeAuto {
		if url := r.pushURL(tok); url != "" {
			return r.pushDeliver(ctx, url)
		}
		if r.cfg.Mode == ModePush {
			return errors.New("meshd: mode push but the mesh announced no push_url")
		}
	}
	target, err := r.kafkaTarget(ctx, tok)
	if err != nil {
		return err
	}
	consumer, part, err := r.chooseMode(ctx, target)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		if consumer != nil {
			consumer.Close()
		}
		return errStop
	}
	r.log.Info("meshd started", "mode", r.currentMode(), "last_seq", r.state.LastSeq, "state", StatePath(r.cfg.StateDir, r.agentID))
	for {
		if consumer != nil {
			err := r.kafkaLoop(ctx, consumer, part)
			consumer.Close()
			if errors.Is(err, errPartitionMoved) {
				if consumer, part, err = r.movePartition(ctx, target); err != nil {
					return err
				}
				continue
			}
			if !errors.Is(err, errTopicRecreated) {
				return err
			}
			// A nil consumer (auto mode found no broker) polls below.
			if consumer, part, err = r.reopenRecreated(ctx, target); err != nil {
				return err
			}
			continue
		}
		var back <-chan struct{}
		probeCtx, stopProbe := context.WithCancel(ctx)
		if r.cfg.Mode == ModeAuto && target != nil {
			back = r.probeUntilReachable(probeCtx, target)
		}
		err := r.pollLoop(ctx, back)
		stopProbe()
		if !errors.Is(err, errChannelBack) {
			return err
		}
		if consumer, part, err = r.openConsumer(ctx, target); err != nil {
			return err
		}
		r.log.Info("Kafka is reachable again; switched from the inbox API to the agent's partition", "partition", part, "last_seq", r.state.LastSeq)
	}
}

// tokenCallTimeout bounds one token exchange, also when a stop arrives
// while it is in flight (the exchange finishes so the goodbye can follow).
const tokenCallTimeout = 15 * time.Second

// tokenStopGrace is how long a token exchange in flight may still run after
// a stop: long enough for an API that answers, short enough that Ctrl-C
// against an unreachable one ends meshd promptly.
const tokenStopGrace = 2 * time.Second

// initialToken gets the first token, waiting out an unreachable API but
// failing at once on a rejected key. A zero Token with a nil error means
// ctx ended before any token was had.
func (r *runner) initialToken(ctx context.Context) (meshclient.Token, error) {
	for attempt := 1; ; attempt++ {
		// The call in flight is not cut by a stop at once: a token it brings
		// back means the agent may have to be told goodbye. But an API that
		// does not answer keeps a stopped meshd no longer than
		// tokenStopGrace (not the whole tokenCallTimeout of retries).
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenCallTimeout)
		release := context.AfterFunc(ctx, func() {
			t := time.NewTimer(tokenStopGrace)
			defer t.Stop()
			select {
			case <-t.C:
				cancel()
			case <-cctx.Done():
			}
		})
		tok, err := r.cfg.API.Token(cctx)
		release()
		cancel()
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

// fatal reports API errors retrying cannot fix: client errors other than
// 408 and 429 (a rejected key, a forbidden route, a missing agent).
func fatal(err error) bool { return meshclient.IsPermanent(err) }

// sleep waits the API-call backoff of attempt; false when ctx ended first.
func (r *runner) sleep(ctx context.Context, attempt int) bool {
	return backoff.Wait(ctx, backoff.Policy{Base: r.cfg.RetryBase, Max: r.cfg.RetryMax}.Delay(attempt))
}
