package push

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
)

// Directory says which connections an agent has open and forgets the ones
// that are gone; push.Service is the real one.
type Directory interface {
	// Targets returns the live connection ids of each agent, oldest first.
	Targets(ctx context.Context, agentIDs []string) (map[string][]string, error)
	// Forget drops connections that are gone.
	Forget(ctx context.Context, connectionIDs []string) error
}

// Sender defaults and bounds.
const (
	// DefaultSenderQueue is how many records may wait for the worker; past
	// it Push drops (and counts) instead of waiting.
	DefaultSenderQueue = 10000
	// DefaultSenderQueueBytes bounds the bytes of the records waiting
	// (after nudging): a few bursts of large records cannot take the
	// dispatcher's memory. Past it Push drops (and counts).
	DefaultSenderQueueBytes = 16 << 20
	// DefaultSenderBatch is how many queued records one round takes: one
	// Targets lookup and one wave of posts.
	DefaultSenderBatch = 500
	// DefaultSenderParallel is how many relay calls one round makes at once.
	DefaultSenderParallel = 8
	// DefaultSenderTimeout bounds the posts of one round. It exceeds the
	// Lambda relay's invoke timeout (which exceeds the relay function's
	// timeout), so a round never gives up on a call that is still posting
	// and the next round cannot overtake it on a connection.
	DefaultSenderTimeout = 15 * time.Second
	// SenderLookupTimeout bounds a round's Targets lookup and
	// SenderForgetTimeout its Forget, each with a context of its own.
	SenderLookupTimeout = 5 * time.Second
	SenderForgetTimeout = 5 * time.Second
	// MaxFramesPerConn is how many messages one round posts to one
	// connection. An agent's records of a round go out packed into batch
	// frames of up to MaxMessageBytes (a lone record as itself), so a
	// burst costs a few posts, not one per record: the posts to one
	// connection run one after another, and one per record capped an
	// agent's push rate at one record per post's round trip. Records that
	// would need more frames go as one nudge for the highest seq (meshd
	// reads them from GET /v1/inbox).
	MaxFramesPerConn = 8
)

// batchOverhead bounds the bytes a batch frame adds to its records' values:
// {"v":2,"seq":<up to 20 digits>,"fetch":true,"records":[...]} and a comma
// between two values (counted with each value).
const batchOverhead = 64

// Sender copies the dispatcher's published records to their recipients'
// live connections. It implements dispatch.Pusher: Push never blocks (a
// bounded queue; when full the record is dropped and counted, and the host
// covers the gap from GET /v1/inbox), and one worker at a time sends what is
// queued, round after round, so the records of a connection are posted in
// the order they were pushed. A record larger than MaxMessageBytes is
// queued as a nudge ({"v":2,"seq":N,"fetch":true}); an agent's records of
// one round go out in batch frames (api.PushFrame), and those past
// MaxFramesPerConn frames as one nudge for them all; connections the relay
// reports gone are forgotten.
//
// Metrics: PushSent (messages posted, nudges and batches included),
// PushBatched (records that went out inside batch frames), PushNudged,
// PushDropped (records never posted: queue full, lookup or relay failure),
// PushGone (connections found gone).
type Sender struct {
	Directory Directory
	Relay     Relay
	Log       *slog.Logger
	Metrics   *metrics.Sink

	Queue      int           // records waiting at most (default DefaultSenderQueue)
	QueueBytes int           // bytes of the records waiting at most (default DefaultSenderQueueBytes)
	Batch      int           // records per round (default DefaultSenderBatch)
	Parallel   int           // relay calls at once (default DefaultSenderParallel)
	Timeout    time.Duration // bound of one round's posts (default DefaultSenderTimeout)

	once    sync.Once
	mu      sync.Mutex
	queue   []record
	queued  int // bytes of the values in queue
	running bool
	idle    chan struct{} // closed when the running worker stops
	dropped atomic.Int64  // dropped by Push since last emitted
}

// record is one pushed record waiting in the queue.
type record struct {
	agentID string
	seq     int64
	value   []byte // the record's value, or its nudge when nudged
	nudged  bool
}

