package api

import "time"

// The operator's routes (admin key): bootstrap agents, keys and the graph.

// CreateAgentRequest is POST /v1/admin/agents.
type CreateAgentRequest struct {
	AgentID string `json:"agent_id"`
	Name    string `json:"name,omitempty"`
}

// NewAgent is a created agent with its first API key, shown once.
type NewAgent struct {
	AgentID   string    `json:"agent_id"`
	Name      string    `json:"name"`
	KeyID     string    `json:"key_id"`
	APIKey    string    `json:"api_key"`
	KeyEpoch  int       `json:"key_epoch"`
	CreatedAt time.Time `json:"created_at"`
}

// RotateKeyRequest is the optional body of a key rotation (admin and
// account routes alike).
type RotateKeyRequest struct {
	// RevokeExisting revokes every other live key of the agent in the same
	// transaction (rotation after a leak); otherwise old keys stay valid until
	// revoked one by one (rotation without downtime). Revoking also rotates
	// the inbox key: an inbox key fetched with a leaked API key must not open
	// mail written after the revocation.
	RevokeExisting bool `json:"revoke_existing"`
	// RotateInboxKey starts a new inbox key epoch: events written from now
	// on are sealed under a new inbox key, which meshd receives with its next
	// token. Events already written keep the epoch they were sealed for.
	RotateInboxKey bool `json:"rotate_inbox_key"`
}

// RotatedKey is a new API key (shown once) and what the rotation revoked.
type RotatedKey struct {
	AgentID       string    `json:"agent_id"`
	KeyID         string    `json:"key_id"`
	APIKey        string    `json:"api_key"`
	CreatedAt     time.Time `json:"created_at"`
	RevokedKeyIDs []string  `json:"revoked_key_ids"`
	KeyEpoch      int       `json:"key_epoch"`
}

// RevokedKey is a revoked API key.
type RevokedKey struct {
	AgentID   string    `json:"agent_id"`
	KeyID     string    `json:"key_id"`
	RevokedAt time.Time `json:"revoked_at"`
	// KeyEpoch is the agent's inbox key epoch after the revocation.
	KeyEpoch int `json:"key_epoch"`
}

// FriendshipRequest is POST /v1/admin/friendships.
type FriendshipRequest struct {
	A string `json:"a"`
	B string `json:"b"`
}

// Friendship is two agents made friends by the operator.
type Friendship struct {
	A     string    `json:"a"`
	B     string    `json:"b"`
	Since time.Time `json:"since"`
}

// AdminGroupRequest is POST /v1/admin/groups.
type AdminGroupRequest struct {
	// GroupID is optional; a fresh one is generated when empty.
	GroupID string `json:"group_id"`
	Name    string `json:"name"`
	Owner   string `json:"owner"`
	// Members join as plain members; no friendship is required.
	Members []string `json:"members"`
}

// AgentPolicy is an agent's account and friendship policy.
type AgentPolicy struct {
	AccountID string `json:"account_id"`
	Kind      string `json:"kind"`
	// FriendPolicy is "agent" (the agent decides its requests) or "account"
	// (its account does).
	FriendPolicy string `json:"friend_policy"`
	// SameAccountAuto accepts requests from agents of the same account at once.
	SameAccountAuto bool `json:"same_account_auto"`
}
