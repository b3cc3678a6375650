package tasks

import (
	"context"
	"database/sql"
	"sort"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

// DeletedAgentID stands, in the history its other parties keep, for an
// agent that was deleted: tasks, messages, artifacts, contexts and event
// rows name it instead of the deleted id (identity reserves it).
const DeletedAgentID = identity.DeletedAgentID

// ReasonPartyDeleted marks the status event that tells a task's other
// party that the task ended because its party was deleted.
const ReasonPartyDeleted = "party_deleted"

// ForgetBatch is how many tasks of a deleted agent one transaction of
// ForgetAgent closes and rewrites: small, so the task rows, their
// messages and the partners' counters are held briefly.
const ForgetBatch = 100

const (
	// forgetTasksSQL reads, without locking, a batch of the tasks that name
	// agentID (the indexes tasks_initiator and tasks_recipient); forgetLockSQL
	// locks them by primary key and re-reads them as committed.
	forgetTasksSQL = `SELECT task_id FROM tasks WHERE initiator = ? UNION SELECT task_id FROM tasks WHERE recipient = ? ORDER BY task_id LIMIT ?`
	forgetLockSQL  = `SELECT task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at FROM tasks
WHERE task_id IN (?) ORDER BY task_id FOR UPDATE`
	forgetMoveSQL = `UPDATE tasks SET status = ?, updated_at = ?, initiator = IF(initiator = ?, ?, initiator), recipient = IF(recipient = ?, ?, recipient) WHERE task_id = ?`
	// Each SET expression reads only its own column: MySQL assigns left to
	// right, so a column may not read another one already rewritten.
	forgetMessagesSQL  = `UPDATE task_messages SET sender = ? WHERE task_id IN (?) AND sender = ?`
	forgetArtifactsSQL = `UPDATE task_artifacts SET created_by = ? WHERE task_id IN (?) AND created_by = ?`
	forgetContextsSQL  = `UPDATE task_contexts SET party_a = IF(party_a = ?, ?, party_a), party_b = IF(party_b = ?, ?, party_b) WHERE context_id IN (?)`
	// The partner's events from agentID: a plain read of the partner's
	// range (outbox_recipient_seq), then an update by primary key, so no
	// gap of the partner's inbox is locked against new events. The body's
	// JSON strings equal to the id (from, by, initiator, recipient) are
	// replaced too: agent ids hold no character JSON escapes.
	forgetEventIDsSQL = `SELECT id FROM outbox_events WHERE recipient = ? AND sender = ?`
	forgetEventsSQL   = `UPDATE outbox_events SET sender = ?, body = REPLACE(body, ?, ?) WHERE id IN (?) AND sender = ?`
	liveCountersSQL   = `SELECT recipient FROM inbox_counters WHERE recipient IN (?) ORDER BY recipient FOR UPDATE`
)

// ForgetAgent ends the part agentID (being deleted, its agents row gone)
// played in tasks, in batches of ForgetBatch tasks, one transaction each:
// a task not yet terminal is failed (agentID was its recipient: the work
// will not be done) or canceled (agentID asked for it), and its other
// party gets an ordinary "status" event (by "", reason party_deleted); in
// every task, and in the other parties' event rows, agentID becomes
// DeletedAgentID. It returns how many tasks it closed. Run again after an
// interruption, it goes on where it stopped.
func (s *Service) ForgetAgent(ctx context.Context, agentID string) (closed int, err error) {
	s.WithDefaults()
	for {
		ids, err := mysql.QueryStrings(ctx, s.DB, forgetTasksSQL, agentID, agentID, ForgetBatch)
		if err != nil || len(ids) == 0 {
			return closed, err
		}
		n, err := s.forgetBatch(ctx, agentID, ids)
		closed += n
		if err != nil {
			return closed, err
		}
	}
}

// forgetBatch closes and rewrites the tasks ids of agentID in one
// transaction, in the lock order of a reply: tasks, then the counters of
// the other parties (outbox.Append), then their event rows.
func (s *Service) forgetBatch(ctx context.Context, agentID string, ids []string) (closed int, err error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		closed = 0
		now := s.Clock()
		rows, err := tx.QueryContext(ctx, inList(forgetLockSQL, len(args)), args...)
		if err != nil {
			return err
		}
		locked, err := scanTasks(rows)
		if err != nil {
			return err
		}
		var events []outbox.Event
		partners := map[string]bool{}
		contexts := []any{}
		for i := range locked {
			t := &locked[i]
			if t.Initiator != agentID && t.Recipient != agentID {
				continue // rewritten meanwhile by another deletion's run
			}
			party := other(t, agentID)
			partners[party] = true
			contexts = append(contexts, t.ContextID)
			if t.Initiator == agentID {
				t.Initiator = DeletedAgentID
			}
			if t.Recipient == agentID {
				t.Recipient = DeletedAgentID
			}
			status := t.Status
			if !mesh.TerminalTaskState(t.Status) {
				status = mesh.TaskFailed
				if t.Initiator == DeletedAgentID {
					status = mesh.TaskCanceled
				}
				change := StatusChange{State: status, Previous: t.Status, Reason: ReasonPartyDeleted}
				t.Status, t.UpdatedAt = status, now
				w := writeCtx{messageID: newID(), now: now} // caller "": the mesh itself
				ev, err := w.event(mesh.EventStatus, party, t, StatusBody{Status: change, Task: ref(t)})
				if err != nil {
					return err
				}
				events = append(events, ev)
				closed++
			}
			if _, err := tx.ExecContext(ctx, forgetMoveSQL, status, t.UpdatedAt, agentID, DeletedAgentID, agentID, DeletedAgentID, t.TaskID); err != nil {
				return err
			}
		}
		if len(contexts) == 0 {
			return nil
		}
		n := len(args)
		if _, err := tx.ExecContext(ctx, inList(forgetMessagesSQL, n), append(append([]any{DeletedAgentID}, args...), agentID)...); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, inList(forgetArtifactsSQL, n), append(append([]any{DeletedAgentID}, args...), agentID)...); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, inList(forgetContextsSQL, len(contexts)), append([]any{agentID, DeletedAgentID, agentID, DeletedAgentID}, contexts...)...); err != nil {
			return err
		}
		// The notices go to partners that may themselves be gone (deleted
		// at the same time): those have no counter, and need none.
		live, err := liveRecipients(ctx, tx, events)
		if err != nil {
			return err
		}
		if err := outbox.Append(ctx, tx, live); err != nil {
			return err
		}
		for p := range partners {
			if err := forgetEvents(ctx, tx, p, agentID); err != nil {
				return err
			}
		}
		return nil
	})
	return closed, err
}

