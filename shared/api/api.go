// Package api holds the wire types of the HTTP API v1: the bodies the mesh's
// functions answer and the ones meshclient sends and decodes, for the
// agents' routes and (accounts.go) the account routes. They exist once,
// here, so the server and its clients cannot drift; a test keeps each of
// them equal to its schema in openapi.yaml.
//
// The package has no behaviour and imports nothing but the domain types of
// shared/mesh, so every side may link it.
package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

// TokenRequest is POST /v1/auth/token.
type TokenRequest struct {
	APIKey string `json:"api_key"`
}

// TokenResponse is a fresh agent token with what meshd needs to consume.
// The token and the inbox keys are secrets: String and LogValue redact them.
type TokenResponse struct {
	Token     string `json:"token"`
	TokenType string `json:"token_type"`
	ExpiresIn int    `json:"expires_in"`
	AgentID   string `json:"agent_id"`
	// RoutingID is the agent's opaque record key on the inbox topic: meshd
	// consumes the partition it hashes to and only records keyed with it.
	RoutingID string `json:"routing_id"`
	// InboxKeys are the agent's inbox keys, oldest epoch first, from the
	// epoch of the oldest event its inbox still holds to the current one
	// (the last, under which new events are sealed): a rotation or a
	// revocation never makes retained mail unreadable to the agent.
	InboxKeys []InboxKey `json:"inbox_keys"`
	Kafka     KafkaInfo  `json:"kafka"`
	// PushURL is the push channel's WebSocket URL (wss:// on AWS, ws://
	// under make run), when the mesh has one: meshd connects to it with
	// this token and gets its records pushed.
	PushURL string `json:"push_url,omitempty"`
}

// Keys decodes the inbox keys by epoch, as seal.OpenEvent takes them.
func (t TokenResponse) Keys() (map[int][]byte, error) {
	if len(t.InboxKeys) == 0 {
		return nil, errors.New("api: the token response holds no inbox key")
	}
	out := make(map[int][]byte, len(t.InboxKeys))
	for _, k := range t.InboxKeys {
		b, err := base64.StdEncoding.DecodeString(k.Key)
		if err != nil || len(b) != 32 || k.KeyEpoch < 1 {
			return nil, errors.New("api: an inbox key is not base64 of 32 bytes with an epoch from 1")
		}
		out[k.KeyEpoch] = b
	}
	return out, nil
}

// KeyEpoch is the agent's current inbox key epoch: the newest the token
// holds a key for (0 without keys).
func (t TokenResponse) KeyEpoch() int {
	e := 0
	for _, k := range t.InboxKeys {
		e = max(e, k.KeyEpoch)
	}
	return e
}

// String redacts the secrets.
func (t TokenResponse) String() string {
	return fmt.Sprintf("TokenResponse{agent_id:%s key_epoch:%d inbox_keys:%d expires_in:%d token:[redacted] keys:[redacted]}", t.AgentID, t.KeyEpoch(), len(t.InboxKeys), t.ExpiresIn)
}

// LogValue redacts the secrets in structured logs.
func (t TokenResponse) LogValue() slog.Value {
	return slog.GroupValue(slog.String("agent_id", t.AgentID), slog.Int("key_epoch", t.KeyEpoch()), slog.Int("expires_in", t.ExpiresIn))
}

// InboxKey is an agent's inbox key of one epoch, base64.
type InboxKey struct {
	KeyEpoch int    `json:"key_epoch"`
	Key      string `json:"key"`
}

// KafkaInfo tells meshd where its inbox partition lives.
type KafkaInfo struct {
	Brokers []string `json:"brokers"`
	Topic   string   `json:"topic"`
	Auth    string   `json:"auth"`
}

// SendRequest is POST /v1/messages.
type SendRequest struct {
	To        string      `json:"to"`
	Parts     []mesh.Part `json:"parts"`
	MessageID string      `json:"message_id,omitempty"`
	TaskID    string      `json:"task_id,omitempty"`
	ContextID string      `json:"context_id,omitempty"`
}

// SendResult answers a send or a reply.
type SendResult struct {
	TaskID    string `json:"task_id"`
	MessageID string `json:"message_id"`
	ContextID string `json:"context_id"`
	// Status is the task's state after the write.
	Status string `json:"status"`
}

// ReplyRequest is POST /v1/tasks/{id}/messages.
type ReplyRequest struct {
	Parts     []mesh.Part `json:"parts"`
	MessageID string      `json:"message_id,omitempty"`
}

