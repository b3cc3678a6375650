// Package a2aconformance is the behaviour of meshd's built-in A2A
// conformance agent (`meshd run -- meshd a2a-conformance-agent`): the
// system under test the A2A TCK drives through message id prefixes
// (a2aproject/a2a-tck, scenarios/*.feature). It is transport-free: given
// one event and the mesh operations on that event's task (Ops), it does
// what the TCK expects, using only a reply, status moves and artifacts.
// The A2A gateway turns those into the Task, status and artifact updates a
// stock A2A client sees.
package a2aconformance

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// Ops are the mesh operations the agent performs on its event's task. Both
// meshd's control-channel client (*meshd.HandlerClient, inside a handler
// run) and the API client (*meshclient.Client) implement it.
type Ops interface {
	Reply(ctx context.Context, taskID string, req meshclient.ReplyRequest) (meshclient.SendResult, error)
	UpdateStatus(ctx context.Context, taskID string, req meshclient.StatusRequest) (meshclient.StatusResult, error)
	AddArtifact(ctx context.Context, taskID, name string, parts []mesh.Part, messageID string) (meshclient.ArtifactResult, error)
}

var (
	_ Ops = (*meshd.HandlerClient)(nil)
	_ Ops = (*meshclient.Client)(nil)
)

// The TCK's streaming timeout (TCK_STREAMING_TIMEOUT): the waits of
// test-resubscribe-message-id (2x) and tck-delayed-complete (1x) are
// multiples of it.
const (
	// DefaultStreamingTimeout is the TCK's default (its SUT_REQUIREMENTS.md
	// and reference SUT: 2 s, so the resubscribe task works for 4 s).
	DefaultStreamingTimeout = 2 * time.Second
	// MaxStreamingTimeout bounds it: the longest wait (2x) occupies the
	// handler, and meshd handles one event at a time.
	MaxStreamingTimeout = time.Minute
)

// Texts and parts the TCK checks (scenarios/*.feature).
const (
	TextComplete        = "Hello from TCK"
	TextMessageResponse = "Direct message response"
	TextInputRequired   = "Input required: send a follow-up message on this task"
	TextRejected        = "rejected"
	FileName            = "output.txt"
	FileMediaType       = "text/plain"
	FileURL             = "https://example.com/output.txt"
	// FileContent is the file artifact's content ("tck", as the reference
	// SUT's raw bytes).
	FileContent = "tck"
	// DataJSON is the data artifact's value.
	DataJSON = `{"key":"value","count":42}`
)

// Step kinds.
const (
	StepStatus   = "status"   // move the task to State, with Parts as the note (if any)
	StepReply    = "reply"    // add Parts as a message of the agent
	StepArtifact = "artifact" // add the artifact Name with Parts
	StepWait     = "wait"     // keep the task as it is for Wait
)

// Step is one thing the agent does on the task.
type Step struct {
	Kind  string
	State string      // StepStatus
	Name  string      // StepArtifact
	Parts []mesh.Part // the note, reply or artifact content
	Wait  time.Duration
}

func status(state string, note ...mesh.Part) Step {
	return Step{Kind: StepStatus, State: state, Parts: note}
}

func text(s string) mesh.Part { return mesh.Part{Kind: "text", Text: s} }

func artifact(name string, p mesh.Part) Step {
	return Step{Kind: StepArtifact, Name: name, Parts: []mesh.Part{p}}
}

func textArtifact(s string) Step { return artifact("result", text(s)) }

func fileArtifact() Step {
	return artifact(FileName, mesh.Part{Kind: "file", Name: FileName, MediaType: FileMediaType,
		Bytes: base64.StdEncoding.EncodeToString([]byte(FileContent))})
}

// streamed is the streaming scenarios' shape: working, the artifacts,
// completed.
func streamed(artifacts ...Step) []Step {
	return append(append([]Step{status(mesh.TaskWorking)}, artifacts...), status(mesh.TaskCompleted))
}

// scenario is the behaviour of one message id prefix.
type scenario struct {
	prefix string
	plan   func(timeout time.Duration) []Step
}

