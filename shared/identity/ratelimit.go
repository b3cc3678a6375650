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

// TakeRate spends one request of agentID's budget with a single conditional
// UPDATE. Inside a write transaction it adds no commit of its own, and a 429
// rolls the whole transaction back.
func TakeRate(ctx context.Context, q Querier, agentID string, now time.Time) error {
	const interval = int64(time.Second/time.Microsecond) / RatePerSecond
	const tolerance = interval * RateBurst
	nowUS := now.UnixMicro()
	res, err := q.ExecContext(ctx, `UPDATE rate_limits SET tat_us = GREATEST(tat_us, ?) + ?
WHERE agent_id = ? AND GREATEST(tat_us, ?) + ? - ? <= ?`, nowUS, interval, agentID, nowUS, interval, nowUS, tolerance)
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
	waitUS := tat + interval - tolerance - nowUS
	retry := int((waitUS + 999_999) / 1_000_000)
	if retry < 1 {
		retry = 1
	}
	return &mesh.Error{Kind: mesh.KindRateLimited, Code: "rate_limited",
		Message: fmt.Sprintf("more than %d requests/s (burst %d)", RatePerSecond, RateBurst), RetryAfter: retry}
}