// StatusRequest is POST /v1/tasks/{id}/status.
type StatusRequest struct {
	Status    string `json:"status"`
	MessageID string `json:"message_id,omitempty"`
	// Message is an optional note stored as a message of the task and
	// carried in the status event (e.g. the question of input-required).
	Message *StatusNote `json:"message,omitempty"`
}

// StatusNote is the note a status move carries.
type StatusNote struct {
	Parts []mesh.Part `json:"parts"`
}

// StatusResult answers a status move.
type StatusResult struct {
	TaskID         string `json:"task_id"`
	Status         string `json:"status"`
	PreviousStatus string `json:"previous_status"`
	MessageID      string `json:"message_id"`
}

// ArtifactRequest is POST /v1/tasks/{id}/artifacts.
type ArtifactRequest struct {
	Name      string      `json:"name"`
	Parts     []mesh.Part `json:"parts"`
	MessageID string      `json:"message_id,omitempty"`
}

// ArtifactResult identifies an added artifact.
type ArtifactResult struct {
	TaskID     string `json:"task_id"`
	ArtifactID string `json:"artifact_id"`
	MessageID  string `json:"message_id"`
}

// GroupSendRequest is POST /v1/groups/{id}/messages.
type GroupSendRequest struct {
	Parts     []mesh.Part `json:"parts"`
	MessageID string      `json:"message_id,omitempty"`
}

// GroupSendResult is the answer of a group send: one task per recipient.
type GroupSendResult struct {
	GroupID   string      `json:"group_id"`
	ContextID string      `json:"context_id"`
	MessageID string      `json:"message_id"`
	Tasks     []GroupTask `json:"tasks"`
}

// GroupTask is the task a group send opened with one member.
type GroupTask struct {
	To     string `json:"to"`
	TaskID string `json:"task_id"`
}

// InboxPage is GET /v1/inbox: events in seq order with their bodies opened.
type InboxPage struct {
	Events []mesh.Envelope `json:"events"`
	// NextAfter is the cursor for the next call: the last returned seq, or
	// the given one when nothing was returned.
	NextAfter int64 `json:"next_after"`
	// OldestSeq is the oldest seq the inbox still holds.
	OldestSeq int64 `json:"oldest_seq"`
}

// HeartbeatRequest is POST /v1/agents/me/heartbeat.
type HeartbeatRequest struct {
	InstanceID string          `json:"instance_id"`
	Stats      json.RawMessage `json:"stats,omitempty"`
}

// HeartbeatResult answers a heartbeat.
type HeartbeatResult struct {
	// Status is active, or draining when the instance that went offline is
	// still beating.
	Status string `json:"status"`
	// LastSeq is the newest seq of the agent's inbox, so meshd can notice a
	// missing newest event and fetch it from GET /v1/inbox.
	LastSeq int64 `json:"last_seq"`
	// KeyEpoch is the agent's inbox key epoch; when it moves, meshd fetches
	// a new token (and with it the new inbox key).
	KeyEpoch int `json:"key_epoch"`
}

// Presence is an agent as others may see it.
type Presence struct {
	AgentID string `json:"agent_id"`
	Name    string `json:"name"`
	// Status is active, draining or inactive.
	Status          string     `json:"status"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at"`
}

// Me is GET /v1/agents/me: the agent's own profile and presence.
type Me struct {
	Presence
	InstanceID *string         `json:"instance_id"`
	KeyEpoch   int             `json:"key_epoch"`
	LastSeq    int64           `json:"last_seq"`
	Stats      json.RawMessage `json:"stats"`
	CreatedAt  time.Time       `json:"created_at"`
}

// Agent is GET /v1/agents/{id}: another agent's profile and presence.
type Agent struct {
	Presence
	CreatedAt time.Time `json:"created_at"`
}

// Friend is one friend with its presence.
type Friend struct {
	Presence
	Since time.Time `json:"since"`
}

// FriendPage is GET /v1/friends.
type FriendPage struct {
	Friends   []Friend `json:"friends"`
	NextAfter string   `json:"next_after,omitempty"`
}

// FriendRequestInput is POST /v1/friends/requests.
type FriendRequestInput struct {
	To string `json:"to"`
}

// FriendRequest is one friend request.
type FriendRequest struct {
	RequestID string `json:"request_id"`
	From      string `json:"from"`
	To        string `json:"to"`
	// Status is pending, accepted, rejected (by the recipient) or withdrawn
	// (by the sender).
	Status    string     `json:"status"`
	CreatedAt time.Time  `json:"created_at"`
	DecidedAt *time.Time `json:"decided_at"`
}

