package a2agw

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// The mesh's task states are A2A's, one to one.
var (
	toA2AState = map[string]a2a.TaskState{
		mesh.TaskSubmitted:     a2a.TaskStateSubmitted,
		mesh.TaskWorking:       a2a.TaskStateWorking,
		mesh.TaskInputRequired: a2a.TaskStateInputRequired,
		mesh.TaskCompleted:     a2a.TaskStateCompleted,
		mesh.TaskFailed:        a2a.TaskStateFailed,
		mesh.TaskCanceled:      a2a.TaskStateCanceled,
		mesh.TaskRejected:      a2a.TaskStateRejected,
	}
	fromA2AState = func() map[a2a.TaskState]string {
		m := make(map[a2a.TaskState]string, len(toA2AState))
		for k, v := range toA2AState {
			m[v] = k
		}
		return m
	}()
)

// stops reports whether a waiting call or a stream ends at state: a
// terminal state, or input-required (the caller has to answer).
func stops(state string) bool {
	return mesh.TerminalTaskState(state) || state == mesh.TaskInputRequired
}

// Defaults for an A2A file part the client sent without a name or a media
// type: the mesh's file parts carry both.
const (
	defaultFileName  = "file"
	defaultMediaType = "application/octet-stream"
)

// meshParts maps A2A parts to the mesh's: text to text, data to data, raw to
// file (bytes base64-encoded), url to url. Metadata is dropped, and so is a
// text part's media type (mesh text parts carry only text).
func meshParts(parts a2a.ContentParts) ([]mesh.Part, error) {
	if len(parts) == 0 {
		return nil, errors.New("a message needs at least one part")
	}
	out := make([]mesh.Part, 0, len(parts))
	for i, p := range parts {
		if p == nil {
			return nil, fmt.Errorf("parts[%d] is null", i)
		}
		switch c := p.Content.(type) {
		case a2a.Text:
			out = append(out, mesh.Part{Kind: tasks.PartText, Text: string(c)})
		case a2a.Data:
			b, err := json.Marshal(c.Value)
			if err != nil {
				return nil, fmt.Errorf("parts[%d].data: %w", i, err)
			}
			out = append(out, mesh.Part{Kind: tasks.PartData, Data: b, MediaType: p.MediaType})
		case a2a.Raw:
			name, mt := p.Filename, p.MediaType
			if name == "" {
				name = defaultFileName
			}
			if mt == "" {
				mt = defaultMediaType
			}
			out = append(out, mesh.Part{Kind: tasks.PartFile, Bytes: base64.StdEncoding.EncodeToString(c), Name: name, MediaType: mt})
		case a2a.URL:
			out = append(out, mesh.Part{Kind: tasks.PartURL, URL: string(c), Name: p.Filename, MediaType: p.MediaType})
		default:
			return nil, fmt.Errorf("parts[%d] has no content (text, raw, data or url)", i)
		}
	}
	return out, nil
}

// a2aParts maps stored mesh parts back to A2A's.
func a2aParts(parts []mesh.Part) a2a.ContentParts {
	out := make(a2a.ContentParts, 0, len(parts))
	for _, p := range parts {
		switch p.Kind {
		case tasks.PartText:
			out = append(out, a2a.NewTextPart(p.Text))
		case tasks.PartData:
			var v any
			d := json.NewDecoder(bytes.NewReader(p.Data))
			d.UseNumber() // numbers travel as written, not as float64
			if err := d.Decode(&v); err != nil {
				v = json.RawMessage(p.Data)
			}
			out = append(out, &a2a.Part{Content: a2a.Data{Value: v}, MediaType: p.MediaType})
		case tasks.PartFile:
			raw, _ := base64.StdEncoding.DecodeString(p.Bytes) // validated when stored
			out = append(out, &a2a.Part{Content: a2a.Raw(raw), Filename: p.Name, MediaType: p.MediaType})
		case tasks.PartURL:
			out = append(out, &a2a.Part{Content: a2a.URL(p.URL), Filename: p.Name, MediaType: p.MediaType})
		}
	}
	return out
}

// a2aMessage maps a stored message of task t: the initiator's are the
// user's (ROLE_USER), the recipient's the agent's (ROLE_AGENT).
func a2aMessage(t *api.Task, m api.Message) *a2a.Message {
	role := a2a.MessageRoleAgent
	if m.From == t.Initiator {
		role = a2a.MessageRoleUser
	}
	return &a2a.Message{ID: m.MessageID, ContextID: t.ContextID, TaskID: a2a.TaskID(t.TaskID), Role: role, Parts: a2aParts(m.Parts)}
}

// eventMessage maps the message an event body carries.
func eventMessage(ref tasks.TaskRef, m *tasks.EventMessage) *a2a.Message {
	if m == nil {
		return nil
	}
	var parts []mesh.Part
	if err := json.Unmarshal(m.Parts, &parts); err != nil {
		parts = nil
	}
	t := api.Task{TaskID: ref.TaskID, ContextID: ref.ContextID, Initiator: ref.Initiator, Recipient: ref.Recipient}
	return a2aMessage(&t, api.Message{MessageID: m.MessageID, From: m.From, Parts: parts})
}

// a2aTask maps a task with its history (the newest history messages, or
// none when history is 0) and artifacts. status.message is the agent's
// newest message when it is the newest of the task (its answer, its
// question for input-required); a later message of the user's clears it.
func a2aTask(d *tasks.TaskDetail, history int) *a2a.Task {
	t := &a2a.Task{ID: a2a.TaskID(d.TaskID), ContextID: d.ContextID}
	at := d.UpdatedAt
	t.Status = a2a.TaskStatus{State: toA2AState[d.Status], Timestamp: &at}
	if n := len(d.Messages); n > 0 && d.Messages[n-1].From == d.Recipient {
		t.Status.Message = a2aMessage(&d.Task, d.Messages[n-1])
	}
	msgs := d.Messages
	if history >= 0 && len(msgs) > history {
		msgs = msgs[len(msgs)-history:]
	}
	for _, m := range msgs {
		t.History = append(t.History, a2aMessage(&d.Task, m))
	}
	for _, a := range d.Artifacts {
		t.Artifacts = append(t.Artifacts, &a2a.Artifact{ID: a2a.ArtifactID(a.ArtifactID), Name: a.Name, Parts: a2aParts(a.Parts)})
	}
	return t
}
