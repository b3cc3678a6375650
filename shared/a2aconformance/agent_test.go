package a2aconformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// fakeOps records every call as one line, and fails the call whose line
// starts with failOn.
type fakeOps struct {
	calls  []string
	ids    []string
	failOn string
	err    error
}

func partsString(parts []mesh.Part) string {
	var s []string
	for _, p := range parts {
		switch p.Kind {
		case "text":
			s = append(s, fmt.Sprintf("text:%q", p.Text))
		case "data":
			s = append(s, "data:"+string(p.Data))
		case "file":
			s = append(s, fmt.Sprintf("file:%s:%s:%s", p.Name, p.MediaType, p.Bytes))
		case "url":
			s = append(s, fmt.Sprintf("url:%s:%s:%s", p.URL, p.Name, p.MediaType))
		}
	}
	return "[" + strings.Join(s, " ") + "]"
}

func (f *fakeOps) record(id, line string) error {
	f.calls = append(f.calls, line)
	f.ids = append(f.ids, id)
	if f.failOn != "" && strings.HasPrefix(line, f.failOn) {
		return f.err
	}
	return nil
}

func (f *fakeOps) Reply(_ context.Context, taskID string, req meshclient.ReplyRequest) (meshclient.SendResult, error) {
	return meshclient.SendResult{}, f.record(req.MessageID, "reply "+taskID+" "+partsString(req.Parts))
}

func (f *fakeOps) UpdateStatus(_ context.Context, taskID string, req meshclient.StatusRequest) (meshclient.StatusResult, error) {
	line := "status " + taskID + " " + req.Status
	if req.Message != nil {
		line += " " + partsString(req.Message.Parts)
	}
	return meshclient.StatusResult{}, f.record(req.MessageID, line)
}

func (f *fakeOps) AddArtifact(_ context.Context, taskID, name string, parts []mesh.Part, messageID string) (meshclient.ArtifactResult, error) {
	return meshclient.ArtifactResult{}, f.record(messageID, "artifact "+taskID+" "+name+" "+partsString(parts))
}

// event is a message event from alice to bob on task t1, built from the
// mesh's own body type so the agent reads what the mesh writes.
func event(messageID, taskStatus string, parts ...mesh.Part) mesh.Envelope {
	if len(parts) == 0 {
		parts = []mesh.Part{{Kind: "text", Text: "hi"}}
	}
	raw, _ := json.Marshal(parts)
	body, _ := json.Marshal(tasks.MessageBody{
		Message: tasks.EventMessage{MessageID: messageID, From: "alice", Parts: raw},
		Task:    tasks.TaskRef{TaskID: "t1", ContextID: "c1", Initiator: "alice", Recipient: "bob", Status: taskStatus},
	})
	return mesh.Envelope{V: 2, EventID: "ev-" + messageID, Seq: 7, Type: mesh.EventMessage, From: "alice", To: "bob",
		TaskID: "t1", ContextID: "c1", MessageID: messageID, Body: body}
}

// newAgent is the agent over ops whose waits are recorded, not slept.
func newAgent(ops Ops) (*Agent, *[]time.Duration) {
	var waits []time.Duration
	a := &Agent{Ops: ops}
	a.sleep = func(_ context.Context, d time.Duration) error {
		waits = append(waits, d)
		if f, ok := ops.(*fakeOps); ok {
			return f.record("", "wait "+d.String())
		}
		return nil
	}
	return a, &waits
}

