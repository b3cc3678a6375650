package identity

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

// Rate limit: 50 requests/s per agent with bursts of 100, as GCRA. The state is
// one row per agent in the database, so it holds across every concurrent
// function instance.
const (
	RatePerSecond = 50
	RateBurst     = 100
)

// GCRA in microseconds: the emission interval of one request and the
// bucket's tolerance (the burst).
const (
	rateInterval  = int64(time.Second/time.Microsecond) / RatePerSecond
	rateTolerance = rateInterval * RateBurst
)

// takeReadRate spends one request of the caller's budget as its own
// autocommit statement before a read: every read route pays, as every write
// does inside its transaction.
func (s *Service) takeReadRate(ctx context.Context, caller string) error {
	return TakeRate(ctx, s.DB, caller, s.Now())
}

// TakeRate spends one request of agentID's budget with a single conditional
// UPDATE. Inside a write transaction it adds no commit of its own, and a 429
// rolls the whole transaction back.
func TakeRate(ctx context.Context, q Querier, agentID string, now time.Time) error {
	return TakeRateN(ctx, q, agentID, now, 1, 0)
}

// TakeRateN makes one request cost total units of agentID's budget, of which
// the same transaction already spent spent (a write takes its first unit
// before it knows its cost; a group send then costs one unit per
// recipient). It is all or nothing: the 429 rolls the transaction back,
// spent units included. A cost above the burst can never fit the bucket, so
// it passes only when the bucket was full before the request, leaving the
// agent in debt: no further request passes until the cost has refilled
// (total/RatePerSecond seconds).
func TakeRateN(ctx context.Context, q Querier, agentID string, now time.Time, total, spent int) error {
	if total <= spent {
		return nil
	}
	more, before := rateInterval*int64(total-spent), rateInterval*int64(spent)
	nowUS := now.UnixMicro()
	res, err := q.ExecContext(ctx, `UPDATE rate_limits SET tat_us = GREATEST(tat_us, ?) + ?
WHERE agent_id = ? AND (GREATEST(tat_us, ?) + ? - ? <= ? OR tat_us - ? <= ?)`,
		nowUS, more, agentID, nowUS, more, nowUS, rateTolerance, before, nowUS)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	var tat int64
	if err := q.QueryRowContext(ctx, "SELECT tat_us FROM rate_limits WHERE agent_id = ?", agentID).Scan(&tat); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return mesh.ErrUnauthorized
		}
		return err
	}
	return rateLimited(tat, nowUS, total, spent)
}

// rateLimited is the 429 of a request of cost total (spent of it already
// taken) refused at nowUS by a bucket at tat.
func rateLimited(tat, nowUS int64, total, spent int) error {
	before := rateInterval * int64(spent)
	// The request fits once the bucket (as it was before the request) has
	// drained enough for its whole cost or, for a cost above the burst,
	// once it is full.
	tat0 := tat - before
	waitUS := min(tat0+rateInterval*int64(total)-rateTolerance, tat0) - nowUS
	retry := int((waitUS + 999_999) / 1_000_000)
	if retry < 1 {
		retry = 1
	}
	msg := fmt.Sprintf("more than %d requests/s (burst %d)", RatePerSecond, RateBurst)
	if total > 1 {
		msg = fmt.Sprintf("this request costs %d units (one per recipient); the budget is %d/s with a burst of %d", total, RatePerSecond, RateBurst)
	}
	return &mesh.Error{Kind: mesh.KindRateLimited, Code: "rate_limited", Message: msg, RetryAfter: retry}
}

// takeRateBumpingSQL is TakeRate's UPDATE joined with the recipient's inbox
// counter: one statement spends the sender's token and hands back the
// recipient's next seq as its insert id (LAST_INSERT_ID(expr), as
// outbox.Append's lone-recipient bump does). It matches two rows or none.
// rate_limits comes first in the join, as every write takes its rate row
// before any counter.
const takeRateBumpingSQL = `UPDATE rate_limits r STRAIGHT_JOIN inbox_counters c ON c.recipient = ?
SET r.tat_us = GREATEST(r.tat_us, ?) + ?, c.last_seq = LAST_INSERT_ID(c.last_seq + 1)
WHERE r.agent_id = ? AND GREATEST(r.tat_us, ?) + ? - ? <= ?`

// whyNoBumpSQL tells, after takeRateBumpingSQL matched nothing, a revoked key
// from a missing rate row, a spent budget and an unknown recipient.
const whyNoBumpSQL = `SELECT (SELECT COUNT(*) FROM api_keys WHERE key_id = ? AND agent_id = ? AND revoked_at IS NULL),
(SELECT tat_us FROM rate_limits WHERE agent_id = ?), (SELECT COUNT(*) FROM inbox_counters WHERE recipient = ?)`

// TakeRateBumping is TakeRate for a two-party send, fused with the bump of
// recipient's inbox counter: it returns the seq the send's event takes (its
// counter row stays locked until the transaction ends, so seqs are
// gapless and in commit order). Only when nothing matched does a second
// read find out why, answering as the separate checks would, in their
// order: a revoked key (keyID, "" for none) is 401 key_revoked, a missing
// rate row 401, a spent budget 429, an unknown recipient 403
// not_reachable. The key's liveness on success is OpenSendGate's to check.
func TakeRateBumping(ctx context.Context, q Querier, agentID, keyID, recipient string, now time.Time) (int64, error) {
	nowUS := now.UnixMicro()
	res, err := q.ExecContext(ctx, takeRateBumpingSQL, recipient, nowUS, rateInterval, agentID, nowUS, rateInterval, nowUS, rateTolerance)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 2 {
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	var live, counters int
	var tat sql.NullInt64
	if err := q.QueryRowContext(ctx, whyNoBumpSQL, keyID, agentID, agentID, recipient).Scan(&live, &tat, &counters); err != nil {
		return 0, err
	}
	switch {
	case keyID != "" && live != 1:
		return 0, ErrKeyRevoked
	case !tat.Valid:
		return 0, mesh.ErrUnauthorized
	case max(tat.Int64, nowUS)+rateInterval-nowUS > rateTolerance:
		return 0, rateLimited(tat.Int64, nowUS, 1, 0)
	case counters == 0:
		return 0, mesh.ErrNotReachable
	}
	// The row changed between the two statements (another instance of
	// the agent): answer as a throttle would, retried by the client.
	return 0, rateLimited(tat.Int64, nowUS, 1, 0)
}
