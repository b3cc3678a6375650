package identity

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// sendGateSQL is CanCommunicate between two friends, the recipient's
// key_epoch and the liveness of the sender's API key in one statement that
// plans cheaply: every table is a primary key lookup on constants (MariaDB
// and MySQL read such "const" tables while planning, without subqueries to
// optimize or a derived table to materialize). The const tables are read,
// and share-locked, in FROM order: the two agents rows in ascending key
// order (the caller passes lo, hi), then the graph's rows, the lock order
// CanCommunicate keeps. The recipient's agents row stays share-locked until
// the transaction ends, so its key_epoch is the one outbox.Append would
// read. The key is a plain read in a subquery (a locking read clause does
// not reach into subqueries), as the separate check before the transaction
// was. No row: one of the agents does not exist.
const sendGateSQL = `SELECT a1.key_epoch, a2.key_epoch, b1.agent_id IS NULL AND b2.agent_id IS NULL, f.agent_id IS NOT NULL,
(SELECT COUNT(*) FROM api_keys WHERE key_id = ? AND agent_id = ? AND revoked_at IS NULL)
FROM agents a1 JOIN agents a2 ON a2.agent_id = ?
LEFT JOIN agent_blocks b1 ON b1.agent_id = ? AND b1.blocked_id = ?
LEFT JOIN agent_blocks b2 ON b2.agent_id = ? AND b2.blocked_id = ?
LEFT JOIN friendships f ON f.agent_id = ? AND f.friend_id = ?
WHERE a1.agent_id = ? LOCK IN SHARE MODE`

// groupMatesSQL is CanCommunicate's last question, asked only of two agents
// that are not friends (the agents rows are locked already).
const groupMatesSQL = `SELECT COUNT(*) > 0 FROM group_members a JOIN group_members b ON b.group_id = a.group_id
WHERE a.agent_id = ? AND b.agent_id = ? LOCK IN SHARE MODE`

// SendGate is what OpenSendGate tells a two-party send.
type SendGate struct {
	// Reachable is CanCommunicate's answer, holding until the transaction
	// ends.
	Reachable bool
	// ToEpoch is the recipient's key_epoch, share-locked.
	ToEpoch int
}

// OpenSendGate answers, in one statement of the send's transaction q (two
// when the agents are not friends), what LockAgents, CanCommunicate,
// outbox.Append's key_epoch read and the key check of AuthenticateAgent
// would: a revoked keyID ("" when the caller checked it already) is
// ErrKeyRevoked.
func OpenSendGate(ctx context.Context, q Querier, from, to, keyID string) (SendGate, error) {
	if from == to {
		return SendGate{}, nil
	}
	lo, hi := min(from, to), max(from, to)
	var loEpoch, hiEpoch, live int
	var unblocked, friends bool
	err := q.QueryRowContext(ctx, sendGateSQL, keyID, from, hi, from, to, to, from, from, to, lo).
		Scan(&loEpoch, &hiEpoch, &unblocked, &friends, &live)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// An unknown agent: unreachable, once a revoked key has had its 401.
		if keyID != "" {
			if err := CheckKey(ctx, q, from, keyID); err != nil {
				return SendGate{}, err
			}
		}
		return SendGate{}, nil
	case err != nil:
		return SendGate{}, err
	case keyID != "" && live != 1:
		return SendGate{}, ErrKeyRevoked
	}
	g := SendGate{Reachable: unblocked && friends, ToEpoch: hiEpoch}
	if to == lo {
		g.ToEpoch = loEpoch
	}
	if unblocked && !friends {
		if err := q.QueryRowContext(ctx, groupMatesSQL, from, to).Scan(&g.Reachable); err != nil {
			return SendGate{}, err
		}
	}
	return g, nil
}

// SendProcedureArgs are the first nine arguments of the send procedure
// (send_new_task_v2, migrations/0013_outbox_queue.sql), the ones that run
// TakeRateBumping's spend and OpenSendGate's checks inside it: from and to,
// the two agents in the lock order OpenSendGate keeps (lo, hi, and whether
// to is lo, ordered here so that no comparison in SQL depends on a
// collation), keyID ("" when the caller checked it already), and the rate
// check's clock, interval and tolerance in microseconds.
func SendProcedureArgs(from, to, keyID string, now time.Time) []any {
	lo, hi := min(from, to), max(from, to)
	return []any{from, to, lo, hi, to == lo, keyID, now.UnixMicro(), rateInterval, rateTolerance}
}
