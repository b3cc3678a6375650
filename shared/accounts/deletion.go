package accounts

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// Deleting an agent leaves no row that names it outside the audit log:
//
//   - at once, in one transaction (deleteAgentRows): its rate row, its
//     inbox counter and its agents row go, its keys are revoked, its
//     friendships, blocks, friend requests, group memberships, account
//     link and A2A card end, a group it owned passes to the longest
//     standing admin or member (or closes when empty), and the audit log
//     records it all. From then on every request of its keys or tokens is
//     refused, and a send to it or from it fails cleanly;
//   - then, in batches (tasks.ForgetAgent): its open tasks are failed or
//     canceled, their other parties told by a status event, and its id in
//     the history they keep becomes identity.DeletedAgentID;
//   - last, in batches (purgeAgent): its inbox, idempotency keys, dispatch
//     state, poll and wait slots, push connections and revoked keys.
//
// A run cut short (a timeout) is finished by the next DELETE, which
// answers the same success: the audit log's agent.deleted row says the
// agent was deleted, and from which account.

// maxDeletePages bounds the pages of agents one account deletion deletes
// (MaxAgentsPage each); a larger account is finished by the next request.
const maxDeletePages = 20

// purgeBatch bounds the rows one statement of purgeAgent deletes.
const purgeBatch = 1000

var errNotOperatorDeletable = mesh.Errorf(mesh.KindConflict, "operator_account", "the operator account cannot be deleted")

// DeleteAgent deletes one of acc's agents. Deleting an agent acc owned
// and that is gone already is the same success.
func (s *Service) DeleteAgent(ctx context.Context, acc Account, agentID string) error {
	if !mesh.ValidAgentID(agentID) {
		return errAgentNotFound
	}
	err := s.ownAgent(ctx, acc, agentID)
	if errors.Is(err, errAgentNotFound) {
		deleted, derr := s.deletedFrom(ctx, agentID, acc.AccountID)
		if derr != nil || !deleted {
			return errors.Join(derr, err)
		}
		return s.finishDeletion(ctx, agentID)
	}
	if err != nil {
		return err
	}
	return s.deleteAgent(actAs(ctx, acc), agentID)
}

// AdminDeleteAgent deletes any agent (the admin route). An agent that is
// gone already is the same success; one that never existed is a 404.
func (s *Service) AdminDeleteAgent(ctx context.Context, agentID string) error {
	notFound := mesh.Errorf(mesh.KindNotFound, "agent_not_found", "no agent with this id")
	if !mesh.ValidAgentID(agentID) {
		return notFound
	}
	err := s.deleteAgent(identity.WithActor(ctx, identity.AdminActor), agentID)
	if errors.Is(err, errNoSuchAgent) {
		deleted, derr := s.deletedFrom(ctx, agentID, "")
		if derr != nil {
			return derr
		}
		if !deleted {
			return notFound
		}
		return s.finishDeletion(ctx, agentID)
	}
	return err
}

// errNoSuchAgent is deleteAgentRows finding no agents row.
var errNoSuchAgent = errors.New("accounts: no such agent")

// deletedFrom reports whether the audit log records agentID's deletion
// (from accountID's ownership, when not "").
func (s *Service) deletedFrom(ctx context.Context, agentID, accountID string) (bool, error) {
	prefix := ownerDetail(accountID)
	var n int
	err := s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM audit_log WHERE agent_id = ? AND action = ? AND LEFT(detail, ?) = ?",
		agentID, identity.AuditAgentDeleted, len(prefix), prefix).Scan(&n)
	return n > 0, err
}

// ownerDetail begins the agent.deleted audit row's detail: the account the
// agent belonged to ("" matches any).
func ownerDetail(accountID string) string {
	if accountID == "" {
		return ""
	}
	return "account " + accountID + ";"
}

// deleteAgent runs all three steps for an existing agent.
func (s *Service) deleteAgent(ctx context.Context, agentID string) error {
	keys, err := s.deleteAgentRows(ctx, agentID)
	if err != nil {
		return err
	}
	// Outside the transaction, as a revocation does: the push channel
	// closes the connections the keys opened.
	if s.Identity.OnKeysRevoked != nil && len(keys) > 0 {
		s.Identity.OnKeysRevoked(ctx, keys)
	}
	return s.finishDeletion(ctx, agentID)
}

// finishDeletion closes and rewrites the deleted agent's tasks and purges
// what is left of it.
func (s *Service) finishDeletion(ctx context.Context, agentID string) error {
	if _, err := s.Tasks.ForgetAgent(ctx, agentID); err != nil {
		return err
	}
	return s.purgeAgent(ctx, agentID)
}

