package tasks

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"mime"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/textlimit"
)

// The read routes answer with shared/api's wire types; the event bodies
// below have their own (EventMessage, EventArtifact).
type (
	// Task is a task as the read routes return it.
	Task = api.Task
	// TaskDetail is a task with its recent history, as GET /v1/tasks/{id}
	// returns it: a bounded slice (see DetailMessages and its siblings), so
	// the answer fits a Lambda response however long the task grows.
	TaskDetail = api.TaskDetail
	// MessagePage is one page of GET /v1/tasks/{id}/messages.
	MessagePage = api.MessagePage
	// Message is one message of a task, its stored parts decoded.
	// Undeliverable is set, with parts [], when they cannot be served (see
	// outbox's undeliverable codes), and the message keeps its place.
	Message = api.Message
	// Artifact is one output of a task, added by its recipient.
	Artifact = api.Artifact
)

// other returns the party of t that is not agentID.
func other(t *Task, agentID string) string {
	if agentID == t.Initiator {
		return t.Recipient
	}
	return t.Initiator
}

// role returns "initiator", "recipient" or "" for agentID.
func role(t *Task, agentID string) string {
	switch agentID {
	case t.Initiator:
		return RoleInitiator
	case t.Recipient:
		return RoleRecipient
	}
	return ""
}

// Roles of a task's two parties.
const (
	RoleInitiator = "initiator"
	RoleRecipient = "recipient"
)

// EventMessage is a message as event bodies carry it: the same fields as
// Message, with the parts as stored (validated, compact JSON), so a fan-out
// does not encode them again for every recipient.
type EventMessage struct {
	MessageID string          `json:"message_id"`
	From      string          `json:"from"`
	Parts     json.RawMessage `json:"parts"`
	CreatedAt time.Time       `json:"created_at"`
}

// EventArtifact is an artifact as the "artifact" event carries it, with its
// parts as stored.
type EventArtifact struct {
	ArtifactID string          `json:"artifact_id"`
	Name       string          `json:"name"`
	Parts      json.RawMessage `json:"parts"`
	CreatedBy  string          `json:"created_by"`
	CreatedAt  time.Time       `json:"created_at"`
}

// TaskRef is the task summary every event body carries.
type TaskRef struct {
	TaskID    string `json:"task_id"`
	ContextID string `json:"context_id"`
	GroupID   string `json:"group_id,omitempty"`
	Initiator string `json:"initiator"`
	Recipient string `json:"recipient"`
	Status    string `json:"status"`
}

func ref(t *Task) TaskRef {
	return TaskRef{TaskID: t.TaskID, ContextID: t.ContextID, GroupID: t.GroupID, Initiator: t.Initiator, Recipient: t.Recipient, Status: t.Status}
}

// Event bodies: the opened "body" of an envelope (sealed on Kafka, plain in
// GET /v1/inbox). Every body has "task" with the task's state after the
// event, plus one of:
//
//	message:  {"message": {message_id, from, parts, created_at}, "task": {...}}
//	status:   {"status": {state, previous, by, reason?, message?}, "task": {...}}
//	artifact: {"artifact": {artifact_id, name, parts, created_by, created_at}, "task": {...}}
type (
	// MessageBody is the body of a "message" event.
	MessageBody struct {
		Message EventMessage `json:"message"`
		Task    TaskRef      `json:"task"`
	}
	// StatusBody is the body of a "status" event.
	StatusBody struct {
		Status StatusChange `json:"status"`
		Task   TaskRef      `json:"task"`
	}
	// ArtifactBody is the body of an "artifact" event.
	ArtifactBody struct {
		Artifact EventArtifact `json:"artifact"`
		Task     TaskRef       `json:"task"`
	}
)

// StatusChange describes one move of a task.
type StatusChange struct {
	State    string `json:"state"`
	Previous string `json:"previous"`
	// By is the agent that moved the task; empty when the mesh did (timeout).
	By string `json:"by"`
	// Reason is set for moves the mesh makes: "idle_timeout".
	Reason string `json:"reason,omitempty"`
	// Message is the note the mover attached, if any.
	Message *EventMessage `json:"message,omitempty"`
}

// ReasonIdleTimeout marks the scanner's timeout notices.
const ReasonIdleTimeout = "idle_timeout"

// idPattern is the shape of client-chosen ids (message_id, context_id) and
// of the ids the mesh mints (UUIDs): 1-64 characters, no spaces.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

func checkID(field, v string) error {
	if v != "" && !idPattern.MatchString(v) {
		return mesh.Errorf(mesh.KindInvalid, "invalid_"+field, "%s must be 1-64 characters: letters, digits, '.', '_', ':' or '-', starting with a letter or digit", field)
	}
	return nil
}

// Part kinds.
const (
	PartText = "text"
	PartData = "data"
	PartURL  = "url"
	PartFile = "file"
)

const maxParts = 100

// MaxDataDepth caps how deeply a data part's value nests, counting the value
// itself as level 1 when it is an object or array (a scalar is level 0).
// Every event body that carries it then stays far below what any JSON
// decoder accepts, so what is stored can always be served again.
const MaxDataDepth = 32

