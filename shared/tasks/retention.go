package tasks

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentmesh/agentmesh/shared/identity"
)

// Idempotency keys are kept as long as outbox events: a client retrying the
// same message_id within the retention gets the original answer; the window
// is days, not a count of recent ids, so no burst of traffic can push a key
// out while its client still retries.
const (
	oldIdemKeysSQL   = `SELECT sender, message_id FROM idempotency_keys WHERE created_at < ? ORDER BY created_at LIMIT ?`
	deleteIdemKeySQL = `DELETE FROM idempotency_keys WHERE (sender, message_id) IN ((?, ?)) AND created_at < ?`
)

// RunJanitor is the OutboxJanitorFunction's job: expired outbox rows,
// refilled authentication throttles, expired idempotency keys, then the
// history past its retention (s.Retention: terminal tasks with their
// messages and artifacts, the audit log, answered friend requests, expired
// sessions, revoked keys), each in small batches.
func (s *Service) RunJanitor(ctx context.Context) error {
	s.WithDefaults()
	if err := s.Janitor.Run(ctx); err != nil {
		return err
	}
	for {
		// Three statements of at most a batch each per round (one per kind
		// of bucket), until a round finds less than a full batch.
		n, err := identity.ExpireThrottles(ctx, s.DB, s.Clock(), s.Janitor.BatchSize())
		if err != nil {
			return err
		}
		if n < s.Janitor.BatchSize() || ctx.Err() != nil {
			break
		}
	}
	for {
		n, err := s.ExpireIdempotencyKeys(ctx)
		if err != nil {
			return err
		}
		if n < s.Janitor.BatchSize() || ctx.Err() != nil {
			break
		}
	}
	r := s.Retention
	if r.DB == nil {
		r.DB = s.DB
	}
	if r.Clock == nil {
		r.Clock = s.Clock
	}
	if r.Log == nil {
		r.Log = s.Log
	}
	_, err := r.Run(ctx)
	return err
}

// ExpireIdempotencyKeys deletes one batch of keys older than the retention
// and returns how many it deleted.
func (s *Service) ExpireIdempotencyKeys(ctx context.Context) (int, error) {
	s.WithDefaults()
	cutoff := s.Clock().Add(-s.Janitor.Retention)
	batch := s.Janitor.BatchSize()
	rows, err := s.DB.QueryContext(ctx, oldIdemKeysSQL, cutoff, batch)
	if err != nil {
		return 0, err
	}
	var args []any
	for rows.Next() {
		var sender, id string
		if err := rows.Scan(&sender, &id); err != nil {
			rows.Close()
			return 0, err
		}
		args = append(args, sender, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(args) == 0 {
		return 0, err
	}
	n := len(args) / 2
	// One row-constructor list, locking exactly the chosen keys by primary key.
	query := strings.Replace(deleteIdemKeySQL, "((?, ?))", "("+strings.TrimSuffix(strings.Repeat("(?, ?),", n), ",")+")", 1)
	res, err := s.DB.ExecContext(ctx, query, append(args, cutoff)...)
	if err != nil {
		return 0, fmt.Errorf("tasks: expire idempotency keys: %w", err)
	}
	deleted, _ := res.RowsAffected()
	return int(deleted), nil
}
