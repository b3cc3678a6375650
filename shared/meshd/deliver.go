package meshd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/agentmesh/agentmesh/shared/backoff"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/textlimit"
)

// PermanentError marks a handler failure that retrying cannot fix: Run
// parks the event at once instead of retrying it.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that Run parks the event without further attempts.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether a handler error is permanent: marked with
// Permanent, or a mesh API answer retrying cannot change (a 4xx other than
// 408 and 429, e.g. 409 task_terminal on a reply made for the event).
// Everything else (network errors, 5xx, 429, timeouts, a non-zero exit) is
// transient and retried.
func IsPermanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe) || meshclient.IsPermanent(err)
}

// Reasons an event was parked, as DeadLetter.Reason.
const (
	ReasonPermanent     = "permanent"          // the handler failed in a way retrying cannot fix
	ReasonExhausted     = "attempts_exhausted" // HandlerAttempts transient failures
	ReasonUndeliverable = "undeliverable"      // the mesh sent a placeholder: no event to run
)

// deliver runs the handler for env, retrying transient failures with
// backoff up to HandlerAttempts, then marks env handled (and offset
// consumed, when ≥ 0) durably. An event that fails for good is parked and
// marked too: later events must not wait behind it forever.
func (r *runner) deliver(ctx context.Context, env mesh.Envelope, offset int64) error {
	if ctx.Err() != nil {
		return errStop // asked to stop: start no new handler
	}
	// Built only when something is logged: a handled event must cost
	// little besides its mark.
	log := func() *slog.Logger {
		return r.log.With("seq", env.Seq, "event_id", env.EventID, "type", env.Type, "from", env.From, "task_id", env.TaskID)
	}
	if env.Type == mesh.EventUndeliverable {
		var ub mesh.UndeliverableBody
		_ = json.Unmarshal(env.Body, &ub)
		cause := fmt.Errorf("the mesh could not serve this event (code %q, original type %q)", ub.Code, ub.OriginalType)
		log().Error("undeliverable event: not given to the handler", "code", ub.Code, "original_type", ub.OriginalType)
		return r.park(ctx, env, offset, 0, ReasonUndeliverable, cause)
	}
	began := r.cfg.Clock()
	// The handler may finish after a stop request, so its event is marked;
	// only Config.Interrupt cuts it short.
	hctx, cancel := r.handlerContext(ctx)
	defer cancel()
	r.running.set(env.Seq, began)
	defer r.running.set(0, time.Time{})
	for attempt := 1; ; attempt++ {
		err := callHandler(hctx, r.cfg.Handler, env)
		if err == nil {
			break
		}
		if r.interrupted() {
			log().Warn("handler interrupted; the event will be delivered again at the next start", "err", err)
			return errStop
		}
		if IsPermanent(err) {
			return r.park(ctx, env, offset, attempt, ReasonPermanent, err)
		}
		if attempt >= r.cfg.HandlerAttempts {
			return r.park(ctx, env, offset, attempt, ReasonExhausted, err)
		}
		d := backoff.Policy{Base: r.cfg.HandlerBackoff, Max: r.cfg.HandlerBackoffMax}.Delay(attempt)
		log().Warn("handler failed; retrying the same event (later events wait)", "attempt", attempt, "max_attempts", r.cfg.HandlerAttempts, "retry_in", d.String(), "err", err)
		if !backoff.Wait(ctx, d) {
			return errStop
		}
	}
	if err := r.mark(env, offset); err != nil {
		return err
	}
	r.unpark(env.Seq)
	if r.log.Enabled(ctx, slog.LevelInfo) {
		// One record with its attributes, not a derived logger: the same
		// line without building a handler per event.
		r.log.LogAttrs(ctx, slog.LevelInfo, "event handled", slog.Int64("seq", env.Seq), slog.String("event_id", env.EventID),
			slog.String("type", env.Type), slog.String("from", env.From), slog.String("task_id", env.TaskID),
			slog.Int64("duration_ms", r.cfg.Clock().Sub(began).Milliseconds()))
	}
	return nil
}

