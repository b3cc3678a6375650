package identity

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/textlimit"
)

// A budget is a GCRA rate: one unit every Per, bursts of Burst.
type budget struct {
	Per   time.Duration
	Burst int
}

// Budgets of failed authentication and of the admin routes. Failures are
// counted per API key id (someone guessing one key's secret) and per source
// address (someone guessing many keys, or the admin key); while a budget is
// spent, attempts are refused with 429 before any credential is checked, so
// guessing gets no answer at all.
var (
	keyFailures   = budget{Per: 6 * time.Second, Burst: 10}
	addrFailures  = budget{Per: time.Second, Burst: 30}
	adminRequests = budget{Per: time.Second / RatePerSecond, Burst: RateBurst}
)

// Buckets live in rate_limits beside the agents' own, keyed so that they can
// never collide with an agent id (':' is not allowed in one).
const (
	keyBucket   = "authkey:"
	addrBucket  = "authaddr:"
	adminBucket = "admin:requests"
)

// throttle is one bucket with its budget.
type throttle struct {
	bucket string
	budget budget
}

// authThrottles are the failure buckets of an authentication attempt: the
// key id's when there is one and the source address's when it is known.
func authThrottles(keyID, addr string) []throttle {
	var out []throttle
	if keyID != "" {
		out = append(out, throttle{keyBucket + keyID, keyFailures})
	}
	if addr != "" {
		out = append(out, throttle{addrBucket + truncateBucket(addr), addrFailures})
	}
	return out
}

// truncateBucket keeps a bucket id inside the column (64 characters), on a
// character boundary: a cut through one would make strict mode refuse the row.
func truncateBucket(s string) string {
	return textlimit.Truncate(s, 64-len(addrBucket))
}

// checkThrottles answers 429 when any bucket has no unit left, without
// spending one.
func (s *Service) checkThrottles(ctx context.Context, ts []throttle, now time.Time) error {
	for _, t := range ts {
		var tat int64
		err := s.DB.QueryRowContext(ctx, "SELECT tat_us FROM rate_limits WHERE agent_id = ?", t.bucket).Scan(&tat)
		if err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			return err
		}
		if wait := tat + t.budget.interval() - t.budget.tolerance() - now.UnixMicro(); wait > 0 {
			return throttled(wait, t.budget)
		}
	}
	return nil
}

// spend takes one unit from each bucket, creating it on first use. The
// theoretical arrival time is capped one interval past the burst, so a
// flood of concurrent failures cannot lock a key or address out for longer
// than one refill.
func (s *Service) spend(ctx context.Context, ts []throttle, now time.Time) error {
	n := now.UnixMicro()
	for _, t := range ts {
		iv, tol := t.budget.interval(), t.budget.tolerance()
		if _, err := s.DB.ExecContext(ctx, `INSERT INTO rate_limits (agent_id, tat_us) VALUES (?, ?)
ON DUPLICATE KEY UPDATE tat_us = LEAST(GREATEST(tat_us, ?) + ?, ?)`, t.bucket, n+iv, n, iv, n+tol+iv); err != nil {
			return err
		}
	}
	return nil
}

// takeAdmin spends one unit of the admin routes' shared budget, or answers
// 429 when it is spent.
func (s *Service) takeAdmin(ctx context.Context, now time.Time) error {
	t := throttle{adminBucket, adminRequests}
	if err := s.checkThrottles(ctx, []throttle{t}, now); err != nil {
		return err
	}
	return s.spend(ctx, []throttle{t}, now)
}

// signInBucket is the failure bucket of one account's email: a hash, so
// that any email fits the column and none is stored in clear.
const signInBucket = "signin:"

// signInThrottles are the failure buckets of a sign-in: the email's (someone
// guessing one account's password, the same budget as one API key's) and
// the source address's (when known), shared with failed API key attempts.
func signInThrottles(email, addr string) []throttle {
	h := sha256.Sum256([]byte(email))
	out := []throttle{{signInBucket + hex.EncodeToString(h[:16]), keyFailures}}
	if addr != "" {
		out = append(out, throttle{addrBucket + truncateBucket(addr), addrFailures})
	}
	return out
}

// CheckSignIn answers 429 while the failure budget of email or of the
// client's address sourceAddr ("" when unknown) is spent, before any
// password is checked.
func (s *Service) CheckSignIn(ctx context.Context, email, sourceAddr string) error {
	return s.checkThrottles(ctx, signInThrottles(email, sourceAddr), s.Now())
}

// FailSignIn spends one unit of the failure budgets of email and of the
// address sourceAddr ("" when unknown).
func (s *Service) FailSignIn(ctx context.Context, email, sourceAddr string) error {
	return s.spend(ctx, signInThrottles(email, sourceAddr), s.Now())
}

func (b budget) interval() int64  { return b.Per.Microseconds() }
func (b budget) tolerance() int64 { return b.Per.Microseconds() * int64(b.Burst) }

func throttled(waitUS int64, b budget) error {
	retry := int((waitUS + 999_999) / 1_000_000)
	return &mesh.Error{Kind: mesh.KindRateLimited, Code: "rate_limited",
		Message:    fmt.Sprintf("too many attempts (at most %d at once, then one every %s)", b.Burst, b.Per),
		RetryAfter: max(retry, 1)}
}

// expiredThrottlesSQL finds buckets of failed authentication that have fully
// refilled: keeping them would change no answer. The prefix keeps the scan
// on the primary key's range of those buckets, never on agents' own rows.
const (
	expiredKeyThrottlesSQL    = `DELETE FROM rate_limits WHERE agent_id LIKE 'authkey:%' AND tat_us < ? LIMIT ?`
	expiredAddrThrottlesSQL   = `DELETE FROM rate_limits WHERE agent_id LIKE 'authaddr:%' AND tat_us < ? LIMIT ?`
	expiredSignInThrottlesSQL = `DELETE FROM rate_limits WHERE agent_id LIKE 'signin:%' AND tat_us < ? LIMIT ?`
)

// ExpireThrottles deletes up to batch refilled failure buckets of each kind
// (rows for addresses would otherwise pile up) and returns how many it
// deleted. The outbox janitor calls it.
func ExpireThrottles(ctx context.Context, q Querier, now time.Time, batch int) (int, error) {
	total := 0
	for _, query := range []string{expiredKeyThrottlesSQL, expiredAddrThrottlesSQL, expiredSignInThrottlesSQL} {
		res, err := q.ExecContext(ctx, query, now.UnixMicro(), batch)
		if err != nil {
			return total, err
		}
		n, _ := res.RowsAffected()
		total += int(n)
	}
	return total, nil
}
