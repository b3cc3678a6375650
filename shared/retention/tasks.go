package retention

import (
	"context"
	"database/sql"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

// terminal are the states a task never leaves: only these are deleted.
var terminal = []string{mesh.TaskCompleted, mesh.TaskFailed, mesh.TaskCanceled, mesh.TaskRejected}

// A terminal task past the retention is deleted with its messages and
// artifacts; it is kept while an outbox event about it is still pending
// (its recipient has not been told yet). Its rows go in this order, so a
// crash at any point leaves no orphan: first the messages and artifacts,
// batch by batch (a terminal task gets no new ones: every write to it is
// refused with task_terminal), then the task rows themselves in one short
// transaction that locks them by primary key.
//
// A task whose id is its own conversation's context (the server minted it)
// is also that conversation's registration (tasks.claimContext). When other
// tasks of the conversation remain, the transaction that deletes it writes
// the registration to task_contexts instead, so the conversation stays its
// two agents'.
const (
	// oldTasksSQL walks the index tasks_idle (status, updated_at, and the
	// primary key) from its oldest entry; oldTasksAfterSQL resumes after the
	// last task passed. Neither locks anything.
	oldTasksSQL      = `SELECT task_id, updated_at, initiator, recipient FROM tasks WHERE status = ? AND updated_at < ? ORDER BY updated_at, task_id LIMIT ?`
	oldTasksAfterSQL = `SELECT task_id, updated_at, initiator, recipient FROM tasks WHERE status = ? AND updated_at < ? AND updated_at >= ? AND (updated_at > ? OR task_id > ?) ORDER BY updated_at, task_id LIMIT ?`
	// pendingTasksSQL finds the candidates with an undelivered event: the
	// queued events of the parties (an event about a task goes to one of its
	// two parties), and those still marked pending through the index
	// outbox_pending (delivery, recipient, seq); see outbox.PendingEventsSQL.
	pendingTasksSQL = `SELECT e.task_id FROM outbox_queue q STRAIGHT_JOIN outbox_events e ON e.recipient = q.recipient AND e.seq = q.seq
WHERE q.recipient IN (?) AND e.task_id IN (?)
UNION SELECT task_id FROM outbox_events WHERE delivery = 'pending' AND recipient IN (?) AND task_id IN (?)`
	// lockTasksSQL locks the candidates by primary key and nothing else: a
	// condition on status or updated_at could make the server walk (and
	// lock, gaps included) the index tasks_idle, where new tasks go, so the
	// code re-checks those. A task another transaction holds right now (a
	// send reading it as its conversation's registration) is skipped, not
	// waited for.
	lockTasksSQL = `SELECT task_id, context_id, group_id, initiator, recipient, status, updated_at FROM tasks
WHERE task_id IN (?) ORDER BY task_id FOR UPDATE SKIP LOCKED`
	// survivorsSQL is a plain read after the locks: a send that committed a
	// task in the conversation before them is seen, and one after them
	// waited for this transaction and then finds the registration moved.
	survivorsSQL       = `SELECT DISTINCT context_id FROM tasks WHERE context_id IN (?) AND task_id NOT IN (?)`
	registerContextSQL = `INSERT INTO task_contexts (context_id, party_a, party_b, created_at) VALUES (?, ?, ?, ?)`
	deleteTasksSQL     = `DELETE FROM tasks WHERE task_id IN (?)`
)

// A task's children, each selected through its index (task_id, id) and
// deleted by primary key.
var children = []struct{ table, sel, del string }{
	{"task_messages", `SELECT id FROM task_messages WHERE task_id IN (?) LIMIT ?`, `DELETE FROM task_messages WHERE id IN (?)`},
	{"task_artifacts", `SELECT id FROM task_artifacts WHERE task_id IN (?) LIMIT ?`, `DELETE FROM task_artifacts WHERE id IN (?)`},
}

// candidate is a task the walk found past the retention.
type candidate struct {
	id                   string
	updated              time.Time
	initiator, recipient string
}

// tasks deletes one batch of terminal tasks past the retention.
func (r *run) tasks(ctx context.Context) (int, bool, error) {
	cands, err := r.taskCandidates(ctx)
	if err != nil || len(cands) == 0 {
		return 0, false, err
	}
	more := r.status < len(terminal)
	ids, err := r.notPending(ctx, cands)
	if err != nil || len(ids) == 0 {
		return 0, more, err
	}
	for _, c := range children {
		if err := r.deleteChildren(ctx, c.table, c.sel, c.del, ids); err != nil {
			return 0, false, err
		}
	}
	n, err := r.deleteTasks(ctx, ids)
	return n, more, err
}

// taskCandidates reads up to a batch of the oldest terminal tasks past the
// retention, status after status, from where the walk stopped.
func (r *run) taskCandidates(ctx context.Context) ([]candidate, error) {
	var out []candidate
	for r.status < len(terminal) && len(out) < r.batch {
		status, limit := terminal[r.status], r.batch-len(out)
		var rows *sql.Rows
		var err error
		if c := r.taskAfter; c == nil {
			rows, err = r.j.DB.QueryContext(ctx, oldTasksSQL, status, r.taskCutoff, limit)
		} else {
			rows, err = r.j.DB.QueryContext(ctx, oldTasksAfterSQL, status, r.taskCutoff, c.at, c.at, c.id, limit)
		}
		if err != nil {
			return nil, err
		}
		got := 0
		for rows.Next() {
			var c candidate
			if err := rows.Scan(&c.id, &c.updated, &c.initiator, &c.recipient); err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, c)
			got++
			r.taskAfter = &cursor{at: c.updated, id: c.id}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if got < limit {
			r.status++
			r.taskAfter = nil
		}
	}
	return out, nil
}

// notPending returns the ids of the candidates no pending event is about.
func (r *run) notPending(ctx context.Context, cands []candidate) ([]any, error) {
	parties := map[string]bool{}
	var pargs, ids []any
	for _, c := range cands {
		for _, p := range []string{c.initiator, c.recipient} {
			if !parties[p] {
				parties[p] = true
				pargs = append(pargs, p)
			}
		}
		ids = append(ids, c.id)
	}
	stmt := expand(pendingTasksSQL, len(pargs), len(ids), len(pargs), len(ids))
	args := append(append(append(append([]any{}, pargs...), ids...), pargs...), ids...)
	pending, err := query(ctx, r.j.DB, scanString, stmt, args...)
	return without(ids, pending), err
}

// deleteChildren deletes table's rows of the tasks ids, a batch of primary
// keys per statement.
func (r *run) deleteChildren(ctx context.Context, table, sel, del string, ids []any) error {
	sel = expand(sel, len(ids))
	for {
		rows, err := query(ctx, r.j.DB, scanInt, sel, append(append([]any{}, ids...), r.batch)...)
		if err != nil || len(rows) == 0 {
			return err
		}
		n, err := execRC(ctx, r.j.DB, expand(del, len(rows)), rows...)
		if err != nil {
			return err
		}
		r.count(ctx, table, n)
		if len(rows) < r.batch {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// deleteTasks deletes the task rows in one transaction.
func (r *run) deleteTasks(ctx context.Context, ids []any) (int, error) {
	deleted := 0
	err := inTx(ctx, r.j.DB, func(tx *sql.Tx) error {
		deleted = 0
		rows, err := tx.QueryContext(ctx, expand(lockTasksSQL, len(ids)), ids...)
		if err != nil {
			return err
		}
		type root struct{ a, b string }
		roots := map[string]root{}
		var locked, rootIDs []any
		for rows.Next() {
			var id, ctxID, ini, rcpt, status string
			var group sql.NullString
			var updated time.Time
			if err := rows.Scan(&id, &ctxID, &group, &ini, &rcpt, &status, &updated); err != nil {
				rows.Close()
				return err
			}
			if !mesh.TerminalTaskState(status) || !updated.Before(r.taskCutoff) {
				continue
			}
			locked = append(locked, id)
			if ctxID == id && !group.Valid {
				roots[id] = root{min(ini, rcpt), max(ini, rcpt)}
				rootIDs = append(rootIDs, id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(locked) == 0 {
			return err
		}
		if len(rootIDs) > 0 {
			stmt := expand(survivorsSQL, len(rootIDs), len(locked))
			alive, err := query(ctx, tx, scanString, stmt, append(append([]any{}, rootIDs...), locked...)...)
			if err != nil {
				return err
			}
			for _, c := range alive {
				p := roots[c.(string)]
				if _, err := tx.ExecContext(ctx, registerContextSQL, c, p.a, p.b, r.now); err != nil {
					return err
				}
			}
		}
		if deleted, err = exec(ctx, tx, expand(deleteTasksSQL, len(locked)), locked...); err != nil {
			return err
		}
		if r.j.InTx != nil {
			r.j.InTx(ctx)
		}
		return nil
	})
	return deleted, err
}

// A two-party conversation's registration (task_contexts) is deleted once
// no task is left in it and it is older than the task retention; a new
// task in it registers it again. The walk goes through the index
// task_contexts_age; the delete locks the rows by primary key, skipping one
// a send holds (it is claiming the conversation), and checks for tasks
// after the lock, as survivorsSQL does.
const (
	oldContextsSQL      = `SELECT context_id, created_at FROM task_contexts WHERE created_at < ? ORDER BY created_at, context_id LIMIT ?`
	oldContextsAfterSQL = `SELECT context_id, created_at FROM task_contexts WHERE created_at < ? AND created_at >= ? AND (created_at > ? OR context_id > ?) ORDER BY created_at, context_id LIMIT ?`
	busyContextsSQL     = `SELECT DISTINCT context_id FROM tasks WHERE context_id IN (?)`
	// By primary key only, as lockTasksSQL (a registration's created_at
	// never changes).
	lockContextsSQL   = `SELECT context_id FROM task_contexts WHERE context_id IN (?) ORDER BY context_id FOR UPDATE SKIP LOCKED`
	deleteContextsSQL = `DELETE FROM task_contexts WHERE context_id IN (?)`
)

// contexts deletes one batch of registrations of empty conversations.
func (r *run) contexts(ctx context.Context) (int, bool, error) {
	var rows *sql.Rows
	var err error
	if c := r.ctxAfter; c == nil {
		rows, err = r.j.DB.QueryContext(ctx, oldContextsSQL, r.taskCutoff, r.batch)
	} else {
		rows, err = r.j.DB.QueryContext(ctx, oldContextsAfterSQL, r.taskCutoff, c.at, c.at, c.id, r.batch)
	}
	if err != nil {
		return 0, false, err
	}
	var ids []any
	for rows.Next() {
		var c cursor
		if err := rows.Scan(&c.id, &c.at); err != nil {
			rows.Close()
			return 0, false, err
		}
		ids = append(ids, c.id)
		r.ctxAfter = &c
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, false, err
	}
	more := len(ids) == r.batch
	if ids, err = r.idle(ctx, r.j.DB, ids); err != nil || len(ids) == 0 {
		return 0, more, err
	}
	deleted := 0
	err = inTx(ctx, r.j.DB, func(tx *sql.Tx) error {
		locked, err := query(ctx, tx, scanString, expand(lockContextsSQL, len(ids)), ids...)
		if err != nil || len(locked) == 0 {
			return err
		}
		if locked, err = r.idle(ctx, tx, locked); err != nil || len(locked) == 0 {
			return err
		}
		deleted, err = exec(ctx, tx, expand(deleteContextsSQL, len(locked)), locked...)
		return err
	})
	return deleted, more, err
}

// idle returns the contexts among ids in which no task is left.
func (r *run) idle(ctx context.Context, q querier, ids []any) ([]any, error) {
	busy, err := query(ctx, q, scanString, expand(busyContextsSQL, len(ids)), ids...)
	return without(ids, busy), err
}

// without returns the ids that are not in drop.
func without(ids, drop []any) []any {
	if len(drop) == 0 {
		return ids
	}
	set := map[any]bool{}
	for _, d := range drop {
		set[d] = true
	}
	var out []any
	for _, id := range ids {
		if !set[id] {
			out = append(out, id)
		}
	}
	return out
}