// deleteAgentRows is the first step, one transaction. Its locks come in a
// send's order: the agent's rate row (the first row its own writes lock),
// its inbox counter (the first row a send to it locks), its agents row,
// then the graph. A send holding one of them commits first, and its rows
// are the later steps' to clean; a send that comes after finds no rate
// row, counter or agents row and is refused. It returns the revoked keys.
func (s *Service) deleteAgentRows(ctx context.Context, agentID string) (keys []string, err error) {
	now := s.now()
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		keys = nil
		for _, q := range []string{"DELETE FROM rate_limits WHERE agent_id = ?", "DELETE FROM inbox_counters WHERE recipient = ?"} {
			if _, err := tx.ExecContext(ctx, q, agentID); err != nil {
				return err
			}
		}
		var found string
		err := tx.QueryRowContext(ctx, "SELECT agent_id FROM agents WHERE agent_id = ? FOR UPDATE", agentID).Scan(&found)
		if errors.Is(err, sql.ErrNoRows) {
			return errNoSuchAgent
		}
		if err != nil {
			return err
		}
		policy, err := identity.PolicyOf(ctx, tx, agentID)
		if err != nil {
			return err
		}
		if keys, err = mysql.QueryStrings(ctx, tx, "SELECT key_id FROM api_keys WHERE agent_id = ? AND revoked_at IS NULL ORDER BY key_id FOR UPDATE", agentID); err != nil {
			return err
		}
		// Revoked, not deleted yet: the push janitor closes the
		// connections of revoked keys that the hook could not.
		if _, err := tx.ExecContext(ctx, "UPDATE api_keys SET revoked_at = ? WHERE agent_id = ? AND revoked_at IS NULL", now, agentID); err != nil {
			return err
		}
		friends, err := s.endFriendships(ctx, tx, agentID, now)
		if err != nil {
			return err
		}
		groups, err := s.leaveGroups(ctx, tx, agentID, now)
		if err != nil {
			return err
		}
		for _, q := range []string{
			"DELETE FROM agent_blocks WHERE agent_id = ?",
			"DELETE FROM agent_blocks WHERE blocked_id = ?",
			"DELETE FROM friend_requests WHERE from_agent = ?",
			"DELETE FROM friend_requests WHERE to_agent = ?",
			"DELETE FROM agent_accounts WHERE agent_id = ?",
			"DELETE FROM a2a_cards WHERE agent_id = ?",
			"DELETE FROM agents WHERE agent_id = ?",
		} {
			if _, err := tx.ExecContext(ctx, q, agentID); err != nil {
				return err
			}
		}
		detail := fmt.Sprintf("%s %d keys revoked, %d friendships ended, %d groups left", ownerDetail(policy.AccountID), len(keys), friends, groups)
		return identity.Audit(ctx, tx, identity.AdminActor, now, identity.AuditAgentDeleted, agentID, "", detail)
	})
	return keys, err
}

// endFriendships removes both rows of each of agentID's friendships, with
// an audit row each that the friend's account reads.
func (s *Service) endFriendships(ctx context.Context, tx *sql.Tx, agentID string, now time.Time) (int, error) {
	friends, err := mysql.QueryStrings(ctx, tx, "SELECT friend_id FROM friendships WHERE agent_id = ? ORDER BY friend_id FOR UPDATE", agentID)
	if err != nil {
		return 0, err
	}
	for _, f := range friends {
		if _, err := tx.ExecContext(ctx, "DELETE FROM friendships WHERE agent_id = ? AND friend_id = ?", f, agentID); err != nil {
			return 0, err
		}
		if err := identity.Audit(ctx, tx, identity.AdminActor, now, identity.AuditFriendshipRemoved, f, agentID, "the friend was deleted"); err != nil {
			return 0, err
		}
	}
	_, err = tx.ExecContext(ctx, "DELETE FROM friendships WHERE agent_id = ?", agentID)
	return len(friends), err
}