// unpark removes the dead letter a crash between parking and marking left
// for seq, an event this run has now handled.
func (r *runner) unpark(seq int64) {
	if r.parkedAhead[seq] {
		_ = removeDeadLetter(r.cfg.StateDir, r.agentID, seq)
		delete(r.parkedAhead, seq)
	}
}

// batchHandler is the handler's batch form when batches are on and it has
// one.
func (r *runner) batchHandler() (BatchHandler, bool) {
	if r.cfg.Batch < 2 {
		return nil, false
	}
	if g, ok := r.cfg.Handler.(*grantingHandler); ok && !g.takesBatches() {
		return nil, false
	}
	bh, ok := r.cfg.Handler.(BatchHandler)
	return bh, ok
}

// batchable reports whether env may join a batch: an event the handler
// runs (not a placeholder, which is parked without a run).
func batchable(env mesh.Envelope) bool { return env.Type != mesh.EventUndeliverable }

// deliverBatch runs envs (consecutive seqs from the next unhandled one,
// at least two) in one handler run and marks them once, at the last event
// (offsets[i] is envs[i]'s Kafka offset, -1: none). A failed batch marks
// nothing: each event then goes through deliver, one by one, with its own
// retries and parking, so one bad event is parked alone.
func (r *runner) deliverBatch(ctx context.Context, bh BatchHandler, envs []mesh.Envelope, offsets []int64) error {
	if ctx.Err() != nil {
		return errStop
	}
	began := r.cfg.Clock()
	hctx, cancel := r.handlerContext(ctx)
	r.running.set(envs[0].Seq, began)
	err := callBatch(hctx, bh, envs)
	r.running.set(0, time.Time{})
	cancel()
	if err == nil {
		last := len(envs) - 1
		if err := r.mark(envs[last], offsets[last]); err != nil {
			return err
		}
		for _, env := range envs {
			r.unpark(env.Seq)
		}
		if r.log.Enabled(ctx, slog.LevelInfo) {
			r.log.Info("batch handled", "events", len(envs), "from_seq", envs[0].Seq, "to_seq", envs[last].Seq,
				"duration_ms", r.cfg.Clock().Sub(began).Milliseconds())
		}
		return nil
	}
	if r.interrupted() {
		r.log.Warn("batch handler interrupted; its events will be delivered again at the next start", "from_seq", envs[0].Seq, "err", err)
		return errStop
	}
	r.log.Warn("batch failed; running its events one by one", "events", len(envs), "from_seq", envs[0].Seq, "to_seq", envs[len(envs)-1].Seq, "err", err)
	for i, env := range envs {
		if err := r.deliver(ctx, env, offsets[i]); err != nil {
			return err
		}
	}
	return nil
}

// mark records env as handled (and offset as consumed, when ≥ 0) durably.
// It runs only after the handler returned: marking first would lose the
// event if the process died while the handler ran.
func (r *runner) mark(env mesh.Envelope, offset int64) error {
	if crashBeforeMark != nil {
		if err := crashBeforeMark(r.cfg.StateDir, env.Seq); err != nil {
			return err
		}
	}
	r.state.LastSeq, r.state.LastAt = env.Seq, env.OccurredAt
	if offset >= 0 {
		r.state.Offset = offset
	}
	// The mark is durable (its fdatasync done) before the next event's
	// handler starts: a crash of the process or of the machine reruns only
	// the event whose handler had not been marked. (Syncing behind the next
	// handler is faster but lets a power loss rerun two events.)
	r.state.UpdatedAt = r.cfg.Clock()
	if err := r.stateFile.Save(r.state); err != nil {
		return err
	}
	r.dirty = false
	r.flushed = r.state.UpdatedAt
	r.handled.Store(env.Seq)
	return nil
}

