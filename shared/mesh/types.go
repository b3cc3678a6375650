package mesh

import (
	"encoding/json"
	"regexp"
	"time"
	"unicode/utf8"
)

// AgentIDPattern is the documented shape of an agent id: 1-64 characters,
// starting with a letter or digit, then letters, digits, '.', '_' or '-'.
// Ids are compared exactly (binary collation): "Alice" and "alice" differ.
var AgentIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidAgentID reports whether id matches AgentIDPattern.
func ValidAgentID(id string) bool { return AgentIDPattern.MatchString(id) }

// DisplayNamePattern is the documented shape of a display name (agents,
// groups, artifacts): no C0 or C1 control characters, no line or paragraph
// separators, no byte-order mark and no bidirectional formatting characters,
// which would let a name ring a terminal bell, rewrite a roster line on an
// operator's screen or show reversed text to other agents. Length is checked
// separately.
var DisplayNamePattern = regexp.MustCompile(`^[^\x{0000}-\x{001F}\x{007F}-\x{009F}\x{061C}\x{200E}\x{200F}\x{2028}-\x{202E}\x{2066}-\x{2069}\x{FEFF}]+$`)

// PrintableName reports whether name is non-empty valid UTF-8 that matches
// DisplayNamePattern.
func PrintableName(name string) bool {
	return utf8.ValidString(name) && DisplayNamePattern.MatchString(name)
}

// Presence states of an agent.
const (
	PresenceActive   = "active"
	PresenceDraining = "draining"
	PresenceInactive = "inactive"
)

// Agent is a registered agent and its presence.
type Agent struct {
	AgentID         string     `json:"agent_id"`
	Name            string     `json:"name"`
	Status          string     `json:"status"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
}

// Task states (A2A).
const (
	TaskSubmitted     = "submitted"
	TaskWorking       = "working"
	TaskInputRequired = "input-required"
	TaskCompleted     = "completed"
	TaskFailed        = "failed"
	TaskCanceled      = "canceled"
	TaskRejected      = "rejected"
)

// TerminalTaskState reports whether no further move is allowed from s.
func TerminalTaskState(s string) bool {
	switch s {
	case TaskCompleted, TaskFailed, TaskCanceled, TaskRejected:
		return true
	}
	return false
}

// Part is one piece of a message or artifact: text, data, url or file.
type Part struct {
	Kind      string          `json:"kind"`
	Text      string          `json:"text,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	URL       string          `json:"url,omitempty"`
	Name      string          `json:"name,omitempty"`
	MediaType string          `json:"media_type,omitempty"`
	// Bytes is base64 for file parts.
	Bytes string `json:"bytes,omitempty"`
}

// Event types carried in the Kafka envelope.
const (
	EventMessage  = "message"
	EventStatus   = "status"
	EventArtifact = "artifact"
	// EventUndeliverable stands in for an event the server holds but cannot
	// serve (its stored content can no longer be encoded or sealed). It keeps
	// the event's seq and event_id so the recipient's stream stays gapless;
	// its body is an UndeliverableBody. Consumers log it and move on.
	EventUndeliverable = "undeliverable"
)

// UndeliverableBody is the body of an EventUndeliverable placeholder.
type UndeliverableBody struct {
	// Code is a stable reason, e.g. "unencodable" or "unsealable".
	Code string `json:"code"`
	// OriginalType is the type of the event it replaces.
	OriginalType string `json:"original_type"`
}

// EnvelopeVersion is the current value of Envelope.V: envelope v2, whose
// Kafka record (seal.Record) shows nothing but the version, the key epoch
// and a bucket-sized sealed blob under the recipient's opaque routing id.
const EnvelopeVersion = 2

// Envelope is one event for one recipient: the item of GET /v1/inbox, and,
// sealed whole with its body (seal.SealEvent), the content of a Kafka
// record. Nothing of it travels in clear on the shared topic.
type Envelope struct {
	V          int       `json:"v"`
	EventID    string    `json:"event_id"`
	Seq        int64     `json:"seq"`
	Type       string    `json:"type"`
	To         string    `json:"to"`
	From       string    `json:"from"`
	TaskID     string    `json:"task_id"`
	ContextID  string    `json:"context_id"`
	GroupID    string    `json:"group_id,omitempty"`
	MessageID  string    `json:"message_id"`
	OccurredAt time.Time `json:"occurred_at"`
	KeyEpoch   int       `json:"key_epoch"`
	// TraceID is the X-Ray trace of the write that created the event, when
	// it had one; on Kafka it travels inside the sealed event, never in a
	// header.
	TraceID string          `json:"trace_id,omitempty"`
	Body    json.RawMessage `json:"body,omitempty"`
	// Status is the delivery state in the inbox API (pending, sent, failed);
	// not part of the Kafka record.
	Delivery string `json:"delivery,omitempty"`
}
