package meshd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/seal"
)

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

// pollLoop long-polls the inbox API. back, when not nil, closes when auto
// mode finds Kafka reachable again: the loop then ends with errKafkaBack
// (the long-poll in progress is cut; an event being handled is finished).
func (r *runner) pollLoop(ctx context.Context, back <-chan struct{}) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if back != nil {
		go func() {
			select {
			case <-back:
				cancel()
			case <-pctx.Done():
			}
		}()
	}
	stopped := func() error {
		if ctx.Err() != nil {
			return errStop
		}
		if pctx.Err() != nil {
			return errKafkaBack
		}
		return nil
	}
	for attempt := 1; ; {
		if err := stopped(); err != nil {
			return err
		}
		began := r.cfg.Clock()
		page, err := r.cfg.API.Inbox(pctx, r.state.LastSeq, r.cfg.PageSize, r.cfg.PollWait)
		if err == nil {
			err = r.applyPage(ctx, page)
			if err == nil {
				attempt = 1
				if len(page.Events) == 0 && r.cfg.Clock().Sub(began) < time.Second && !r.sleep(pctx, 1) {
					// An empty answer that did not long-poll (a proxy cut
					// it short, say) must not turn into a busy loop.
					return stopped()
				}
				continue
			}
			if !errors.Is(err, errInboxGap) {
				return err
			}
		}
		if err := stopped(); err != nil {
			return err
		}
		if fatal(err) {
			return err
		}
		r.log.Warn("inbox poll failed; retrying", "attempt", attempt, "err", err)
		if !r.sleep(pctx, attempt) {
			return stopped()
		}
		attempt++
	}
}
