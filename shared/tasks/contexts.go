package tasks

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// Conversations own their context. A context_id belongs either to a group
// (mesh_groups.context_id: every fan-out of the group, and any task two of
// its members start in it) or to the two agents whose first task used it
// (task_contexts, registered by that task when the client named the id; an
// id the server mints is that first task's own id, and the task row is the
// registration). A new task may name a context only if its two
// parties share it:
//
//   - a group's context: both are members of that group now;
//   - a two-party context: they are its two agents;
//   - an id nobody uses yet: it starts a new conversation of theirs.
//
// Anything else is 422 context_mismatch, and nothing is written: a friend
// cannot slip a task into a group's thread it (or the recipient) is not in,
// nor into the conversation of two other agents. The answer tells a caller
// only that an id it already holds is in use by others.
const (
	groupOfContextSQL = `SELECT group_id FROM mesh_groups WHERE context_id = ?`
	bothMembersSQL    = `SELECT COUNT(*) FROM group_members WHERE group_id = ? AND agent_id IN (?, ?)`
	insertContextSQL  = `INSERT INTO task_contexts (context_id, party_a, party_b, created_at) VALUES (?, ?, ?, ?)`
	contextPartiesSQL = `SELECT party_a, party_b FROM task_contexts WHERE context_id = ? LOCK IN SHARE MODE`
	// mintedContextSQL finds the task whose id the server minted as its
	// context (Send without a context_id): its parties own the context,
	// which has no task_contexts row. A locking read sees it whatever the
	// snapshot; the id was unknown to anyone before that task committed.
	mintedContextSQL = `SELECT initiator, recipient FROM tasks WHERE task_id = ? AND context_id = task_id LOCK IN SHARE MODE`
)

// registerContext records contextID as the two-party context of a and b
// (a duplicate key error when it is taken).
func registerContext(ctx context.Context, tx identity.Querier, contextID, a, b string, now time.Time) error {
	_, err := tx.ExecContext(ctx, insertContextSQL, contextID, min(a, b), max(a, b), now)
	return err
}

// errContextMismatch is the answer for a context the parties do not share.
func errContextMismatch() error {
	return mesh.Errorf(mesh.KindUnprocessable, "context_mismatch",
		"context_id belongs to a conversation you and the recipient do not share (another pair's, or a group's you are not both in)")
}

// claimContext checks that a and b may open a task in contextID (see
// above) and returns the group that owns it, or "" for a two-party
// context, which it registers for them when it is new. A concurrent claim
// of the same new id by another pair waits on the primary key and then
// sees this one's row (a fresh locking read after the duplicate).
func claimContext(ctx context.Context, tx identity.Querier, contextID, a, b string, now time.Time) (string, error) {
	var group string
	err := tx.QueryRowContext(ctx, groupOfContextSQL, contextID).Scan(&group)
	switch {
	case err == nil:
		var n int
		if err := tx.QueryRowContext(ctx, bothMembersSQL, group, a, b).Scan(&n); err != nil {
			return "", err
		}
		if n != 2 {
			return "", errContextMismatch()
		}
		return group, nil
	case !errors.Is(err, sql.ErrNoRows):
		return "", err
	}
	lo, hi := min(a, b), max(a, b)
	var ini, rcpt string
	err = tx.QueryRowContext(ctx, mintedContextSQL, contextID).Scan(&ini, &rcpt)
	switch {
	case err == nil:
		if min(ini, rcpt) != lo || max(ini, rcpt) != hi {
			return "", errContextMismatch()
		}
		return "", nil
	case !errors.Is(err, sql.ErrNoRows):
		return "", err
	}
	err = registerContext(ctx, tx, contextID, a, b, now)
	if err == nil || !mysql.IsDuplicate(err) {
		return "", err
	}
	var pa, pb string
	if err := tx.QueryRowContext(ctx, contextPartiesSQL, contextID).Scan(&pa, &pb); err != nil {
		return "", err
	}
	if pa != lo || pb != hi {
		return "", errContextMismatch()
	}
	return "", nil
}