func (s *Sender) defaults() {
	s.once.Do(func() {
		if s.Log == nil {
			s.Log = slog.Default()
		}
		if s.Metrics == nil {
			s.Metrics = metrics.Default
		}
		if s.Queue <= 0 {
			s.Queue = DefaultSenderQueue
		}
		if s.QueueBytes <= 0 {
			s.QueueBytes = DefaultSenderQueueBytes
		}
		if s.Batch <= 0 {
			s.Batch = DefaultSenderBatch
		}
		if s.Parallel <= 0 {
			s.Parallel = DefaultSenderParallel
		}
		if s.Timeout <= 0 {
			s.Timeout = DefaultSenderTimeout
		}
	})
}

// Push queues one published record for agentID's connections. It never
// blocks: with Queue records or QueueBytes already waiting, the record is
// dropped. A record over MaxMessageBytes is queued as its nudge, so the
// queue never holds what cannot be posted anyway.
func (s *Sender) Push(agentID string, seq int64, value []byte) {
	s.defaults()
	nudged := len(value) > MaxMessageBytes
	if nudged {
		value = Nudge(seq)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) >= s.Queue || s.queued+len(value) > s.QueueBytes {
		if s.dropped.Add(1) == 1 {
			s.Log.Warn("push queue full; dropping pushes (hosts fetch them from the inbox)", "queue", s.Queue, "queue_bytes", s.QueueBytes)
		}
		return
	}
	s.queued += len(value)
	s.queue = append(s.queue, record{agentID: agentID, seq: seq, value: value, nudged: nudged})
	if !s.running {
		s.running, s.idle = true, make(chan struct{})
		go s.work()
	}
}

// Drain waits until everything queued has been sent, or ctx ends.
func (s *Sender) Drain(ctx context.Context) {
	s.defaults()
	s.mu.Lock()
	idle, running := s.idle, s.running
	s.mu.Unlock()
	if running {
		select {
		case <-idle:
		case <-ctx.Done():
		}
	}
	s.emitDropped()
}

// work sends round after round until the queue is empty, then exits: an
// idle Sender holds no goroutine.
func (s *Sender) work() {
	for {
		s.mu.Lock()
		n := min(len(s.queue), s.Batch)
		if n == 0 {
			s.running = false
			close(s.idle)
			s.mu.Unlock()
			return
		}
		round := slices.Clone(s.queue[:n])
		for _, r := range round {
			s.queued -= len(r.value)
		}
		clear(s.queue[:n])
		s.queue = s.queue[n:]
		s.mu.Unlock()
		s.send(round)
		s.emitDropped()
	}
}

func (s *Sender) emitDropped() {
	if n := s.dropped.Swap(0); n > 0 {
		s.Metrics.Emit(map[string]float64{"PushDropped": float64(n)})
	}
}

// send posts one round: one Targets lookup, then each connection's records
// in seq order, connections spread over at most Parallel relay calls. The
// lookup, the posts and the forgets each have a context of their own, so
// that a slow step cannot leave the next one no time.
func (s *Sender) send(round []record) {
	defer func() {
		// A panicking directory or relay costs this round, not the worker.
		if r := recover(); r != nil {
			s.Log.Error("push round panicked; its records are not pushed", "panic", r)
			s.Metrics.Emit(map[string]float64{"PushDropped": float64(len(round))})
		}
	}()
	// Per agent, agents in the order they first appear.
	byAgent := map[string][]record{}
	var agents []string
	for _, r := range round {
		if _, ok := byAgent[r.agentID]; !ok {
			agents = append(agents, r.agentID)
		}
		byAgent[r.agentID] = append(byAgent[r.agentID], r)
	}
	lctx, cancel := context.WithTimeout(context.Background(), SenderLookupTimeout)
	targets, err := s.Directory.Targets(lctx, agents)
	cancel()
	if err != nil {
		s.Log.Warn("push: looking up connections failed; round dropped (hosts fetch from the inbox)", "records", len(round), "err", err)
		s.Metrics.Emit(map[string]float64{"PushDropped": float64(len(round))})
		return
	}
	// Each connection lands in exactly one call, so its messages keep their
	// order within that call.
	calls := make([][]Message, 0, s.Parallel)
	nudged, batched, conns := 0, 0, 0
	for _, agent := range agents {
		recs := byAgent[agent]
		// Two overlapping dispatcher runs may hand one agent's records over
		// out of seq order; within a round, restore it.
		slices.SortStableFunc(recs, func(a, b record) int { return cmp.Compare(a.seq, b.seq) })
		if len(targets[agent]) == 0 {
			continue
		}
		frames, n, b := framesOf(recs)
		nudged += n
		batched += b
		for _, conn := range targets[agent] {
			if len(calls) < s.Parallel {
				calls = append(calls, nil)
			}
			k := conns % s.Parallel
			conns++
			for _, f := range frames {
				calls[k] = append(calls[k], Message{ConnectionID: conn, Data: f})
			}
		}
	}
	if len(calls) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		gone     []string
		failed   int
		attempts int
	)
	for _, msgs := range calls {
		attempts += len(msgs)
		wg.Go(func() {
			g, err := s.post(ctx, msgs)
			mu.Lock()
			defer mu.Unlock()
			gone = append(gone, g...)
			if err != nil {
				failed += len(msgs)
				s.Log.Warn("push: relay call failed; its messages are dropped (hosts fetch from the inbox)", "messages", len(msgs), "err", err)
			}
		})
	}
	wg.Wait()
	m := map[string]float64{"PushSent": float64(attempts - failed)}
	if nudged > 0 {
		m["PushNudged"] = float64(nudged)
	}
	if batched > 0 {
		m["PushBatched"] = float64(batched)
	}
	if failed > 0 {
		m["PushDropped"] = float64(failed)
	}
	if len(gone) > 0 {
		m["PushGone"] = float64(len(gone))
	}
	s.Metrics.Emit(m)
	if len(gone) > 0 {
		// Its own context: the posts may have used up theirs.
		fctx, cancel := context.WithTimeout(context.Background(), SenderForgetTimeout)
		defer cancel()
		if err := s.Directory.Forget(fctx, gone); err != nil {
			s.Log.Warn("push: forgetting gone connections failed; the janitor will", "connections", len(gone), "err", err)
		}
	}
}

