package meshd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// open opens a record of this agent's routing id with the token's inbox
// keys. A record sealed under an epoch newer than the token knows (the key
// was rotated or revoked since) makes it fetch a new token, whose keys it
// tries once.
func (r *runner) open(ctx context.Context, value []byte) (mesh.Envelope, error) {
	keys, current, err := r.inboxKeys(ctx, false)
	if err != nil {
		return mesh.Envelope{}, err
	}
	env, err := seal.OpenEvent(keys, r.routingID, value)
	if !errors.Is(err, seal.ErrNoKey) {
		return env, err
	}
	var rec seal.Record
	if json.Unmarshal(value, &rec) != nil || rec.KeyEpoch <= current || rec.KeyEpoch <= r.refreshedFor {
		return env, err // an epoch older than the token's keys, or one a refresh did not bring
	}
	r.refreshedFor = rec.KeyEpoch
	r.log.Info("a record is sealed under a newer inbox key epoch; fetching a new token", "key_epoch", rec.KeyEpoch, "token_key_epoch", current)
	if keys, _, err = r.inboxKeys(ctx, true); err != nil {
		return mesh.Envelope{}, err
	}
	return seal.OpenEvent(keys, r.routingID, value)
}

// keysID identifies the token whose inbox keys the runner decoded.
type keysID struct {
	token           string
	oldest, current int
}

// inboxKeys returns the token's inbox keys by epoch and the current epoch,
// decoded once per token; refresh fetches a new token first.
func (r *runner) inboxKeys(ctx context.Context, refresh bool) (map[int][]byte, int, error) {
	get := r.cfg.API.Token
	if refresh {
		get = r.cfg.API.RefreshToken
	}
	tok, err := get(ctx)
	if err != nil {
		return nil, 0, err
	}
	// Two tokens minted within a second can be equal strings: the epochs
	// are part of what identifies the decoded keys. Compared field by
	// field, not formatted: this runs for every record.
	of := keysID{token: tok.Token, current: tok.KeyEpoch()}
	if len(tok.InboxKeys) > 0 {
		of.oldest = tok.InboxKeys[0].KeyEpoch
	}
	if of != r.keysOf || r.keys == nil {
		if r.keys, err = tok.Keys(); err != nil {
			return nil, 0, err
		}
		r.keysOf = of
	}
	return r.keys, tok.KeyEpoch(), nil
}

// fromInbox stands in for a record of this agent that does not open (sealed
// under an epoch no longer in the token, damaged): the record's content,
// seq included, is unreadable, but records of one recipient come in seq
// order, so it stands for the next unhandled event or repeats a handled
// one. It delivers that next event from the inbox API (MySQL is the source
// of truth) when there is one, reports it lost when retention removed it,
// and otherwise skips the record as a repeat.
func (r *runner) fromInbox(ctx context.Context, offset int64) error {
	next := r.state.LastSeq + 1
	for attempt := 1; ; attempt++ {
		page, err := r.cfg.API.Inbox(ctx, r.state.LastSeq, 1, 0)
		if err == nil {
			switch {
			case len(page.Events) > 0 && page.Events[0].Seq == next:
				return r.deliver(ctx, page.Events[0], offset)
			case page.OldestSeq > next:
				// Kafka kept the record longer than MySQL kept the event:
				// nothing can deliver it any more.
				r.reportLost(next, next, page.OldestSeq)
				r.state.LastSeq, r.state.Offset = next, offset
				if err := r.persist(); err != nil {
					return err
				}
				r.handled.Store(next)
				return nil
			case len(page.Events) == 0:
				r.state.Offset, r.dirty = offset, true // a repeat of a handled event
				return nil
			}
			err = fmt.Errorf("%w: have %d, next is %d, oldest retained %d", errInboxGap, r.state.LastSeq, page.Events[0].Seq, page.OldestSeq)
		} else if fatal(err) {
			return err
		}
		r.log.Warn("cannot read the next event from the inbox API; retrying", "seq", next, "attempt", attempt, "err", err)
		if !r.sleep(ctx, attempt) {
			return errStop
		}
	}
}

// reportLost records that seqs from..to expired from the mesh's retention
// (the outbox, and Kafka) before they were handled: an error log, the
// state's Lost (meshd status; persisted with the next mark) and the
// heartbeats' stats (the console). Delivery goes on with the retained
// events.
func (r *runner) reportLost(from, to, oldest int64) {
	l := LostEvents{FromSeq: from, ToSeq: to, Total: r.state.Lost.Total + to - from + 1, At: r.cfg.Clock().UTC()}
	r.log.Error("events expired before they were handled; they cannot be delivered",
		"from_seq", from, "to_seq", to, "lost", l.Count(), "lost_total", l.Total, "oldest_retained", oldest)
	r.state.Lost, r.dirty = l, true
	r.lost.Store(&l)
}

