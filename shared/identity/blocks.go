package identity

import (
	"context"
	"database/sql"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// Block is one entry of an agent's block list.
type Block = api.Block

// blockedEither reports who of a and b blocked the other: a, b, or "" when
// neither did (a when both did: the caller's own block is the one it can
// act on).
func blockedEither(ctx context.Context, q Querier, a, b string) (string, error) {
	rows, err := q.QueryContext(ctx, `SELECT agent_id FROM agent_blocks
WHERE (agent_id = ? AND blocked_id = ?) OR (agent_id = ? AND blocked_id = ?)`, a, b, b, a)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	who := ""
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return "", err
		}
		if who == "" || id == a {
			who = id
		}
	}
	return who, rows.Err()
}

// BlockAgent makes caller refuse target: target can no longer send caller
// friend requests (they are answered as usual and dropped) or messages, and
// caller cannot message target either. Their friendship ends and pending
// requests between them are settled. Blocking is idempotent, and blocking an
// id that does not exist answers the same and stores nothing.
func (s *Service) BlockAgent(ctx context.Context, caller, target string) error {
	if !mesh.ValidAgentID(target) {
		return errInvalidAgentID("agent_id")
	}
	if target == caller {
		return mesh.Errorf(mesh.KindUnprocessable, "self_block", "an agent cannot block itself")
	}
	now := s.Now()
	return s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if err := TakeRate(ctx, tx, caller, now); err != nil {
			return err
		}
		found, err := lockPair(ctx, tx, caller, target)
		if err != nil || !found[target] {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO agent_blocks (agent_id, blocked_id, created_at) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE created_at = created_at`, caller, target, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM friendships WHERE (agent_id = ? AND friend_id = ?) OR (agent_id = ? AND friend_id = ?)",
			caller, target, target, caller); err != nil {
			return err
		}
		// The blocked agent's requests count as rejected (so the cool-down
		// applies after an unblock too); the caller's own are withdrawn.
		_, err = tx.ExecContext(ctx, `UPDATE friend_requests SET decided_at = ?,
  status = CASE WHEN from_agent = ? THEN 'rejected' ELSE 'withdrawn' END
WHERE status = 'pending' AND ((from_agent = ? AND to_agent = ?) OR (from_agent = ? AND to_agent = ?))`,
			now, target, target, caller, caller, target)
		return err
	})
}

// UnblockAgent lifts caller's block of target; lifting no block is a no-op.
// Friendship is not restored: either side may send a new request.
func (s *Service) UnblockAgent(ctx context.Context, caller, target string) error {
	if !mesh.ValidAgentID(target) {
		return errInvalidAgentID("agent_id")
	}
	now := s.Now()
	return s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if err := TakeRate(ctx, tx, caller, now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "DELETE FROM agent_blocks WHERE agent_id = ? AND blocked_id = ?", caller, target)
		return err
	})
}

// ListBlocks returns a page of the agents caller blocked, by agent id.
func (s *Service) ListBlocks(ctx context.Context, caller string, p Page) (api.BlockPage, error) {
	if err := s.takeReadRate(ctx, caller); err != nil {
		return api.BlockPage{}, err
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT blocked_id, created_at FROM agent_blocks
WHERE agent_id = ? AND blocked_id > ? ORDER BY blocked_id LIMIT ?`, caller, p.After, p.Limit+1)
	if err != nil {
		return api.BlockPage{}, err
	}
	defer rows.Close()
	list := []Block{}
	for rows.Next() {
		var b Block
		if err := rows.Scan(&b.AgentID, &b.Since); err != nil {
			return api.BlockPage{}, err
		}
		list = append(list, b)
	}
	if err := rows.Err(); err != nil {
		return api.BlockPage{}, err
	}
	list, next := cutPage(list, p.Limit, func(x Block) string { return x.AgentID })
	return api.BlockPage{Blocks: list, NextAfter: next}, nil
}
