package dispatch

import (
	"context"
	"sync"
	"time"
)

// Pusher receives the records a batch published, once the batch has
// committed, to copy them to the recipients' live push connections
// (push.Sender). The arguments are plain values so that this package links
// nothing of the push channel, nor the push channel anything of Kafka.
//
// A push is a courtesy copy of a record already durable: the dispatcher
// never waits for it, and nothing it does (failing, blocking, panicking)
// changes the outbox or delays delivery to Kafka.
type Pusher interface {
	// Push hands over one published record: the recipient's agent id, its
	// seq and the record value exactly as sent to Kafka. Calls come in seq
	// order per recipient. It must not block.
	Push(agentID string, seq int64, value []byte)
	// Drain gives what is queued until ctx ends to go out; a Lambda is
	// frozen once its invocation returns.
	Drain(ctx context.Context)
}

// Push handoff bounds.
const (
	// PushHandoffBatches bounds the committed batches waiting to be handed
	// to the Pusher; past it a batch's records are dropped (and counted),
	// never waited for.
	PushHandoffBatches = 256
	// PushHandoffBytes bounds the bytes of the record values waiting in
	// the handoff: batches of large records cannot take the dispatcher's
	// memory. A batch larger than it alone still passes an empty handoff
	// (the dispatcher holds its records anyway).
	PushHandoffBytes = 16 << 20
	// DefaultPushDrain bounds how long the end of Run waits for queued
	// pushes.
	DefaultPushDrain = time.Second
)

// pushed is one published record on its way to the Pusher.
type pushed struct {
	agentID string
	seq     int64
	value   []byte
}

// pushGate hands committed batches to the Pusher from a goroutine of its
// own, one batch after the other (so order holds), and drops batches while
// PushHandoffBatches are already waiting: a Pusher that blocks or panics
// costs pushes, never dispatching.
type pushGate struct {
	mu      sync.Mutex
	queue   [][]pushed
	bytes   int // of the values in queue
	running bool
	idle    chan struct{} // closed when the running goroutine stops
}

// push queues recs for the Pusher, or drops them when the handoff is full
// (PushHandoffBatches batches or PushHandoffBytes bytes); it reports how
// many records it dropped.
func (d *Dispatcher) push(recs []pushed) (dropped int) {
	if d.Pusher == nil || len(recs) == 0 {
		return 0
	}
	size := batchBytes(recs)
	g := &d.pushes
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) >= PushHandoffBatches || (g.bytes > 0 && g.bytes+size > PushHandoffBytes) {
		return len(recs)
	}
	g.bytes += size
	g.queue = append(g.queue, recs)
	if !g.running {
		g.running, g.idle = true, make(chan struct{})
		go d.handOff()
	}
	return 0
}

// handOff feeds queued batches to the Pusher until the queue is empty. It
// exits when idle, so a dispatcher leaves no goroutine behind between runs.
func (d *Dispatcher) handOff() {
	g := &d.pushes
	for {
		g.mu.Lock()
		if len(g.queue) == 0 {
			g.running = false
			close(g.idle)
			g.mu.Unlock()
			return
		}
		recs := g.queue[0]
		g.queue[0] = nil
		g.queue = g.queue[1:]
		g.bytes -= batchBytes(recs)
		g.mu.Unlock()
		d.handBatch(recs)
	}
}

// batchBytes is the size of a batch's record values.
func batchBytes(recs []pushed) int {
	n := 0
	for _, r := range recs {
		n += len(r.value)
	}
	return n
}

// handBatch passes one batch to the Pusher; a panic in it is logged and
// ends that batch only.
func (d *Dispatcher) handBatch(recs []pushed) {
	defer func() {
		if r := recover(); r != nil {
			d.Log.Error("pusher panicked; its records are not pushed (hosts fetch them from the inbox)", "panic", r)
		}
	}()
	for _, r := range recs {
		d.Pusher.Push(r.agentID, r.seq, r.value)
	}
}

// drainPushes waits, at most until ctx ends, for the handoff to empty and
// then for the Pusher's own Drain. Neither may hold Run past ctx.
func (d *Dispatcher) drainPushes(ctx context.Context) {
	if d.Pusher == nil {
		return
	}
	g := &d.pushes
	g.mu.Lock()
	idle, running := g.idle, g.running
	g.mu.Unlock()
	if running {
		select {
		case <-idle:
		case <-ctx.Done():
			return
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				d.Log.Error("pusher panicked while draining", "panic", r)
			}
		}()
		d.Pusher.Drain(ctx)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// pushDrainContext bounds the drain at the end of a run: PushDrain, and
// never into the margin the run keeps for its metrics.
func (d *Dispatcher) pushDrainContext(ctx context.Context) (context.Context, context.CancelFunc) {
	end := time.Now().Add(d.PushDrain)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-finishMargin/2).Before(end) {
		end = dl.Add(-finishMargin / 2)
	}
	return context.WithDeadline(context.WithoutCancel(ctx), end)
}