// withLost adds the latest loss, if any, to a heartbeat's stats: the API
// keeps only the latest stats, so every heartbeat carries it.
func (r *runner) withLost(stats map[string]any) map[string]any {
	if l := r.lost.Load(); l != nil {
		stats["lost"] = map[string]any{"events": l.Count(), "from_seq": l.FromSeq, "to_seq": l.ToSeq, "total": l.Total, "at": l.At}
	}
	return stats
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

// catchUpInbox delivers whatever the inbox API has after the handled seq:
// after a push connection opens (so nothing published meanwhile is missed),
// and when a pushed frame cannot be used. It retries failures with backoff
// until ctx ends; a fatal API error is returned.
func (r *runner) catchUpInbox(ctx context.Context) error {
	for attempt := 1; ; {
		page, err := r.cfg.API.Inbox(ctx, r.state.LastSeq, r.cfg.PageSize, 0)
		if err == nil {
			if err = r.applyPage(ctx, page); err == nil {
				if len(page.Events) < r.cfg.PageSize {
					return nil // nothing more after this page
				}
				attempt = 1
				continue
			}
			if !errors.Is(err, errInboxGap) {
				return err
			}
		} else if fatal(err) {
			return err
		}
		if ctx.Err() != nil {
			return errStop
		}
		r.log.Warn("inbox catch-up failed; retrying", "last_seq", r.state.LastSeq, "attempt", attempt, "err", err)
		if !r.sleep(ctx, attempt) {
			return errStop
		}
		attempt++
	}
}

var errInboxGap = errors.New("meshd: the inbox API skipped a seq it still retains")

// applyPage delivers a page's new events in order. Events before the page's
// oldest_seq are gone for good (retention); a hole inside retention is an
// error to retry, never a skip.
func (r *runner) applyPage(ctx context.Context, page meshclient.InboxPage) error {
	if len(page.Events) == 0 && page.OldestSeq > r.state.LastSeq+1 {
		// Everything we had not handled expired and nothing newer exists.
		r.reportLost(r.state.LastSeq+1, page.OldestSeq-1, page.OldestSeq)
		r.state.LastSeq = page.OldestSeq - 1
		r.handled.Store(r.state.LastSeq)
		return r.persist()
	}
	for i, ev := range page.Events {
		if ev.Seq <= r.state.LastSeq {
			continue
		}
		if ev.Seq > r.state.LastSeq+1 {
			if page.OldestSeq < ev.Seq {
				return fmt.Errorf("%w: have %d, next is %d, oldest retained %d", errInboxGap, r.state.LastSeq, ev.Seq, page.OldestSeq)
			}
			r.reportLost(r.state.LastSeq+1, ev.Seq-1, page.OldestSeq)
		}
		if ev.To != "" && ev.To != r.agentID {
			return fmt.Errorf("meshd: the inbox API returned an event for %q", ev.To)
		}
		if bh, ok := r.batchHandler(); ok {
			if envs := r.pageBatch(page.Events[i:]); len(envs) > 1 {
				if err := r.deliverBatch(ctx, bh, envs, noOffsets(len(envs))); err != nil {
					return err
				}
				continue
			}
		}
		if err := r.deliver(ctx, ev, -1); err != nil {
			return err
		}
	}
	return nil
}

// pageBatch is the run of events at the head of evs that can go as one
// batch: consecutive seqs from the one after the handled one, this agent's,
// up to Config.Batch events and MaxBatchBytes of stdin.
func (r *runner) pageBatch(evs []mesh.Envelope) []mesh.Envelope {
	size, n := 0, 0
	for _, ev := range evs {
		if n == r.cfg.Batch || ev.Seq != r.state.LastSeq+1+int64(n) || (ev.To != "" && ev.To != r.agentID) || !batchable(ev) {
			break
		}
		line, err := BatchLine(ev)
		if err != nil || (n > 0 && size+len(line) > MaxBatchBytes) {
			break
		}
		size += len(line)
		n++
	}
	return evs[:n]
}

// noOffsets is n times -1: events read from the inbox API have no Kafka
// offset.
func noOffsets(n int) []int64 {
	o := make([]int64, n)
	for i := range o {
		o[i] = -1
	}
	return o
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
// mode finds Kafka or the push channel reachable again: the loop then ends
// with errChannelBack
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
			return errChannelBack
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
