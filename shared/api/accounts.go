package api

import (
	"encoding/json"
	"time"
)

// The account routes (/v1/account/..., /v1/admin/accounts and the redrive
// routes): what people and the console send and read. Package accounts
// answers with these types.

// CreateAccountRequest is POST /v1/admin/accounts.
type CreateAccountRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
	Name     string `json:"name"`
	// Operator accounts also see the outbox's health and redrive dead letters.
	Operator bool `json:"operator"`
}

// Account is an account as the API shows it (never its password hash).
type Account struct {
	AccountID string    `json:"account_id"`
	Email     string    `json:"email"`
	Name      string    `json:"name"`
	Operator  bool      `json:"operator"`
	CreatedAt time.Time `json:"created_at"`
}

// SignInRequest is POST /v1/account/session.
type SignInRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

// SignedIn is the sign-in route's answer (the session token itself only
// travels in the HttpOnly cookie).
type SignedIn struct {
	Account   Account   `json:"account"`
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// AccountKey is one API key of an account's agent (never its secret).
type AccountKey struct {
	KeyID     string     `json:"key_id"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// AccountAgent is one of the account's agents with what its owner watches.
type AccountAgent struct {
	AgentID         string     `json:"agent_id"`
	Name            string     `json:"name"`
	Kind            string     `json:"kind"`
	Status          string     `json:"status"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at"`
	FriendPolicy    string     `json:"friend_policy"`
	SameAccountAuto bool       `json:"same_account_auto"`
	// LastSeq is the newest event written to the agent's inbox; HandledSeq
	// the newest its meshd reported handled (heartbeat stats), and InboxLag
	// the difference: events written and not yet handled.
	LastSeq    int64 `json:"last_seq"`
	HandledSeq int64 `json:"handled_seq"`
	InboxLag   int64 `json:"inbox_lag"`
	// Pending events not yet published to Kafka; DeadLetters given up on
	// (still served by GET /v1/inbox; an operator can redrive them).
	Pending     int64 `json:"pending"`
	DeadLetters int64 `json:"dead_letters"`
	// Parked is the number of events meshd parked after its handler failed
	// for good, when its heartbeat reports it.
	Parked int64           `json:"parked"`
	Stats  json.RawMessage `json:"stats"`
	Keys   []AccountKey    `json:"keys"`
}

// AccountAgentPage is GET /v1/account/agents: a page of the account's
// agents by id.
type AccountAgentPage struct {
	Agents []AccountAgent `json:"agents"`
	// NextAfter is the last agent id of the page when more follow.
	NextAfter string `json:"next_after,omitempty"`
}

// AccountCreateAgentRequest is POST /v1/account/agents.
type AccountCreateAgentRequest struct {
	AgentID string `json:"agent_id"`
	Name    string `json:"name"`
	// Kind is normal (the default) or virtual-user.
	Kind string `json:"kind"`
}

// AccountNewAgent is a new agent of the account with its first API key
// (shown once).
type AccountNewAgent struct {
	AgentID   string    `json:"agent_id"`
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	KeyID     string    `json:"key_id"`
	APIKey    string    `json:"api_key"`
	KeyEpoch  int       `json:"key_epoch"`
	CreatedAt time.Time `json:"created_at"`
}

// DrainResult is POST /v1/account/agents/{id}/drain: the agent's presence
// after the drain.
type DrainResult struct {
	Status string `json:"status"`
}

// PolicyRequest is PUT /v1/account/agents/{id}/policy.
type PolicyRequest struct {
	// FriendPolicy is agent (the agent decides its requests) or account.
	FriendPolicy string `json:"friend_policy"`
	// SameAccountAuto accepts requests between the account's agents at once.
	SameAccountAuto bool `json:"same_account_auto"`
}

// Timeline is GET /v1/account/agents/{id}/tasks/{task_id}: one task of an
// agent with a page of its messages (status notes included) and its recent
// artifacts.
type Timeline struct {
	Task             Task        `json:"task"`
	Messages         MessagePage `json:"messages"`
	Artifacts        []Artifact  `json:"artifacts"`
	EarlierArtifacts int         `json:"earlier_artifacts"`
}

// AccountFriendRequests is GET /v1/account/friend-requests: the pending
// requests to the account's agents.
type AccountFriendRequests struct {
	Requests []FriendRequest `json:"requests"`
}

// DecisionRequest is POST /v1/account/friend-requests/{id}.
type DecisionRequest struct {
	// Decision is accept or reject.
	Decision string `json:"decision"`
}

// AuditActor is who made an audited change.
type AuditActor struct {
	// Kind is agent, account or admin.
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// AuditEntry is one entry of the audit log.
type AuditEntry struct {
	ID         string     `json:"id"`
	OccurredAt time.Time  `json:"occurred_at"`
	Actor      AuditActor `json:"actor"`
	Action     string     `json:"action"`
	// AgentID is the agent the change is about (the recipient, for a
	// redrive); OtherID the other agent or the group it involves.
	AgentID string  `json:"agent_id"`
	OtherID *string `json:"other_id"`
	Detail  string  `json:"detail"`
}

// AuditPage is GET /v1/account/audit: entries newest first.
type AuditPage struct {
	Entries []AuditEntry `json:"entries"`
	// NextBefore is passed as before for older entries; absent on the last
	// page.
	NextBefore string `json:"next_before,omitempty"`
}

// DeadLetter is an outbox event the dispatcher gave up on.
type DeadLetter struct {
	Recipient string    `json:"recipient"`
	Seq       int64     `json:"seq"`
	EventID   string    `json:"event_id"`
	Type      string    `json:"type"`
	LastError *string   `json:"last_error"`
	FailedAt  time.Time `json:"failed_at"`
}

// Backlog is one recipient's pending events.
type Backlog struct {
	Recipient string `json:"recipient"`
	Pending   int64  `json:"pending"`
}

// OutboxHealth is GET /v1/account/outbox: what an operator watches of the
// outbox.
type OutboxHealth struct {
	Pending int64 `json:"pending"`
	// OldestPendingSeconds is the age of the oldest pending event (0: none).
	OldestPendingSeconds float64      `json:"oldest_pending_seconds"`
	DeadLetters          int64        `json:"dead_letters"`
	Recent               []DeadLetter `json:"recent_dead_letters"`
	// Backlog is the recipients with the most pending events (the chart).
	Backlog []Backlog `json:"backlog"`
}

// RedriveRequest is the body of both redrive routes (optional).
type RedriveRequest struct {
	// Recipient limits the redrive to one recipient's dead letters.
	Recipient string `json:"recipient"`
}

// Redriven is the answer to a redrive.
type Redriven struct {
	// Requeued counts the events put back to pending.
	Requeued int64 `json:"requeued"`
	// Recipients are the recipients whose dead letters were requeued.
	Recipients []string `json:"recipients"`
}