// park writes env to the dead-letter list, fails its task when the agent
// is the task's recipient, and marks env handled so delivery moves on. The
// dead letter is durable before the mark: a crash in between runs the
// event again rather than losing it.
func (r *runner) park(ctx context.Context, env mesh.Envelope, offset int64, attempts int, reason string, cause error) error {
	dl := DeadLetter{
		AgentID: r.agentID, Seq: env.Seq, EventID: env.EventID, Type: env.Type, From: env.From, TaskID: env.TaskID,
		Reason: reason, Attempts: attempts, Error: textlimit.Truncate(cause.Error(), maxErrorText), ParkedAt: r.cfg.Clock().UTC(), Event: env,
	}
	dropped, err := saveDeadLetter(r.cfg.StateDir, dl, r.cfg.MaxDeadLetters)
	if err != nil {
		return err
	}
	for _, seq := range dropped {
		r.log.Error("dead-letter list full; dropped the oldest parked event (GET /v1/inbox still serves it until retention)", "dropped_seq", seq, "max", r.cfg.MaxDeadLetters)
	}
	failed := false
	if reason != ReasonUndeliverable {
		failed = r.failTask(ctx, env, dl)
	}
	if err := r.mark(env, offset); err != nil {
		return err
	}
	r.log.Error("event parked: delivery moves on; list with `meshd deadletters`, run again with `meshd retry SEQ`",
		"seq", env.Seq, "event_id", env.EventID, "type", env.Type, "task_id", env.TaskID, "reason", reason,
		"attempts", attempts, "task_failed", failed, "err", dl.Error)
	return nil
}

// maxErrorText bounds the error text kept in a dead letter and sent as the
// failed task's note.
const maxErrorText = 2000

// failTaskTimeout bounds moving a parked event's task to failed.
const failTaskTimeout = 30 * time.Second

// failTask moves env's task to failed with the handler's error when this
// agent is the task's recipient (only the recipient may fail a task). A 409
// (the task is already finished) is fine; any other failure is logged: the
// dead letter is what keeps the event. It reports whether the task moved.
func (r *runner) failTask(ctx context.Context, env mesh.Envelope, dl DeadLetter) bool {
	var body struct {
		Task struct {
			Recipient string `json:"recipient"`
			Status    string `json:"status"`
		} `json:"task"`
	}
	if env.TaskID == "" || json.Unmarshal(env.Body, &body) != nil || body.Task.Recipient != r.agentID {
		return false
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failTaskTimeout)
	defer cancel()
	note := fmt.Sprintf("meshd of %s could not handle event seq %d (%s after %d attempt(s)): %s", r.agentID, env.Seq, dl.Reason, dl.Attempts, dl.Error)
	_, err := r.cfg.API.UpdateStatus(fctx, env.TaskID, meshclient.StatusRequest{
		Status: mesh.TaskFailed,
		// One id per event: a repeat after a crash is applied once.
		MessageID: textlimit.Truncate("meshd-park-"+env.EventID, 128),
		Message:   &meshclient.StatusMessage{Parts: []mesh.Part{{Kind: "text", Text: textlimit.Truncate(note, maxErrorText)}}},
	})
	switch {
	case err == nil:
		return true
	case meshclient.IsStatus(err, 409):
		return false // already finished: nothing to fail
	default:
		r.log.Warn("could not move the parked event's task to failed", "seq", env.Seq, "task_id", env.TaskID, "err", err)
		return false
	}
}

// crashBeforeMark, set by tests only, stands for the process dying after
// a handler succeeded and before its mark was durable: a non-nil error
// ends Run with nothing marked.
var crashBeforeMark func(stateDir string, seq int64) error

// callBatch is callHandler for a batch.
func callBatch(ctx context.Context, bh BatchHandler, envs []mesh.Envelope) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("batch handler panic: %v\n%s", p, debug.Stack())
		}
	}()
	return bh.HandleBatch(ctx, envs)
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
	if err := r.stateFile.Save(r.state); err != nil {
		return err
	}
	r.dirty = false
	r.flushed = r.cfg.Clock()
	return nil
}