// leaveGroups removes agentID from its groups, handing over the groups it
// owns (identity.HandOverGroup: the longest-standing admin, else member;
// an empty group is deleted), with an audit row per group.
func (s *Service) leaveGroups(ctx context.Context, tx *sql.Tx, agentID string, now time.Time) (int, error) {
	rows, err := tx.QueryContext(ctx, "SELECT group_id, role FROM group_members WHERE agent_id = ? ORDER BY group_id FOR UPDATE", agentID)
	if err != nil {
		return 0, err
	}
	type member struct{ group, role string }
	var ms []member
	for rows.Next() {
		var m member
		if err := rows.Scan(&m.group, &m.role); err != nil {
			rows.Close()
			return 0, err
		}
		ms = append(ms, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	// A group whose owner_id names the agent without a membership row
	// (none should exist) is handed over too: no row may name it.
	owned, err := mysql.QueryStrings(ctx, tx, "SELECT group_id FROM mesh_groups WHERE owner_id = ? ORDER BY group_id", agentID)
	if err != nil {
		return 0, err
	}
	handOver := map[string]bool{}
	for _, g := range owned {
		handOver[g] = true
	}
	for _, m := range ms {
		if m.role == identity.RoleOwner {
			handOver[m.group] = true
		}
	}
	for _, m := range ms {
		if _, err := tx.ExecContext(ctx, "DELETE FROM group_members WHERE group_id = ? AND agent_id = ?", m.group, agentID); err != nil {
			return 0, err
		}
		if err := identity.Audit(ctx, tx, identity.AdminActor, now, identity.AuditGroupMemberRemoved, agentID, m.group, "the member was deleted"); err != nil {
			return 0, err
		}
	}
	groups := make([]string, 0, len(handOver))
	for g := range handOver {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		if err := identity.HandOverGroup(ctx, tx, g, agentID); err != nil {
			return 0, err
		}
	}
	return len(ms), nil
}

// purgeAgent deletes the deleted agent's remaining rows in batches of
// purgeBatch, each statement its own transaction on the agent's own key
// ranges: its inbox and idempotency keys, then the small per-agent rows.
func (s *Service) purgeAgent(ctx context.Context, agentID string) error {
	for _, q := range []string{
		// The queue first: a queued event is never without its row.
		"DELETE FROM outbox_queue WHERE recipient = ? ORDER BY seq LIMIT ?",
		"DELETE FROM outbox_events WHERE recipient = ? ORDER BY seq LIMIT ?",
		"DELETE FROM idempotency_keys WHERE sender = ? ORDER BY message_id LIMIT ?",
	} {
		for {
			res, err := s.DB.ExecContext(ctx, q, agentID, purgeBatch)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n < purgeBatch {
				break
			}
		}
	}
	for _, q := range []string{
		"DELETE FROM dispatch_state WHERE recipient = ?",
		"DELETE FROM inbox_polls WHERE agent_id = ?",
		"DELETE FROM a2a_waits WHERE agent_id = ?",
		"DELETE FROM push_connections WHERE agent_id = ?",
		"DELETE FROM a2a_cards WHERE agent_id = ?",
		"DELETE FROM api_keys WHERE agent_id = ?",
	} {
		if _, err := s.DB.ExecContext(ctx, q, agentID); err != nil {
			return err
		}
	}
	return nil
}

// DeleteAccount deletes acc, and with withAgents every agent it owns
// first; without it, an account that owns agents is a 409. Its sessions
// end with it. The operator account (the admin routes' agents) stays.
func (s *Service) DeleteAccount(ctx context.Context, acc Account, withAgents bool) error {
	if acc.AccountID == identity.OperatorAccount {
		return errNotOperatorDeletable
	}
	ctx = actAs(ctx, acc)
	for page := 0; page < maxDeletePages; page++ {
		// A page at a time: a run cut short leaves the rest for the
		// next request, which finds only what is left.
		agents, err := mysql.QueryStrings(ctx, s.DB, "SELECT agent_id FROM agent_accounts WHERE account_id = ? ORDER BY agent_id LIMIT ?", acc.AccountID, MaxAgentsPage)
		if err != nil {
			return err
		}
		if len(agents) == 0 {
			break
		}
		if !withAgents {
			return mesh.Errorf(mesh.KindConflict, "account_has_agents", "the account still owns agents: delete them first, or ask with with_agents=true")
		}
		for _, a := range agents {
			err := s.deleteAgent(ctx, a)
			if errors.Is(err, errNoSuchAgent) {
				// A link without its agent: nothing else to delete.
				_, err = s.DB.ExecContext(ctx, "DELETE FROM agent_accounts WHERE agent_id = ?", a)
			}
			if err != nil {
				return err
			}
		}
	}
	return s.DB.InTx(ctx, func(tx *sql.Tx) error {
		var id string
		if err := tx.QueryRowContext(ctx, "SELECT account_id FROM accounts WHERE account_id = ? FOR UPDATE", acc.AccountID).Scan(&id); err != nil {
			return err
		}
		// An agent created meanwhile keeps the account.
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM agent_accounts WHERE account_id = ?", acc.AccountID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return mesh.Errorf(mesh.KindConflict, "account_has_agents", "an agent was created for the account meanwhile; try again")
		}
		for _, q := range []string{"DELETE FROM account_sessions WHERE account_id = ?", "DELETE FROM accounts WHERE account_id = ?"} {
			if _, err := tx.ExecContext(ctx, q, acc.AccountID); err != nil {
				return err
			}
		}
		// The account's own rate bucket (its console and account routes).
		if _, err := tx.ExecContext(ctx, "DELETE FROM rate_limits WHERE agent_id = ?", rateBucket(acc.AccountID)); err != nil {
			return err
		}
		return identity.Audit(ctx, tx, identity.AdminActor, s.now(), identity.AuditAccountDeleted, "", "", "account "+acc.AccountID+" deleted")
	})
}