func TestEachTCKPrefixMakesItsSequenceOfMeshOperations(t *testing.T) {
	const tck = "-0a1b2c3d"
	cases := []struct {
		name, messageID, status string
		parts                   []mesh.Part
		want                    []string
	}{
		{"tck-complete-task completes with the message Hello from TCK", "tck-complete-task" + tck, "submitted", nil,
			[]string{`status t1 completed [text:"Hello from TCK"]`}},
		{"tck-artifact-text adds the text artifact, then completes", "tck-artifact-text" + tck, "submitted", nil,
			[]string{`artifact t1 result [text:"Generated text content"]`, "status t1 completed"}},
		{"tck-artifact-file adds output.txt holding tck, then completes", "tck-artifact-file" + tck, "submitted", nil,
			[]string{"artifact t1 output.txt [file:output.txt:text/plain:dGNr]", "status t1 completed"}},
		{"tck-artifact-file-url adds the url artifact, not the file one", "tck-artifact-file-url" + tck, "submitted", nil,
			[]string{"artifact t1 output.txt [url:https://example.com/output.txt:output.txt:text/plain]", "status t1 completed"}},
		{"tck-artifact-data adds the data artifact, then completes", "tck-artifact-data" + tck, "submitted", nil,
			[]string{`artifact t1 result [data:{"key":"value","count":42}]`, "status t1 completed"}},
		{"tck-message-response replies with the message, then completes", "tck-message-response" + tck, "submitted", nil,
			[]string{`reply t1 [text:"Direct message response"]`, "status t1 completed"}},
		{"tck-input-required asks for input", "tck-input-required" + tck, "submitted", nil,
			[]string{`status t1 input-required [text:"Input required: send a follow-up message on this task"]`}},
		{"tck-input-required on a task already waiting for input asks again as a reply", "tck-input-required" + tck, "input-required", nil,
			[]string{`reply t1 [text:"Input required: send a follow-up message on this task"]`}},
		{"tck-input-required on a task resumed by the follow-up asks again", "tck-input-required" + tck, "working", nil,
			[]string{`status t1 input-required [text:"Input required: send a follow-up message on this task"]`}},
		{"a tck-complete-task follow-up completes a task waiting for input", "tck-complete-task" + tck, "input-required", nil,
			[]string{`status t1 completed [text:"Hello from TCK"]`}},
		{"tck-reject-task rejects", "tck-reject-task" + tck, "submitted", nil,
			[]string{`status t1 rejected [text:"rejected"]`}},
		{"tck-reject-task on an answered task fails it, since rejected is only a first answer", "tck-reject-task" + tck, "input-required", nil,
			[]string{`status t1 failed [text:"rejected"]`}},
		{"tck-stream-001 works, streams its artifact and completes", "tck-stream-001" + tck, "submitted", nil,
			[]string{"status t1 working", `artifact t1 result [text:"Stream hello from TCK"]`, "status t1 completed"}},
		{"tck-stream-002 only completes", "tck-stream-002" + tck, "submitted", nil,
			[]string{"status t1 completed"}},
		{"tck-stream-003 works, streams its artifact and completes", "tck-stream-003" + tck, "submitted", nil,
			[]string{"status t1 working", `artifact t1 result [text:"Stream task lifecycle"]`, "status t1 completed"}},
		{"tck-stream-ordering-001 works, streams its artifact and completes", "tck-stream-ordering-001" + tck, "submitted", nil,
			[]string{"status t1 working", `artifact t1 result [text:"Ordered output"]`, "status t1 completed"}},
		{"tck-stream-artifact-text streams its text artifact", "tck-stream-artifact-text" + tck, "submitted", nil,
			[]string{"status t1 working", `artifact t1 result [text:"Streamed text content"]`, "status t1 completed"}},
		{"tck-stream-artifact-file streams output.txt", "tck-stream-artifact-file" + tck, "submitted", nil,
			[]string{"status t1 working", "artifact t1 output.txt [file:output.txt:text/plain:dGNr]", "status t1 completed"}},
		{"tck-stream-artifact-chunked streams two chunks as two artifacts in order", "tck-stream-artifact-chunked" + tck, "submitted", nil,
			[]string{"status t1 working", `artifact t1 chunked [text:"chunk-1 "]`, `artifact t1 chunked [text:"chunk-2"]`, "status t1 completed"}},
		{"test-resubscribe-message-id works for twice the streaming timeout, then completes", "test-resubscribe-message-id-1", "submitted", nil,
			[]string{"status t1 working", "wait 4s", "status t1 completed"}},
		{"tck-delayed-complete works for one streaming timeout, then completes", "tck-delayed-complete" + tck, "submitted", nil,
			[]string{"status t1 working", "wait 2s", "status t1 completed"}},
		{"a working task skips the move to working", "tck-stream-001" + tck, "working", nil,
			[]string{`artifact t1 result [text:"Stream hello from TCK"]`, "status t1 completed"}},
		{"any other message id completes with the message's parts echoed", "tck-dm-test-001" + tck, "submitted",
			[]mesh.Part{{Kind: "text", Text: "ping"}, {Kind: "data", Data: json.RawMessage(`{"a":1}`)}},
			[]string{`status t1 completed [text:"ping" data:{"a":1}]`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops := &fakeOps{}
			a, _ := newAgent(ops)
			if err := a.Handle(context.Background(), event(c.messageID, c.status, c.parts...)); err != nil {
				t.Fatal(err)
			}
			if got, want := strings.Join(ops.calls, "\n"), strings.Join(c.want, "\n"); got != want {
				t.Errorf("calls:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestEveryWriteCarriesAMessageIDOfItsEventAndStep(t *testing.T) {
	run := func(env mesh.Envelope) []string {
		ops := &fakeOps{}
		a, _ := newAgent(ops)
		if err := a.Handle(context.Background(), env); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, id := range ops.ids {
			if id != "" { // waits
				ids = append(ids, id)
			}
		}
		return ids
	}
	first := run(event("tck-stream-artifact-chunked-1", "submitted"))
	t.Run("each step has its own id, valid for the mesh", func(t *testing.T) {
		seen := map[string]bool{}
		for _, id := range first {
			if seen[id] || len(id) > 64 || !strings.HasPrefix(id, "a2ac-") {
				t.Errorf("id %q (repeated or invalid) in %v", id, first)
			}
			seen[id] = true
		}
		if len(first) != 4 {
			t.Errorf("ids %v, want 4", first)
		}
	})
	t.Run("a redelivery of the event uses the same ids, so the mesh replays instead of writing twice", func(t *testing.T) {
		if again := run(event("tck-stream-artifact-chunked-1", "submitted")); strings.Join(again, ",") != strings.Join(first, ",") {
			t.Errorf("ids %v then %v", first, again)
		}
	})
	t.Run("another event gets other ids", func(t *testing.T) {
		other := run(event("tck-stream-artifact-chunked-2", "submitted"))
		if other[0] == first[0] {
			t.Errorf("ids %v and %v", first, other)
		}
	})
}

// statusEvent is a move of t1 to state by mover, with an optional note.
func statusEvent(state, mover string, note *tasks.EventMessage) mesh.Envelope {
	body, _ := json.Marshal(tasks.StatusBody{
		Status: tasks.StatusChange{State: state, Previous: "input-required", By: mover, Message: note},
		Task:   tasks.TaskRef{TaskID: "t1", ContextID: "c1", Initiator: "alice", Recipient: "bob", Status: state},
	})
	id := "status-move-1"
	if note != nil {
		id = note.MessageID
	}
	return mesh.Envelope{V: 2, EventID: "ev-status", Seq: 8, Type: mesh.EventStatus, From: mover, To: "bob",
		TaskID: "t1", ContextID: "c1", MessageID: id, Body: body}
}

func note(messageID, text string) *tasks.EventMessage {
	return &tasks.EventMessage{MessageID: messageID, From: "alice", Parts: json.RawMessage(`[{"kind":"text","text":"` + text + `"}]`)}
}

func TestAnAnswerMadeAsAMoveBackToWorkingIsAFollowUp(t *testing.T) {
	cases := []struct {
		name string
		env  mesh.Envelope
		want string
	}{
		{"the initiator's move to working with a tck-complete-task note completes the task",
			statusEvent("working", "alice", note("tck-complete-task-9", "done?")), `status t1 completed [text:"Hello from TCK"]`},
		{"the initiator's move to working with a tck-input-required note asks again",
			statusEvent("working", "alice", note("tck-input-required-9", "more")), `status t1 input-required [text:"Input required: send a follow-up message on this task"]`},
		{"the initiator's move to working with another note completes with it echoed",
			statusEvent("working", "alice", note("free-9", "here you go")), `status t1 completed [text:"here you go"]`},
		{"a move without a note is ignored", statusEvent("working", "alice", nil), ""},
		{"a cancel by the initiator is ignored", statusEvent("canceled", "alice", note("tck-complete-task-9", "stop")), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops := &fakeOps{}
			a, _ := newAgent(ops)
			if err := a.Handle(context.Background(), c.env); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(ops.calls, "\n"); got != c.want {
				t.Errorf("calls %q, want %q", got, c.want)
			}
		})
	}
}

func TestOnlyAMessageFromTheOtherPartyOfATaskTheAgentReceivedStartsWork(t *testing.T) {
	artifact := event("tck-complete-task-1", "working")
	artifact.Type = mesh.EventArtifact
	own := event("tck-complete-task-1", "working")
	own.Body = []byte(strings.Replace(string(own.Body), `"from":"alice"`, `"from":"bob"`, 1))
	started := event("tck-complete-task-1", "working")
	started.Body = []byte(strings.Replace(string(started.Body), `"recipient":"bob"`, `"recipient":"carol"`, 1))
	terminal := event("tck-complete-task-1", "canceled")
	cases := []struct {
		name string
		env  mesh.Envelope
	}{
		{"a status move of the agent's own is ignored", statusEvent("working", "bob", note("tck-complete-task-1", "x"))},
		{"an artifact event is ignored", artifact},
		{"the agent's own message is ignored", own},
		{"a reply on a task the agent started is ignored", started},
		{"a message on a task that has ended is ignored", terminal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops := &fakeOps{}
			a, _ := newAgent(ops)
			if err := a.Handle(context.Background(), c.env); err != nil {
				t.Fatal(err)
			}
			if len(ops.calls) != 0 {
				t.Errorf("calls %v", ops.calls)
			}
		})
	}
	t.Run("a message event whose body cannot be read is parked at once", func(t *testing.T) {
		bad := event("tck-complete-task-1", "working")
		bad.Body = []byte(`{"message":`)
		a, _ := newAgent(&fakeOps{})
		if err := a.Handle(context.Background(), bad); !meshd.IsPermanent(err) {
			t.Errorf("err %v, want permanent", err)
		}
	})
}

func TestAFailedStepStopsThePlan(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		wantErr   bool
		permanent bool
	}{
		{"a task that ended meanwhile (canceled by the client) ends the plan quietly",
			&meshclient.APIError{Status: 409, Code: "task_terminal"}, false, false},
		{"an illegal move is the mesh's refusal for good, and the event is parked",
			&meshclient.APIError{Status: 409, Code: "illegal_transition"}, true, true},
		{"meshd unreachable is transient, and the event is retried",
			errors.New("meshd control socket: connection refused"), true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops := &fakeOps{failOn: "artifact", err: c.err}
			a, _ := newAgent(ops)
			err := a.Handle(context.Background(), event("tck-stream-001-x", "submitted"))
			if (err != nil) != c.wantErr || meshd.IsPermanent(err) != c.permanent {
				t.Errorf("err %v (permanent %v)", err, meshd.IsPermanent(err))
			}
			if len(ops.calls) != 2 {
				t.Errorf("calls after the failed one: %v", ops.calls)
			}
		})
	}
}

func TestTheWaitsFollowTheStreamingTimeoutWithinItsBound(t *testing.T) {
	cases := []struct {
		name    string
		timeout time.Duration
		want    []time.Duration
		bad     bool
	}{
		{"the default streaming timeout is the TCK's 2 s", 0, []time.Duration{4 * time.Second}, false},
		{"a set streaming timeout doubles for the resubscribe task", 5 * time.Second, []time.Duration{10 * time.Second}, false},
		{"a streaming timeout over the bound is refused for good", MaxStreamingTimeout + time.Second, nil, true},
		{"a negative streaming timeout is refused for good", -time.Second, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops := &fakeOps{}
			a, waits := newAgent(ops)
			a.StreamingTimeout = c.timeout
			err := a.Handle(context.Background(), event("test-resubscribe-message-id", "submitted"))
			if c.bad != meshd.IsPermanent(err) || (!c.bad && err != nil) {
				t.Fatalf("err %v", err)
			}
			if fmt.Sprint(*waits) != fmt.Sprint(c.want) || (c.bad && len(ops.calls) != 0) {
				t.Errorf("waits %v calls %v", *waits, ops.calls)
			}
		})
	}
	t.Run("the wait ends with its context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		if err := wait(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Minute {
			t.Errorf("err %v after %v", err, time.Since(start))
		}
	})
}

func TestReadEnvelope(t *testing.T) {
	env := event("tck-complete-task-1", "submitted")
	b, _ := json.Marshal(env)
	cases := []struct {
		name  string
		input string
		ok    bool
	}{
		{"the envelope meshd writes is read back", string(b) + "\n", true},
		{"a line that is not JSON is refused", "not json", false},
		{"an input over the bound is refused, however valid", string(b) + strings.Repeat(" ", MaxEnvelope), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadEnvelope(strings.NewReader(c.input))
			if (err == nil) != c.ok {
				t.Fatalf("err %v", err)
			}
			if c.ok && (got.MessageID != env.MessageID || got.TaskID != "t1" || string(got.Body) != string(env.Body)) {
				t.Errorf("got %+v", got)
			}
		})
	}
}
