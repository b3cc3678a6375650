package meshd

import (
	"context"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/shared/meshclient"
)

// heartbeatCallTimeout bounds one heartbeat. A heartbeat in flight is never
// cut by a stop: a cut request may still be applied by the server after the
// goodbye and turn the agent active again.
const heartbeatCallTimeout = 10 * time.Second

// heartbeat sends one heartbeat, bounded and not canceled by ctx.
func (r *runner) heartbeat(ctx context.Context, stats map[string]any) (meshclient.HeartbeatResult, error) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), heartbeatCallTimeout)
	defer cancel()
	return r.cfg.API.Heartbeat(hctx, r.cfg.InstanceID, stats)
}

// firstHeartbeat announces the agent before delivery starts and checks the
// state against the mesh: inbox seqs never go back, so an inbox that ends
// below what the state says was handled is another mesh (or a database that
// was reset), and trusting the state would silently skip its events.
func (r *runner) firstHeartbeat(ctx context.Context) error {
	if r.state.Lost.Total > 0 {
		l := r.state.Lost
		r.lost.Store(&l)
	}
	res, err := r.heartbeat(ctx, r.withLost(map[string]any{"last_seq": r.state.LastSeq, "starting": true}))
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
	r.announced.Store(true)
	return nil
}

// heartbeats reports presence every HeartbeatEvery (the first beat was
// sent by firstHeartbeat) and records the API's newest seq for stall
// detection. It returns when ctx ends, after the beat in flight.
func (r *runner) heartbeats(ctx context.Context) {
	t := time.NewTicker(r.cfg.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := r.heartbeat(ctx, r.withLost(map[string]any{"last_seq": r.handled.Load(), "mode": r.currentMode(), "parked": r.parkedCount()}))
		if err != nil {
			r.log.Warn("heartbeat failed", "err", err)
			continue
		}
		r.serverLast.Store(res.LastSeq)
		r.announced.Store(true)
		if tok, terr := r.cfg.API.Token(ctx); terr == nil && res.KeyEpoch > tok.KeyEpoch() {
			// The agent's inbox key was rotated: fetch the new one now
			// rather than at the first record that fails to open.
			if _, err := r.cfg.API.RefreshToken(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("could not refresh the token after a key rotation", "err", err)
			}
		}
	}
}

// goodbye tells the API this instance is stopping (the agent turns
// draining), bounded by GoodbyeTimeout whatever the state of ctx.
func (r *runner) goodbye(ctx context.Context) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.GoodbyeTimeout)
	defer cancel()
	if r.announced.Load() {
		// The last handled seq, so a meshd started later from a fresh
		// state dir resumes after it (meshd run's default --from). Sent
		// before the goodbye: a heartbeat after it would turn the agent
		// active again.
		if _, err := r.cfg.API.Heartbeat(gctx, r.cfg.InstanceID, r.withLost(map[string]any{"last_seq": r.handled.Load(), "mode": r.currentMode(), "stopping": true})); err != nil {
			r.log.Debug("last heartbeat failed", "err", err)
		}
	}
	if _, err := r.cfg.API.GoOffline(gctx, r.cfg.InstanceID); err != nil {
		r.log.Warn("could not mark the agent offline", "err", err)
	}
}

// parkedCount is the number of parked events, reported in heartbeats so the
// owner's console can show them; -1 when the list cannot be read.
func (r *runner) parkedCount() int {
	seqs, err := deadLetterSeqs(DeadLetterDir(r.cfg.StateDir, r.agentID))
	if err != nil {
		return -1
	}
	return len(seqs)
}
