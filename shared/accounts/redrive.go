package accounts

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

// DeadLetter is an event the dispatcher gave up on.
type DeadLetter = api.DeadLetter

// Backlog is one recipient's count of pending events.
type Backlog = api.Backlog

// OutboxHealth is the operator's view of the outbox.
type OutboxHealth = api.OutboxHealth

var errNotOperator = mesh.Errorf(mesh.KindForbidden, "operator_only", "only operator accounts see the outbox")

// RequireOperator refuses acc unless it is an operator account: only those
// read the outbox's health and redrive dead letters.
func RequireOperator(acc Account) error {
	if !acc.Operator {
		return errNotOperator
	}
	return nil
}

// maxDeadLettersShown bounds the dead letters listed by OutboxHealth.
const maxDeadLettersShown = 50

// Health reads the outbox's health. Only pending and failed events are
// read (the queue, and the (delivery, ...) indexes), never the sent bulk.
func (s *Service) Health(ctx context.Context) (OutboxHealth, error) {
	h := OutboxHealth{Recent: []DeadLetter{}, Backlog: []Backlog{}}
	var oldest sql.NullTime
	if err := s.DB.QueryRowContext(ctx, "SELECT COUNT(*), MIN(e.occurred_at) FROM "+outbox.PendingEventsSQL+
		" p JOIN outbox_events e ON e.recipient = p.recipient AND e.seq = p.seq").Scan(&h.Pending, &oldest); err != nil {
		return h, err
	}
	if oldest.Valid {
		h.OldestPendingSeconds = max(s.now().Sub(oldest.Time).Seconds(), 0)
	}
	if err := s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox_events WHERE delivery = 'failed'").Scan(&h.DeadLetters); err != nil {
		return h, err
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT recipient, seq, event_id, type, last_error, sent_at FROM outbox_events
WHERE delivery = 'failed' ORDER BY recipient, seq LIMIT ?`, maxDeadLettersShown)
	if err != nil {
		return h, err
	}
	for rows.Next() {
		var d DeadLetter
		var le sql.NullString
		var at sql.NullTime
		if err := rows.Scan(&d.Recipient, &d.Seq, &d.EventID, &d.Type, &le, &at); err != nil {
			rows.Close()
			return h, err
		}
		if le.Valid {
			d.LastError = &le.String
		}
		d.FailedAt = at.Time
		h.Recent = append(h.Recent, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return h, err
	}
	rows, err = s.DB.QueryContext(ctx, `SELECT recipient, COUNT(*) AS n FROM `+outbox.PendingEventsSQL+` p
GROUP BY recipient ORDER BY n DESC, recipient LIMIT 10`)
	if err != nil {
		return h, err
	}
	defer rows.Close()
	for rows.Next() {
		var b Backlog
		if err := rows.Scan(&b.Recipient, &b.Pending); err != nil {
			return h, err
		}
		h.Backlog = append(h.Backlog, b)
	}
	return h, rows.Err()
}

// Redriven is the answer to a redrive.
type Redriven = api.Redriven

// MaxRedriveRecipients bounds the recipients one redrive call requeues;
// call again for the rest.
const MaxRedriveRecipients = 100

// Redrive puts the dead letters of recipient ("" for every recipient, up to
// MaxRedriveRecipients) back to pending, with the recipient's backoff reset,
// so the dispatcher publishes them again (it queues them before the
// recipient's queued events, see outbox.PendingEventsSQL). Order holds: a recipient's dead
// letters are older than any of its pending events, and the dispatcher
// publishes a recipient's pending events in seq order. Each recipient is
// requeued in one transaction holding its dispatch_state row, the lock a
// dispatcher holds while it publishes that recipient, and audited in it.
func (s *Service) Redrive(ctx context.Context, by identity.Actor, recipient string) (Redriven, error) {
	out := Redriven{Recipients: []string{}}
	if recipient != "" && !mesh.ValidAgentID(recipient) {
		return out, mesh.Errorf(mesh.KindUnprocessable, "invalid_recipient", "recipient must be an agent id")
	}
	var recipients []string
	if recipient != "" {
		recipients = []string{recipient}
	} else {
		rows, err := s.DB.QueryContext(ctx, "SELECT DISTINCT recipient FROM outbox_events WHERE delivery = 'failed' ORDER BY recipient LIMIT ?", MaxRedriveRecipients)
		if err != nil {
			return out, err
		}
		for rows.Next() {
			var r string
			if err := rows.Scan(&r); err != nil {
				rows.Close()
				return out, err
			}
			recipients = append(recipients, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, err
		}
	}
	ctx = identity.WithActor(ctx, by)
	for _, r := range recipients {
		var n int64
		err := s.DB.InTx(ctx, func(tx *sql.Tx) error {
			n = 0
			now := s.now()
			if _, err := tx.ExecContext(ctx, "INSERT IGNORE INTO dispatch_state (recipient, attempts, next_attempt_at) VALUES (?, 0, ?)", r, now); err != nil {
				return err
			}
			var attempts int
			if err := tx.QueryRowContext(ctx, "SELECT attempts FROM dispatch_state WHERE recipient = ? FOR UPDATE", r).Scan(&attempts); err != nil {
				return err
			}
			var first, last sql.NullInt64
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*), MIN(seq), MAX(seq) FROM outbox_events WHERE recipient = ? AND delivery = 'failed' FOR UPDATE", r).Scan(&n, &first, &last); err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			// sent_at goes back to a pending row's placeholder (outbox.Append).
			if _, err := tx.ExecContext(ctx, "UPDATE outbox_events SET delivery = 'pending', sent_at = occurred_at WHERE recipient = ? AND delivery = 'failed'", r); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "UPDATE dispatch_state SET attempts = 0, last_error = NULL, next_attempt_at = ? WHERE recipient = ?", now, r); err != nil {
				return err
			}
			return identity.Audit(ctx, tx, by, now, identity.AuditOutboxRedriven, r, "", fmt.Sprintf("%d dead letters requeued (seq %d to %d)", n, first.Int64, last.Int64))
		})
		if err != nil {
			return out, err
		}
		if n > 0 {
			out.Requeued += n
			out.Recipients = append(out.Recipients, r)
		}
	}
	return out, nil
}
