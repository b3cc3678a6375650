package a2agw

import (
	"context"
	"iter"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

// The per-caller cap and the unit every call pays. The Function URL has no
// throttle in front of it, so the function bounds each calling agent
// itself:
//
//   - waiting calls: a blocking SendMessage (no returnImmediately), a
//     SendStreamingMessage and a SubscribeToTask each hold one of the
//     caller's MaxWaits slots (rows of a2a_waits, shared by every function
//     instance) while they run. Past the cap the call answers the rate
//     limit's 429 (Retry-After waitRetryAfter) before it does anything: a
//     blocking send over the cap has sent nothing. It is refused rather
//     than degraded to returnImmediately: a client that asked to wait
//     would otherwise get a submitted task it did not ask for and must
//     poll, which costs more calls than one retry.
//   - every authenticated call spends one rate unit, whatever its answer.
//     A read spends it at the front; a write spends it in its own
//     transaction, which rolls back when the write fails, so a write that
//     fails for any reason other than the rate limit itself (a refused
//     caller, a missing task, invalid params, a conflict, the cap, a
//     malformed body) spends it afterwards as one autocommitted statement
//     (charge), after a2a-go has written the answer and before the
//     response is complete. Its own 429 is ignored: the answer is
//     decided before it and does not depend on it, so a stranger and a
//     friend still get identical answers.
//
// The slot is taken after the gate, in the handler a2a-go calls (guarded),
// which wraps the deny handler exactly as it wraps the mesh's: an agent at
// its cap gets the same 429 from a friend and from a stranger.

// DefaultMaxWaits is the per-caller cap on waiting calls unless
// Gateway.MaxWaits says otherwise: enough for a client that streams a few
// tasks at once, few enough that one agent cannot pin many function
// instances for minutes.
const DefaultMaxWaits = 8

// waitGrace keeps a slot past its call's bound: long enough that a live
// call always frees it itself, short enough that the slot of an instance
// that died comes back soon.
const waitGrace = 10 * time.Second

// waitRetryAfter is the Retry-After of a call over the cap: a slot frees
// when some wait ends, which the gateway cannot foresee.
const waitRetryAfter = 5

// The slot statements: each one autocommitted row change on the primary
// key (inbox_polls' statements, on a2a_waits). Expiry is the database's
// clock, the same for every instance.
const (
	listWaitSlotsSQL = `SELECT slot, expires_at < UTC_TIMESTAMP(6) FROM a2a_waits WHERE agent_id = ?`
	takeFreeWaitSQL  = `INSERT IGNORE INTO a2a_waits (agent_id, slot, holder, expires_at)
VALUES (?, ?, ?, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND))`
	takeExpiredWaitSQL = `UPDATE a2a_waits SET holder = ?, expires_at = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)
WHERE agent_id = ? AND slot = ? AND expires_at < UTC_TIMESTAMP(6)`
	freeWaitSQL = `DELETE FROM a2a_waits WHERE agent_id = ? AND slot = ? AND holder = ?`
)

func (g *Gateway) maxWaits() int {
	if g.MaxWaits <= 0 {
		return DefaultMaxWaits
	}
	return g.MaxWaits
}

// takeWait takes one of caller's slots for up to bound (plus waitGrace):
// ok is false when every slot is held by a live call. One read of the
// caller's slots, then one statement per candidate slot (usually one).
func (g *Gateway) takeWait(ctx context.Context, caller string, bound time.Duration) (release func(), ok bool, err error) {
	slots := g.maxWaits()
	rows, err := g.Tasks.DB.QueryContext(ctx, listWaitSlotsSQL, caller)
	if err != nil {
		return nil, false, err
	}
	held := make(map[int]bool, slots) // slot -> expired
	for rows.Next() {
		var slot int
		var expired bool
		if err := rows.Scan(&slot, &expired); err != nil {
			rows.Close()
			return nil, false, err
		}
		held[slot] = expired
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	holder := outbox.NewEventID()
	ttl := (bound + waitGrace).Microseconds()
	for slot := range slots {
		expired, taken := held[slot]
		var n int64
		switch {
		case !taken:
			n, err = g.exec(ctx, takeFreeWaitSQL, caller, slot, holder, ttl)
		case expired:
			n, err = g.exec(ctx, takeExpiredWaitSQL, holder, ttl, caller, slot)
		default:
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if n == 1 {
			return func() {
				// Freed even when the client went away; if this fails, the
				// slot expires on its own.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_, _ = g.Tasks.DB.ExecContext(ctx, freeWaitSQL, caller, slot, holder)
			}, true, nil
		}
		// Another call took it meanwhile: try the next candidate.
	}
	return nil, false, nil
}

func (g *Gateway) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := g.Tasks.DB.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// hold takes a slot for a waiting call of h's caller, or answers why not:
// over the cap, the call spends its unit (charge) and is answered the rate
// limit's 429.
func (h *meshHandler) hold(ctx context.Context, bound time.Duration) (func(), error) {
	release, ok, err := h.g.takeWait(ctx, h.caller, bound)
	if err != nil {
		h.charge(ctx)
		return nil, h.toA2A(ctx, err)
	}
	if !ok {
		h.charge(ctx)
		return nil, h.toA2A(ctx, &mesh.Error{Kind: mesh.KindRateLimited, Code: "too_many_waits",
			Message:    "more than " + itoa(h.g.maxWaits()) + " waiting calls (blocking sends and streams) at once",
			RetryAfter: waitRetryAfter})
	}
	return release, nil
}

// charge spends the call's one rate unit when nothing has spent it yet and
// the call did not meet the rate limit: one autocommitted statement, its
// own 429 ignored (the answer does not depend on it).
func (h *meshHandler) charge(ctx context.Context) {
	if h.limited.Load() != nil || !h.spent.CompareAndSwap(false, true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := identity.TakeRate(ctx, h.g.Tasks.DB, h.caller, h.g.Tasks.Clock()); err != nil &&
		!mesh.IsKind(err, mesh.KindRateLimited) {
		h.g.log().WarnContext(ctx, "a2a gateway: charging a failed call", "err", err)
	}
}

// guarded is the handler a2a-go calls, around the mesh's handler or the
// deny handler alike: it holds a slot for each waiting call. (A failed
// call's unit is charged by the front once a2a-go is done: serveMethod.)
type guarded struct {
	a2asrv.RequestHandler
	h *meshHandler // the call's state (caller, spent, limited)
}

// SendMessage implements a2asrv.RequestHandler: a blocking send holds a
// slot for SendWait, taken before anything is sent.
func (g guarded) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	if req.Config == nil || !req.Config.ReturnImmediately {
		release, err := g.h.hold(ctx, g.h.g.sendWait())
		if err != nil {
			return nil, err
		}
		defer release()
	}
	return g.RequestHandler.SendMessage(ctx, req)
}

// SendStreamingMessage implements a2asrv.RequestHandler.
func (g guarded) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return g.held(ctx, func() iter.Seq2[a2a.Event, error] { return g.RequestHandler.SendStreamingMessage(ctx, req) })
}

// SubscribeToTask implements a2asrv.RequestHandler.
func (g guarded) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return g.held(ctx, func() iter.Seq2[a2a.Event, error] { return g.RequestHandler.SubscribeToTask(ctx, req) })
}

// held runs a stream while it holds a slot for StreamMax: taken when the
// stream starts and freed when it ends, however it ends.
func (g guarded) held(ctx context.Context, open func() iter.Seq2[a2a.Event, error]) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		release, err := g.h.hold(ctx, g.h.g.streamMax())
		if err != nil {
			yield(nil, err)
			return
		}
		defer release()
		for ev, err := range open() {
			if !yield(ev, err) {
				return
			}
		}
	}
}
