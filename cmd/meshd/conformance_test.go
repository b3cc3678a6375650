package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// describeTask is a task's state, the agent's messages (status notes
// included) and its artifacts, one line.
func describeTask(task meshclient.TaskDetail, agent string) string {
	parts := func(ps []mesh.Part) string {
		var s []string
		for _, p := range ps {
			switch p.Kind {
			case "text":
				s = append(s, fmt.Sprintf("%q", p.Text))
			case "data":
				s = append(s, string(p.Data))
			case "file":
				s = append(s, "file "+p.Name+" "+p.MediaType+" "+p.Bytes)
			case "url":
				s = append(s, "url "+p.URL+" "+p.Name+" "+p.MediaType)
			}
		}
		return strings.Join(s, " ")
	}
	out := []string{task.Status}
	for _, m := range task.Messages {
		if m.From == agent {
			out = append(out, "message "+parts(m.Parts))
		}
	}
	for _, a := range task.Artifacts {
		out = append(out, "artifact "+a.Name+": "+parts(a.Parts))
	}
	return strings.Join(out, " | ")
}

func randomSuffix(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "-" + hex.EncodeToString(b)
}

// TestTheConformanceAgentUnderMeshdRunActsThroughTheControlSocket runs
// `meshd run -- meshd a2a-conformance-agent` (the built binary, without the
// key in the handler's environment) against the real mesh, and sends each
// TCK message id prefix from alice as an ordinary mesh message: what the
// A2A gateway makes of an A2A SendMessage.
func TestTheConformanceAgentUnderMeshdRunActsThroughTheControlSocket(t *testing.T) {
	st, keys := kafkaMesh(t)
	bin := meshdBinary(t)
	p := startMeshd(t, map[string]string{"MESH_API_KEY": keys["bob"], "MESH_API_URL": st.URL, "MESH_STATE_DIR": t.TempDir(),
		"HOME": t.TempDir(), "MESH_MODE": "kafka", "TCK_STREAMING_TIMEOUT": "1"}, "run", "--", bin, "a2a-conformance-agent")
	alice := meshclient.New(st.URL, keys["alice"])
	ctx := context.Background()
	send := func(t *testing.T, messageID string) string {
		t.Helper()
		res, err := alice.Send(ctx, meshclient.SendRequest{To: "bob", MessageID: messageID, Parts: textPart("TCK says hi")})
		if err != nil {
			t.Fatal(err)
		}
		return res.TaskID
	}
	// settled waits until the task is in state and returns it described.
	settled := func(t *testing.T, taskID, state string) string {
		t.Helper()
		var task meshclient.TaskDetail
		var err error
		eventually(t, 30*time.Second, "task "+taskID+" is "+state, func() bool {
			task, err = alice.GetTask(ctx, taskID)
			return err == nil && task.Status == state
		})
		return describeTask(task, "bob")
	}
	cases := []struct{ prefix, state, want string }{
		{"tck-complete-task", "completed", `completed | message "Hello from TCK"`},
		{"tck-artifact-text", "completed", `completed | artifact result: "Generated text content"`},
		{"tck-artifact-file", "completed", `completed | artifact output.txt: file output.txt text/plain dGNr`},
		{"tck-artifact-file-url", "completed", `completed | artifact output.txt: url https://example.com/output.txt output.txt text/plain`},
		{"tck-artifact-data", "completed", `completed | artifact result: {"key":"value","count":42}`},
		{"tck-message-response", "completed", `completed | message "Direct message response"`},
		{"tck-input-required", "input-required", `input-required | message "Input required: send a follow-up message on this task"`},
		{"tck-reject-task", "rejected", `rejected | message "rejected"`},
		{"tck-stream-001", "completed", `completed | artifact result: "Stream hello from TCK"`},
		{"tck-stream-002", "completed", `completed`},
		{"tck-stream-artifact-chunked", "completed", `completed | artifact chunked: "chunk-1 " | artifact chunked: "chunk-2"`},
		{"tck-unknown-prefix", "completed", `completed | message "TCK says hi"`},
	}
	for _, c := range cases {
		t.Run(c.prefix+" leaves the task "+c.state+" with its messages and artifacts", func(t *testing.T) {
			got := settled(t, send(t, c.prefix+randomSuffix(t)), c.state)
			if got != c.want {
				t.Errorf("task: %s\nwant:  %s\nmeshd stderr:\n%s", got, c.want, p.stderr.String())
			}
		})
	}
	t.Run("a reply to a task waiting for input completes it", func(t *testing.T) {
		id := send(t, "tck-input-required"+randomSuffix(t))
		settled(t, id, "input-required")
		if _, err := alice.Reply(ctx, id, meshclient.ReplyRequest{Parts: textPart("here"), MessageID: "tck-complete-task" + randomSuffix(t)}); err != nil {
			t.Fatal(err)
		}
		if got := settled(t, id, "completed"); !strings.HasSuffix(got, `message "Hello from TCK"`) {
			t.Errorf("task: %s", got)
		}
	})
	t.Run("an answer made as the move back to working completes it", func(t *testing.T) {
		id := send(t, "tck-input-required"+randomSuffix(t))
		settled(t, id, "input-required")
		if _, err := alice.UpdateStatus(ctx, id, meshclient.StatusRequest{Status: "working", MessageID: "tck-complete-task" + randomSuffix(t),
			Message: &meshclient.StatusMessage{Parts: textPart("here")}}); err != nil {
			t.Fatal(err)
		}
		if got := settled(t, id, "completed"); !strings.HasSuffix(got, `message "Hello from TCK"`) {
			t.Errorf("task: %s", got)
		}
	})
	t.Run("test-resubscribe-message-id stays working for twice the streaming timeout, then completes", func(t *testing.T) {
		start := time.Now()
		id := send(t, "test-resubscribe-message-id"+randomSuffix(t))
		settled(t, id, "working")
		settled(t, id, "completed")
		if took := time.Since(start); took < 2*time.Second {
			t.Errorf("completed after %v, before 2 x 1 s", took)
		}
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Errorf("meshd exited %d after SIGTERM", code)
	}
}

func TestTheConformanceAgentRefusesBadInputWithoutActing(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		env   map[string]string
		stdin string
		code  int
	}{
		{"an argument is a usage mistake", []string{"a2a-conformance-agent", "extra"}, nil, "", 2},
		{"a TCK_STREAMING_TIMEOUT that is no number is a usage mistake", []string{"a2a-conformance-agent"}, map[string]string{"TCK_STREAMING_TIMEOUT": "soon"}, "", 2},
		{"a streaming timeout over the bound is a usage mistake", []string{"a2a-conformance-agent", "--streaming-timeout", "2m"}, nil, "", 2},
		{"an event that is not an envelope is parked at once (65)", []string{"a2a-conformance-agent"},
			map[string]string{meshd.EnvHandlerSocket: "/nonexistent.sock", meshd.EnvHandlerToken: "t"}, "not json", meshd.ExitPermanent},
		{"an artifact event is handled by doing nothing", []string{"a2a-conformance-agent"},
			map[string]string{meshd.EnvHandlerSocket: "/nonexistent.sock", meshd.EnvHandlerToken: "t"},
			`{"v":2,"type":"artifact","task_id":"t1","to":"bob","body":{"artifact":{},"task":{"task_id":"t1","recipient":"bob","status":"working"}}}`, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			if code := cli(context.Background(), c.args, env(c.env), strings.NewReader(c.stdin), &stdout, &stderr); code != c.code {
				t.Errorf("exit %d, want %d; stderr: %s", code, c.code, stderr.String())
			}
		})
	}
}
