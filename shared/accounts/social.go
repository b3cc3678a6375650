package accounts

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// MaxRequestsPage bounds the pending requests listed at once.
const MaxRequestsPage = 100

// ListFriendRequests returns the pending requests to acc's agents, oldest
// first, after the request id after.
func (s *Service) ListFriendRequests(ctx context.Context, acc Account, after int64, limit int) ([]identity.FriendRequest, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT r.request_id, r.from_agent, r.to_agent, r.status, r.created_at
FROM agent_accounts x JOIN friend_requests r ON r.to_agent = x.agent_id AND r.status = 'pending'
WHERE x.account_id = ? AND r.request_id > ? ORDER BY r.request_id LIMIT ?`, acc.AccountID, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []identity.FriendRequest{}
	for rows.Next() {
		var r identity.FriendRequest
		var id int64
		if err := rows.Scan(&id, &r.From, &r.To, &r.Status, &r.CreatedAt); err != nil {
			return nil, err
		}
		r.RequestID = strconv.FormatInt(id, 10)
		out = append(out, r)
	}
	return out, rows.Err()
}

var errRequestNotFound = mesh.Errorf(mesh.KindNotFound, "request_not_found", "no friend request to your agents with this id")

// DecideFriendRequest accepts or rejects a request to one of acc's agents,
// through the agent's own accept and reject, acting as the account (which
// an account-approval policy requires).
func (s *Service) DecideFriendRequest(ctx context.Context, acc Account, requestID, decision string) (identity.FriendRequest, error) {
	if decision != "accept" && decision != "reject" {
		return identity.FriendRequest{}, mesh.Errorf(mesh.KindUnprocessable, "invalid_decision", "decision must be accept or reject")
	}
	id, err := strconv.ParseInt(requestID, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != requestID {
		return identity.FriendRequest{}, errRequestNotFound
	}
	var to string
	err = s.DB.QueryRowContext(ctx, `SELECT r.to_agent FROM friend_requests r JOIN agent_accounts x ON x.agent_id = r.to_agent
WHERE r.request_id = ? AND x.account_id = ?`, id, acc.AccountID).Scan(&to)
	if errors.Is(err, sql.ErrNoRows) {
		return identity.FriendRequest{}, errRequestNotFound
	}
	if err != nil {
		return identity.FriendRequest{}, err
	}
	ctx = actAs(ctx, acc)
	if decision == "accept" {
		return s.Identity.AcceptFriendRequest(ctx, to, requestID)
	}
	return s.Identity.RejectFriendRequest(ctx, to, requestID)
}

// AuditEntry is one entry of the audit log as an account reads it.
type AuditEntry = api.AuditEntry

// MaxAuditPage bounds one page of the audit log.
const MaxAuditPage = 200

// ListAudit returns acc's audit log, newest first, before the entry id
// before (0: from the newest): the changes that touched its agents, and
// those it or its agents made.
func (s *Service) ListAudit(ctx context.Context, acc Account, before int64, limit int) ([]AuditEntry, string, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT l.id, l.occurred_at, l.actor_kind, l.actor_id, l.action, l.agent_id, l.other_id, l.detail FROM audit_log l
WHERE l.id < ? AND (l.agent_id IN (SELECT agent_id FROM agent_accounts WHERE account_id = ?)
  OR l.other_id IN (SELECT agent_id FROM agent_accounts WHERE account_id = ?)
  OR (l.actor_kind = 'agent' AND l.actor_id IN (SELECT agent_id FROM agent_accounts WHERE account_id = ?))
  OR (l.actor_kind = 'account' AND l.actor_id = ?))
ORDER BY l.id DESC LIMIT ?`, before, acc.AccountID, acc.AccountID, acc.AccountID, acc.AccountID, limit+1)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	out := []AuditEntry{}
	for rows.Next() {
		var e AuditEntry
		var id int64
		var other sql.NullString
		if err := rows.Scan(&id, &e.OccurredAt, &e.Actor.Kind, &e.Actor.ID, &e.Action, &e.AgentID, &other, &e.Detail); err != nil {
			return nil, "", err
		}
		e.ID = strconv.FormatInt(id, 10)
		if other.Valid {
			e.OtherID = &other.String
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[len(out)-1].ID
	}
	return out, next, nil
}

// Friendship is one friendship of one of the account's agents.
type Friendship struct {
	AgentID  string    `json:"agent_id"`
	FriendID string    `json:"friend_id"`
	Since    time.Time `json:"since"`
}

// ListFriendships returns up to limit friendships of acc's agents.
func (s *Service) ListFriendships(ctx context.Context, acc Account, limit int) ([]Friendship, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT f.agent_id, f.friend_id, f.created_at FROM agent_accounts x JOIN friendships f ON f.agent_id = x.agent_id
WHERE x.account_id = ? ORDER BY f.agent_id, f.friend_id LIMIT ?`, acc.AccountID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Friendship{}
	for rows.Next() {
		var f Friendship
		if err := rows.Scan(&f.AgentID, &f.FriendID, &f.Since); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// GroupMember is one row of a roster of a group one of acc's agents is in.
type GroupMember struct {
	GroupID   string `json:"group_id"`
	GroupName string `json:"group_name"`
	AgentID   string `json:"agent_id"`
	Role      string `json:"role"`
	// Mine is true for the account's own agents.
	Mine bool `json:"mine"`
}

// ListGroupRosters returns up to limit roster rows of the groups acc's
// agents belong to, by group.
func (s *Service) ListGroupRosters(ctx context.Context, acc Account, limit int) ([]GroupMember, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT g.group_id, g.name, m.agent_id, m.role, COALESCE(mx.account_id = ?, 0)
FROM mesh_groups g JOIN group_members m ON m.group_id = g.group_id LEFT JOIN agent_accounts mx ON mx.agent_id = m.agent_id
WHERE g.group_id IN (SELECT gm.group_id FROM group_members gm JOIN agent_accounts x ON x.agent_id = gm.agent_id WHERE x.account_id = ?)
ORDER BY g.group_id, m.agent_id LIMIT ?`, acc.AccountID, acc.AccountID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []GroupMember{}
	for rows.Next() {
		var m GroupMember
		if err := rows.Scan(&m.GroupID, &m.GroupName, &m.AgentID, &m.Role, &m.Mine); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}