// scenarios are matched longest prefix first (tck-artifact-file-url before
// tck-artifact-file), as the TCK's generated SUT does.
var scenarios = []scenario{
	{"test-resubscribe-message-id", func(t time.Duration) []Step {
		return []Step{status(mesh.TaskWorking), {Kind: StepWait, Wait: 2 * t}, status(mesh.TaskCompleted)}
	}},
	{"tck-stream-artifact-chunked", func(time.Duration) []Step {
		// The mesh has no A2A append: each chunk is an artifact of its own.
		return streamed(artifact("chunked", text("chunk-1 ")), artifact("chunked", text("chunk-2")))
	}},
	{"tck-stream-artifact-text", func(time.Duration) []Step { return streamed(textArtifact("Streamed text content")) }},
	{"tck-stream-artifact-file", func(time.Duration) []Step { return streamed(fileArtifact()) }},
	{"tck-stream-ordering-001", func(time.Duration) []Step { return streamed(textArtifact("Ordered output")) }},
	{"tck-artifact-file-url", func(time.Duration) []Step {
		return []Step{artifact(FileName, mesh.Part{Kind: "url", URL: FileURL, Name: FileName, MediaType: FileMediaType}), status(mesh.TaskCompleted)}
	}},
	{"tck-delayed-complete", func(t time.Duration) []Step {
		return []Step{status(mesh.TaskWorking), {Kind: StepWait, Wait: t}, status(mesh.TaskCompleted)}
	}},
	{"tck-message-response", func(time.Duration) []Step {
		// A mesh task cannot be a bare A2A Message: the message is the
		// agent's reply, and the task completes.
		return []Step{{Kind: StepReply, Parts: []mesh.Part{text(TextMessageResponse)}}, status(mesh.TaskCompleted)}
	}},
	{"tck-input-required", func(time.Duration) []Step {
		return []Step{status(mesh.TaskInputRequired, text(TextInputRequired))}
	}},
	{"tck-complete-task", func(time.Duration) []Step { return []Step{status(mesh.TaskCompleted, text(TextComplete))} }},
	{"tck-artifact-text", func(time.Duration) []Step {
		return []Step{textArtifact("Generated text content"), status(mesh.TaskCompleted)}
	}},
	{"tck-artifact-file", func(time.Duration) []Step { return []Step{fileArtifact(), status(mesh.TaskCompleted)} }},
	{"tck-artifact-data", func(time.Duration) []Step {
		return []Step{artifact("result", mesh.Part{Kind: "data", Data: json.RawMessage(DataJSON)}), status(mesh.TaskCompleted)}
	}},
	{"tck-reject-task", func(time.Duration) []Step { return []Step{status(mesh.TaskRejected, text(TextRejected))} }},
	{"tck-stream-001", func(time.Duration) []Step { return streamed(textArtifact("Stream hello from TCK")) }},
	{"tck-stream-002", func(time.Duration) []Step { return []Step{status(mesh.TaskCompleted)} }},
	{"tck-stream-003", func(time.Duration) []Step { return streamed(textArtifact("Stream task lifecycle")) }},
}

// Plan is what the agent does for a message with messageID and parts on a
// task in state current: the scenario of the longest matching prefix, else
// complete with the message's parts echoed as the note. A move to the
// state the task is already in is left out (the mesh refuses it), its note
// sent as a reply instead; rejected, which the mesh allows only as the
// first answer, becomes failed on a task already answered.
func Plan(messageID string, parts []mesh.Part, current string, timeout time.Duration) []Step {
	var planned []Step
	for _, s := range scenarios {
		if strings.HasPrefix(messageID, s.prefix) {
			planned = s.plan(timeout)
			break
		}
	}
	if planned == nil {
		planned = []Step{status(mesh.TaskCompleted, parts...)}
	}
	out := make([]Step, 0, len(planned))
	for _, st := range planned {
		if st.Kind == StepStatus {
			if st.State == mesh.TaskRejected && current != mesh.TaskSubmitted {
				st.State = mesh.TaskFailed
			}
			if st.State == current {
				if len(st.Parts) > 0 {
					out = append(out, Step{Kind: StepReply, Parts: st.Parts})
				}
				continue
			}
			current = st.State
		}
		out = append(out, st)
	}
	return out
}

// Agent is the conformance agent as a meshd.Handler.
type Agent struct {
	Ops Ops
	// StreamingTimeout is the TCK's TCK_STREAMING_TIMEOUT (0:
	// DefaultStreamingTimeout; at most MaxStreamingTimeout).
	StreamingTimeout time.Duration
	// Log receives notices (nil: discarded).
	Log *slog.Logger

	sleep func(ctx context.Context, d time.Duration) error // nil: a timer (tests replace it)
}

// Handler is the conformance agent acting through ops with the TCK's
// default streaming timeout.
func Handler(ops Ops) meshd.Handler { return &Agent{Ops: ops} }

// Handle does the plan of a message from the other party on a task the
// agent received (see work); every other event (artifacts, other status
// moves, the agent's own messages, replies on tasks the agent started) is
// ignored. Every write carries a message id derived from the event, so a
// retried event replays as no-ops. The task ending meanwhile (the client
// canceled it) ends the plan without an error.
func (a *Agent) Handle(ctx context.Context, env mesh.Envelope) error {
	timeout := a.StreamingTimeout
	if timeout == 0 {
		timeout = DefaultStreamingTimeout
	}
	if timeout < 0 || timeout > MaxStreamingTimeout {
		return meshd.Permanent(fmt.Errorf("a2aconformance: the streaming timeout must be between 0 and %v (got %v)", MaxStreamingTimeout, timeout))
	}
	w, ok, err := work(env)
	if !ok {
		return err
	}
	steps := Plan(w.messageID, w.parts, w.status, timeout)
	for i, st := range steps {
		err := a.do(ctx, env, stepMessageID(env, i), st)
		var ae *meshclient.APIError
		if errors.As(err, &ae) && ae.Status == 409 && ae.Code == "task_terminal" {
			a.log().Info("the task ended before the conformance agent finished", "task_id", env.TaskID, "message_id", w.messageID, "step", i)
			return nil
		}
		if err != nil {
			return fmt.Errorf("a2aconformance: task %s, step %d (%s) for message %q: %w", env.TaskID, i, st.Kind, w.messageID, err)
		}
	}
	return nil
}