// liveRecipients keeps the events whose recipient still has an inbox,
// locking those counters in key order (Append's order) so none is deleted
// before Append bumps it.
func liveRecipients(ctx context.Context, tx *sql.Tx, events []outbox.Event) ([]outbox.Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	set := map[string]bool{}
	for _, e := range events {
		set[e.To] = true
	}
	to := make([]string, 0, len(set))
	for r := range set {
		to = append(to, r)
	}
	sort.Strings(to)
	args := make([]any, len(to))
	for i, r := range to {
		args[i] = r
	}
	have, err := mysql.QueryStrings(ctx, tx, inList(liveCountersSQL, len(args)), args...)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, r := range have {
		live[r] = true
	}
	out := events[:0]
	for _, e := range events {
		if live[e.To] {
			out = append(out, e)
		}
	}
	return out, nil
}

// forgetEvents rewrites agentID into DeletedAgentID in the events of
// partner's inbox that agentID sent, in chunks of maxRowsPerWrite rows.
func forgetEvents(ctx context.Context, tx *sql.Tx, partner, agentID string) error {
	ids, err := mysql.QueryStrings(ctx, tx, forgetEventIDsSQL, partner, agentID)
	if err != nil {
		return err
	}
	quoted, tomb := `"`+agentID+`"`, `"`+DeletedAgentID+`"`
	for start := 0; start < len(ids); start += maxRowsPerWrite {
		chunk := ids[start:min(start+maxRowsPerWrite, len(ids))]
		args := []any{DeletedAgentID, quoted, tomb}
		for _, id := range chunk {
			args = append(args, id)
		}
		args = append(args, agentID)
		if _, err := tx.ExecContext(ctx, inList(forgetEventsSQL, len(chunk)), args...); err != nil {
			return err
		}
	}
	return nil
}