// post is one relay call; a panic in the relay fails that call only.
func (s *Sender) post(ctx context.Context, msgs []Message) (gone []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			gone, err = nil, fmt.Errorf("push: relay panicked: %v", r)
		}
	}()
	return s.Relay.Post(ctx, msgs)
}

// Service is the Directory of the deployment.
var _ Directory = (*Service)(nil)

// Nudge is the frame pushed in place of a record too large for one
// WebSocket message: it tells meshd to read event seq from GET /v1/inbox.
func Nudge(seq int64) []byte {
	b, _ := json.Marshal(api.PushFrame{V: mesh.EnvelopeVersion, Seq: seq, Fetch: true})
	return b
}

// framesOf packs one agent's records of a round, in seq order, into the
// frames each of its connections is posted: runs of records that fit one
// message go as a batch frame, a run of one as the record itself (the
// frame every meshd reads), a nudged record as its nudge. Past
// MaxFramesPerConn frames, the last one is a nudge for the highest seq.
// It also returns how many of the frames are nudges and how many records
// went inside batch frames.
func framesOf(recs []record) (frames [][]byte, nudged, batched int) {
	type frame struct {
		data    []byte
		nudge   bool
		records int // records inside, when a batch
	}
	var out []frame
	var run []record
	size := batchOverhead
	flush := func() {
		defer func() { run, size = nil, batchOverhead }()
		if len(run) > 1 {
			if f, err := batchFrame(run); err == nil {
				out = append(out, frame{data: f, records: len(run)})
				return
			}
		}
		// A lone record goes as itself; so do records that are not JSON
		// (the dispatcher's values always are).
		for _, r := range run {
			out = append(out, frame{data: r.value})
		}
	}
	for _, r := range recs {
		if r.nudged {
			flush()
			out = append(out, frame{data: r.value, nudge: true})
			continue
		}
		if len(run) > 0 && size+len(r.value)+1 > MaxMessageBytes {
			flush()
		}
		run = append(run, r)
		size += len(r.value) + 1
	}
	flush()
	if len(out) > MaxFramesPerConn {
		out = append(out[:MaxFramesPerConn-1], frame{data: Nudge(recs[len(recs)-1].seq), nudge: true})
	}
	frames = make([][]byte, len(out))
	for i, f := range out {
		frames[i] = f.data
		batched += f.records
		if f.nudge {
			nudged++
		}
	}
	return frames, nudged, batched
}

// batchFrame is the batch frame of run: its values in order, seq the last
// one's, fetch set so that a meshd that does not read batches fetches them.
func batchFrame(run []record) ([]byte, error) {
	vals := make([]json.RawMessage, len(run))
	for i, r := range run {
		vals[i] = r.value
	}
	return json.Marshal(api.PushFrame{V: mesh.EnvelopeVersion, Seq: run[len(run)-1].seq, Fetch: true, Records: vals})
}