func (a *Agent) do(ctx context.Context, env mesh.Envelope, id string, st Step) error {
	switch st.Kind {
	case StepStatus:
		req := meshclient.StatusRequest{Status: st.State, MessageID: id}
		if len(st.Parts) > 0 {
			req.Message = &meshclient.StatusMessage{Parts: st.Parts}
		}
		_, err := a.Ops.UpdateStatus(ctx, env.TaskID, req)
		return err
	case StepReply:
		_, err := a.Ops.Reply(ctx, env.TaskID, meshclient.ReplyRequest{Parts: st.Parts, MessageID: id})
		return err
	case StepArtifact:
		_, err := a.Ops.AddArtifact(ctx, env.TaskID, st.Name, st.Parts, id)
		return err
	case StepWait:
		sleep := a.sleep
		if sleep == nil {
			sleep = wait
		}
		return sleep(ctx, st.Wait)
	}
	return fmt.Errorf("unknown step %q", st.Kind)
}

func (a *Agent) log() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Log
}

// wait keeps the task as it is for d, or until ctx ends.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stepMessageID is the message id of step i of env's plan: the same for
// every delivery of the event (a retry is a no-op at the mesh), and within
// the mesh's id rule (at most 64 characters).
func stepMessageID(env mesh.Envelope, i int) string {
	h := sha256.Sum256([]byte(env.EventID + "\x00" + env.MessageID + "\x00" + strconv.Itoa(i)))
	return "a2ac-" + hex.EncodeToString(h[:20])
}

// eventMessage is a message as event bodies carry it (tasks.EventMessage).
type eventMessage struct {
	MessageID string      `json:"message_id"`
	From      string      `json:"from"`
	Parts     []mesh.Part `json:"parts"`
}

// eventBody is the part of an event's body the agent reads (tasks.MessageBody
// and tasks.StatusBody).
type eventBody struct {
	Message *eventMessage `json:"message"`
	Status  *struct {
		State   string        `json:"state"`
		By      string        `json:"by"`
		Message *eventMessage `json:"message"`
	} `json:"status"`
	Task struct {
		TaskID    string `json:"task_id"`
		Initiator string `json:"initiator"`
		Recipient string `json:"recipient"`
		Status    string `json:"status"`
	} `json:"task"`
}

// incoming is a message the agent acts on.
type incoming struct {
	messageID string
	parts     []mesh.Part
	status    string // the task's state after the event
}

// work is the message env brings the agent, if it is one to act on: a
// message event from the initiator of a task the agent received, or the
// initiator's answer to input-required made as a move back to working
// with the answer as its note (the mesh's way; a plain reply is a message
// event). ok is false for every other event; err is set (permanent) when
// the event cannot be read.
func work(env mesh.Envelope) (w incoming, ok bool, err error) {
	if env.Type != mesh.EventMessage && env.Type != mesh.EventStatus {
		return w, false, nil
	}
	var b eventBody
	if err := json.Unmarshal(env.Body, &b); err != nil {
		return w, false, meshd.Permanent(fmt.Errorf("a2aconformance: the %s event's body cannot be read: %w", env.Type, err))
	}
	t := b.Task
	if t.TaskID != env.TaskID || t.Recipient != env.To || t.Initiator == env.To || mesh.TerminalTaskState(t.Status) {
		return w, false, nil
	}
	var m *eventMessage
	switch {
	case env.Type == mesh.EventMessage:
		m = b.Message
	case b.Status != nil && b.Status.State == mesh.TaskWorking && b.Status.By == t.Initiator:
		m = b.Status.Message
	}
	if m == nil || m.From != t.Initiator {
		return w, false, nil
	}
	id := m.MessageID
	if id == "" {
		id = env.MessageID
	}
	return incoming{messageID: id, parts: m.Parts, status: t.Status}, true, nil
}

// MaxEnvelope bounds the envelope read from stdin: an event is at most the
// mesh's message size (256 KiB by default) plus its fields.
const MaxEnvelope = 16 << 20

// ReadEnvelope reads the envelope meshd's CommandHandler writes on stdin.
func ReadEnvelope(r io.Reader) (mesh.Envelope, error) {
	var env mesh.Envelope
	b, err := io.ReadAll(io.LimitReader(r, MaxEnvelope+1))
	if err != nil {
		return env, fmt.Errorf("a2aconformance: reading the event: %w", err)
	}
	if len(b) > MaxEnvelope {
		return env, fmt.Errorf("a2aconformance: the event on stdin is over %d bytes", MaxEnvelope)
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return env, fmt.Errorf("a2aconformance: the event on stdin is not an envelope: %w", err)
	}
	return env, nil
}