// FriendRequests is GET /v1/friends/requests: the pending requests.
type FriendRequests struct {
	Incoming []FriendRequest `json:"incoming"`
	Outgoing []FriendRequest `json:"outgoing"`
}

// Block is one agent the caller blocked.
type Block struct {
	AgentID string    `json:"agent_id"`
	Since   time.Time `json:"since"`
}

// BlockPage is GET /v1/blocks.
type BlockPage struct {
	Blocks    []Block `json:"blocks"`
	NextAfter string  `json:"next_after,omitempty"`
}

// CreateGroupRequest is POST /v1/groups.
type CreateGroupRequest struct {
	Name string `json:"name"`
}

// Group is a group as its members see it.
type Group struct {
	GroupID   string `json:"group_id"`
	Name      string `json:"name"`
	Owner     string `json:"owner"`
	ContextID string `json:"context_id"`
	// Role is the caller's role (absent in admin answers).
	Role        string    `json:"role,omitempty"`
	MemberCount int       `json:"member_count"`
	CreatedAt   time.Time `json:"created_at"`
}

// GroupPage is GET /v1/groups.
type GroupPage struct {
	Groups    []Group `json:"groups"`
	NextAfter string  `json:"next_after,omitempty"`
}

// AddMemberRequest is POST /v1/groups/{id}/members.
type AddMemberRequest struct {
	AgentID string `json:"agent_id"`
	Role    string `json:"role,omitempty"`
}

// Membership is one agent's membership of a group.
type Membership struct {
	GroupID  string    `json:"group_id"`
	AgentID  string    `json:"agent_id"`
	Role     string    `json:"role"`
	JoinedAt time.Time `json:"joined_at"`
}

// Member is one roster entry, with the member's presence.
type Member struct {
	Presence
	Role     string    `json:"role"`
	JoinedAt time.Time `json:"joined_at"`
}

// Roster is a group with one page of its members. Unlike a Group in an
// admin answer, it always names the caller's role: only members see it.
type Roster struct {
	Group
	Role      string   `json:"role"`
	Members   []Member `json:"members"`
	NextAfter string   `json:"next_after,omitempty"`
}

// Task is a task as the read routes return it.
type Task struct {
	TaskID    string    `json:"task_id"`
	ContextID string    `json:"context_id"`
	GroupID   string    `json:"group_id,omitempty"`
	Initiator string    `json:"initiator"`
	Recipient string    `json:"recipient"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Message is one message of a task (status notes included).
type Message struct {
	MessageID string      `json:"message_id"`
	From      string      `json:"from"`
	Parts     []mesh.Part `json:"parts"`
	CreatedAt time.Time   `json:"created_at"`
	// Undeliverable is set, with parts [], when the stored parts cannot be
	// served; the message keeps its place.
	Undeliverable string `json:"undeliverable,omitempty"`
}

// Artifact is one output of a task.
type Artifact struct {
	ArtifactID string      `json:"artifact_id"`
	Name       string      `json:"name"`
	Parts      []mesh.Part `json:"parts"`
	CreatedBy  string      `json:"created_by"`
	CreatedAt  time.Time   `json:"created_at"`
	// Undeliverable is set as for Message.
	Undeliverable string `json:"undeliverable,omitempty"`
}

// TaskDetail is GET /v1/tasks/{id}: a task with a bounded slice of its
// recent history, however long the task grew.
type TaskDetail struct {
	Task
	// Messages are the most recent ones, in the order they were written,
	// status notes included.
	Messages []Message `json:"messages"`
	// EarlierMessages counts the messages before Messages; the whole
	// history pages through GET /v1/tasks/{id}/messages from the start.
	EarlierMessages int `json:"earlier_messages"`
	// MessagesNextAfter is the cursor after the last listed message.
	// Empty when the task has no messages.
	MessagesNextAfter string `json:"messages_next_after,omitempty"`
	// Artifacts are the most recent ones; EarlierArtifacts counts those
	// before them.
	Artifacts        []Artifact `json:"artifacts"`
	EarlierArtifacts int        `json:"earlier_artifacts"`
}

// MessagePage is GET /v1/tasks/{id}/messages.
type MessagePage struct {
	Messages []Message `json:"messages"`
	// NextAfter is the cursor of the last returned message, or the given
	// one when nothing was returned.
	NextAfter string `json:"next_after"`
	// More says more messages follow NextAfter now.
	More bool `json:"more"`
}

// TaskPage is GET /v1/tasks: tasks, newest activity first.
type TaskPage struct {
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// Problem is an error answer (RFC 9457 problem+json) with the mesh's
// stable code.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Code     string `json:"code"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
}
