package identity

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/textlimit"
)

// Actor kinds of the audit log.
const (
	ActorAgent   = "agent"
	ActorAccount = "account"
	ActorAdmin   = "admin"
)

// Actor is who made a change: an agent (its own routes), an account (the
// console and the account routes, acting for one of its agents) or the
// operator's admin key.
type Actor = api.AuditActor

// AdminActor is the operator's admin key.
var AdminActor = Actor{Kind: ActorAdmin, ID: "admin"}

type actorKey struct{}

// WithActor makes a the actor of the changes made under ctx. Account routes
// call the agent's own service methods under it, so the same code paths
// decide and the audit log names the account, not the agent.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// actorOr is ctx's actor, or def when none was set.
func actorOr(ctx context.Context, def Actor) Actor {
	if a, ok := ctx.Value(actorKey{}).(Actor); ok && a.Kind != "" {
		return a
	}
	return def
}

// agentActor is the default actor of an agent's own route.
func agentActor(agentID string) Actor { return Actor{Kind: ActorAgent, ID: agentID} }

// Audit actions: what the log records.
const (
	AuditAgentCreated       = "agent.created"
	AuditKeyRotated         = "key.rotated"
	AuditKeyRevoked         = "key.revoked"
	AuditRequestSent        = "friend_request.sent"
	AuditRequestRejected    = "friend_request.rejected"
	AuditRequestWithdrawn   = "friend_request.withdrawn"
	AuditFriendshipCreated  = "friendship.created"
	AuditFriendshipRemoved  = "friendship.removed"
	AuditGroupCreated       = "group.created"
	AuditGroupMemberAdded   = "group.member_added"
	AuditGroupMemberRemoved = "group.member_removed"
	AuditPolicyChanged      = "policy.changed"
	AuditAgentDrained       = "agent.drained"
	AuditOutboxRedriven     = "outbox.redriven"
	AuditAgentDeleted       = "agent.deleted"
	AuditAccountDeleted     = "account.deleted"
)

const insertAuditSQL = `INSERT INTO audit_log (occurred_at, actor_kind, actor_id, action, agent_id, other_id, detail) VALUES (?, ?, ?, ?, ?, ?, ?)`

// Audit writes one audit row inside the caller's transaction q, so the
// change and its record commit together. agentID is the agent the change is
// about, otherID the other agent or group it involves ("" for none); the
// accounts owning either can read it. The actor is ctx's (WithActor), else def.
func Audit(ctx context.Context, q Querier, def Actor, now time.Time, action, agentID, otherID, detail string) error {
	a := actorOr(ctx, def)
	var other any
	if otherID != "" {
		other = otherID
	}
	// A VARCHAR(500) of utf8mb4: a cut through a character would make
	// strict mode refuse the row and roll back the change it records.
	detail = textlimit.Truncate(detail, 500)
	_, err := q.ExecContext(ctx, insertAuditSQL, now, a.Kind, a.ID, action, agentID, other, detail)
	return err
}

// Friendship policies of an agent.
const (
	// PolicyAgent: the agent accepts or rejects its own requests (default).
	PolicyAgent = "agent"
	// PolicyAccount: only the agent's account may accept a request to it.
	PolicyAccount = "account"
)

// AgentPolicy is how friend requests to an agent are decided.
type AgentPolicy = api.AgentPolicy

// OperatorAccount owns the agents made with the admin key and every agent
// that existed before accounts (migration 0007).
const OperatorAccount = "operator"

// PolicyOf reads agentID's account and friendship policy. An agent without
// a row (inserted around the identity service) is the operator's, with the
// default policy.
func PolicyOf(ctx context.Context, q Querier, agentID string) (AgentPolicy, error) {
	p := AgentPolicy{AccountID: OperatorAccount, Kind: KindNormal, FriendPolicy: PolicyAgent}
	err := q.QueryRowContext(ctx, "SELECT account_id, kind, friend_policy, same_account_auto FROM agent_accounts WHERE agent_id = ?", agentID).
		Scan(&p.AccountID, &p.Kind, &p.FriendPolicy, &p.SameAccountAuto)
	if errors.Is(err, sql.ErrNoRows) {
		return p, nil
	}
	return p, err
}

// Agent kinds.
const (
	KindNormal      = "normal"
	KindVirtualUser = "virtual-user"
)

// errAccountApproval refuses an agent's own acceptance of a request that its
// account must approve.
var errAccountApproval = mesh.Errorf(mesh.KindForbidden, "account_approval_required",
	"this agent's friend requests are approved by its account (in the console or the account API)")

// decidedByAccount reports whether ctx acts for an account.
func decidedByAccount(ctx context.Context) bool {
	return actorOr(ctx, Actor{}).Kind == ActorAccount
}

func auditDetail(format string, args ...any) string { return fmt.Sprintf(format, args...) }
