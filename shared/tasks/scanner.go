package tasks

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

const (
	// idleCandidatesSQL reads, without locking, the longest-idle tasks of one
	// status from the index tasks_idle (status, updated_at): in index order,
	// stopping at the limit, never touching table rows.
	idleCandidatesSQL = `SELECT task_id FROM tasks WHERE status = ? AND updated_at <= ? ORDER BY updated_at LIMIT ?`
	// lockIdleSQL locks the candidates by primary key and re-checks them on
	// the latest committed version: a task that saw activity (or that another
	// scanner already failed) drops out, and one another scanner holds right
	// now is skipped. Primary-key lookups take no gap locks, so senders
	// creating and touching tasks are never blocked by a scan.
	lockIdleSQL = `SELECT task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at FROM tasks
WHERE task_id IN (?) AND status IN ('submitted', 'working', 'input-required') AND updated_at <= ?
ORDER BY task_id FOR UPDATE SKIP LOCKED`
	failTasksSQL = `UPDATE tasks SET status = 'failed', updated_at = ? WHERE task_id IN (?)`
)

// idleStates are the states the scanner times out: input-required too, on
// purpose (a question nobody answers for a day is as stale as lost work).
var idleStates = []string{mesh.TaskSubmitted, mesh.TaskWorking, mesh.TaskInputRequired}

// ScanIdleTasks fails every task that has been in submitted, working or
// input-required for IdleTimeout without activity, telling both parties with
// a "status" event (reason idle_timeout, by ""), in batches of ScanBatch
// tasks, one transaction each. Two scanners may run at once: each task is
// failed, and announced, exactly once.
func (s *Service) ScanIdleTasks(ctx context.Context) error {
	s.WithDefaults()
	stop := time.Now().Add(4 * time.Minute) // well inside the 5-minute schedule
	if dl, ok := ctx.Deadline(); ok && dl.Add(-3*time.Second).Before(stop) {
		stop = dl.Add(-3 * time.Second)
	}
	total := 0
	for time.Now().Before(stop) {
		found, failed, err := s.scanOnce(ctx)
		total += failed
		if err != nil {
			return err
		}
		// Stop when the index holds no full batch any more, or when every
		// candidate was held by another scanner (it is on them).
		if found < s.ScanBatch || failed == 0 {
			break
		}
	}
	if total > 0 {
		s.Log.Info("idle tasks failed", "count", total, "idle_timeout", s.IdleTimeout.String())
	}
	return nil
}

// scanOnce fails one batch; found is the number of candidates seen.
func (s *Service) scanOnce(ctx context.Context) (found, failed int, err error) {
	now := s.Clock()
	cutoff := now.Add(-s.IdleTimeout)
	var ids []any
	for _, st := range idleStates {
		got, err := mysql.QueryStrings(ctx, s.DB, idleCandidatesSQL, st, cutoff, s.ScanBatch-len(ids))
		if err != nil {
			return 0, 0, err
		}
		for _, id := range got {
			ids = append(ids, id)
		}
		if len(ids) >= s.ScanBatch {
			break
		}
	}
	if len(ids) == 0 {
		return 0, 0, nil
	}
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		failed = 0
		rows, err := tx.QueryContext(ctx, inList(lockIdleSQL, len(ids)), append(ids, cutoff)...)
		if err != nil {
			return err
		}
		locked, err := scanTasks(rows)
		if err != nil || len(locked) == 0 {
			return err
		}
		lockedIDs := make([]any, len(locked))
		events := make([]outbox.Event, 0, 2*len(locked))
		for i := range locked {
			t := &locked[i]
			lockedIDs[i] = t.TaskID
			change := StatusChange{State: mesh.TaskFailed, Previous: t.Status, Reason: ReasonIdleTimeout}
			t.Status, t.UpdatedAt = mesh.TaskFailed, now
			w := writeCtx{messageID: newID(), now: now} // caller "": the mesh itself
			for _, to := range []string{t.Initiator, t.Recipient} {
				ev, err := w.event(mesh.EventStatus, to, t, StatusBody{Status: change, Task: ref(t)})
				if err != nil {
					return err
				}
				events = append(events, ev)
			}
		}
		if _, err := tx.ExecContext(ctx, inList(failTasksSQL, len(lockedIDs)), append([]any{now}, lockedIDs...)...); err != nil {
			return err
		}
		if err := outbox.Append(ctx, tx, events); err != nil {
			return err
		}
		failed = len(locked)
		return nil
	})
	return len(ids), failed, err
}

// inList expands the single "IN (?)" of stmt to n placeholders; the
// statement stays a complete literal in the source.
func inList(stmt string, n int) string {
	return strings.Replace(stmt, "IN (?)", "IN ("+strings.TrimSuffix(strings.Repeat("?, ", n), ", ")+")", 1)
}
