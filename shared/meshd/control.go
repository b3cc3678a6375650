package meshd

import (
	"context"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/shared/backoff"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Daemon control: what a supervisor (meshd start/stop/status, or a
// foreground meshd run and its Ctrl-C) sees of and does to a running Run.

// inFlight is the handler run in progress, if any.
type inFlight struct {
	mu    sync.Mutex
	seq   int64
	began time.Time
}

func (f *inFlight) set(seq int64, t time.Time) {
	f.mu.Lock()
	f.seq, f.began = seq, t
	f.mu.Unlock()
}

func (f *inFlight) get() (int64, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seq, f.began
}

// handlerContext is the context a handler runs in: not canceled by a stop
// (the handler finishes, so its event is marked), but canceled when
// Config.Interrupt closes, which kills the handler's process group.
func (r *runner) handlerContext(ctx context.Context) (context.Context, context.CancelFunc) {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if r.interrupt == nil {
		return hctx, cancel
	}
	// Registered on Run's interrupt context: no goroutine per event.
	stop := context.AfterFunc(r.interrupt, cancel)
	return hctx, func() { stop(); cancel() }
}

// interrupted reports whether Config.Interrupt was closed.
func (r *runner) interrupted() bool {
	if r.cfg.Interrupt == nil {
		return false
	}
	select {
	case <-r.cfg.Interrupt:
		return true
	default:
		return false
	}
}

// sayWhatStopWaitsFor logs, when a stop arrives while a handler runs, what
// the stop waits for and how to cut it short, so Ctrl-C is never met with
// silence for up to the handler timeout.
func (r *runner) sayWhatStopWaitsFor(ctx context.Context, done <-chan struct{}) {
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	seq, began := r.running.get()
	if seq == 0 {
		r.log.Info("stopping: no handler running")
		return
	}
	r.log.Warn("stopping: waiting for the handler to finish its event (it is marked handled then); interrupt again (Ctrl-C, or meshd stop --now) to kill the handler's process group and deliver the event again at the next start",
		"seq", seq, "running_for", r.cfg.Clock().Sub(began).Round(time.Second).String())
}

// setMode records the delivery mode and tells Config.OnMode.
func (r *runner) setMode(m string) {
	r.mode.Store(m)
	if r.cfg.OnMode != nil {
		r.cfg.OnMode(r.agentID, m)
	}
}

// reopenRecreated opens a consumer on a topic that was recreated under its
// name. The persisted offset belongs to the old topic (the new one starts
// at 0 again), so the position is found from the handled event's time
// instead; what is read twice is dropped by seq. A nil client: auto mode
// found no broker and deliverLoop polls the inbox API.
func (r *runner) reopenRecreated(ctx context.Context, t *kafkaTarget) (*kgo.Client, int32, error) {
	r.log.Warn("the Kafka topic was recreated (a restarted broker?); reopening the consumer from the handled seq", "topic", t.topic, "last_seq", r.state.LastSeq)
	r.state.Offset = -1
	r.dirty = true
	// Bounded: at most one reopen a second, however often it recurs.
	if !backoff.Wait(ctx, time.Second) {
		return nil, 0, errStop
	}
	cl, part, err := r.chooseMode(ctx, t)
	if err != nil {
		return nil, 0, err
	}
	if ctx.Err() != nil {
		if cl != nil {
			cl.Close()
		}
		return nil, 0, errStop
	}
	return cl, part, nil
}