// validateParts checks every part and returns the parts as stored and sent
// (compact JSON). Size is measured on that encoding.
func validateParts(parts []mesh.Part, maxBytes int) (json.RawMessage, error) {
	if len(parts) == 0 {
		return nil, mesh.Errorf(mesh.KindInvalid, "invalid_parts", "a message needs at least one part")
	}
	if len(parts) > maxParts {
		return nil, mesh.Errorf(mesh.KindInvalid, "invalid_parts", "a message has at most %d parts", maxParts)
	}
	for i := range parts {
		// Checked on the raw value before json.Compact walks it.
		if parts[i].Kind == PartData && jsonlimit.Exceeds(parts[i].Data, MaxDataDepth) {
			return nil, mesh.Errorf(mesh.KindInvalid, "too_deep", "parts[%d].data nests deeper than %d levels", i, MaxDataDepth)
		}
		if err := validatePart(&parts[i]); err != nil {
			return nil, mesh.Errorf(mesh.KindInvalid, "invalid_part", "parts[%d]: %s", i, err.Error())
		}
	}
	b, err := json.Marshal(parts)
	if err != nil {
		return nil, mesh.Internal(err)
	}
	if len(b) > maxBytes {
		return nil, mesh.Errorf(mesh.KindTooLarge, "message_too_large", "the parts take %d bytes; the limit is %d", len(b), maxBytes)
	}
	return b, nil
}

type partProblem string

func (p partProblem) Error() string { return string(p) }

// validatePart checks one part; a part carries only its kind's fields, so a
// client mistake (a "text" sent with a "url") is caught instead of dropped.
func validatePart(p *mesh.Part) error {
	switch p.Kind {
	case PartText:
		if p.Text == "" {
			return partProblem("a text part needs a non-empty text")
		}
		if len(p.Data) > 0 || p.URL != "" || p.Bytes != "" || p.Name != "" || p.MediaType != "" {
			return partProblem("a text part carries only text")
		}
	case PartData:
		if len(p.Data) == 0 || string(p.Data) == "null" {
			return partProblem("a data part needs a JSON value in data")
		}
		var buf bytes.Buffer
		// json keeps a raw value's bytes as sent: invalid UTF-8 would fail
		// the insert into the utf8mb4 column (a 5xx) instead of a 400.
		if err := json.Compact(&buf, p.Data); err != nil || !utf8.Valid(p.Data) {
			return partProblem("data is not valid JSON")
		}
		p.Data = buf.Bytes()
		if p.Text != "" || p.URL != "" || p.Bytes != "" || p.Name != "" {
			return partProblem("a data part carries only data (and optionally media_type)")
		}
		if err := checkMediaType(p.MediaType, false); err != nil {
			return err
		}
	case PartURL:
		u, err := url.Parse(p.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(p.URL) > 2048 {
			return partProblem("a url part needs an absolute http or https url (at most 2048 bytes)")
		}
		if p.Text != "" || len(p.Data) > 0 || p.Bytes != "" {
			return partProblem("a url part carries only url, name and media_type")
		}
		if err := checkName(p.Name, false); err != nil {
			return err
		}
		if err := checkMediaType(p.MediaType, false); err != nil {
			return err
		}
	case PartFile:
		if p.Bytes == "" {
			return partProblem("a file part needs its content in bytes, base64-encoded")
		}
		if _, err := base64.StdEncoding.DecodeString(p.Bytes); err != nil {
			return partProblem("bytes is not valid base64 (standard alphabet, padded)")
		}
		if p.Text != "" || len(p.Data) > 0 || p.URL != "" {
			return partProblem("a file part carries only bytes, name and media_type")
		}
		if err := checkName(p.Name, true); err != nil {
			return err
		}
		if err := checkMediaType(p.MediaType, true); err != nil {
			return err
		}
	case "":
		return partProblem("kind is required: text, data, url or file")
	default:
		return partProblem("unknown kind " + quote(p.Kind) + "; use text, data, url or file")
	}
	return nil
}

func checkName(name string, required bool) error {
	switch {
	case name == "" && required:
		return partProblem("a file part needs a name")
	// Characters, as openapi.yaml's maxLength counts them (the name is
	// stored inside the parts' JSON, which the message size bounds).
	case utf8.RuneCountInString(name) > 255 || strings.ContainsAny(name, "/\\\x00"):
		return partProblem("name must be a file name of at most 255 characters, without slashes")
	}
	return nil
}

func checkMediaType(mt string, required bool) error {
	if mt == "" {
		if required {
			return partProblem("a file part needs a media_type such as application/pdf")
		}
		return nil
	}
	if t, _, err := mime.ParseMediaType(mt); err != nil || !strings.Contains(t, "/") || len(mt) > 255 {
		return partProblem("media_type must be a media type such as text/plain")
	}
	return nil
}

func quote(s string) string {
	if len(s) > 32 {
		s = textlimit.Truncate(s, 32) + "..."
	}
	b, _ := json.Marshal(s)
	return string(b)
}
