package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

const secretKey = "amk_secretid_supersecretvalue"

// fakeMesh serves the few routes the CLI calls, for agent "bob".
func fakeMesh(t *testing.T) (*httptest.Server, *[]string) {
	var mu sync.Mutex
	var bodies []string
	events := []mesh.Envelope{
		{V: 1, EventID: "e1", Seq: 1, Type: "message", To: "bob", From: "alice", TaskID: "t1", Body: json.RawMessage(`{"parts":[{"kind":"text","text":"hi bob"}]}`)},
		{V: 1, EventID: "e2", Seq: 2, Type: "status", To: "bob", From: "alice", TaskID: "t1", Body: json.RawMessage(`{"status":"working"}`)},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		_, _ = body.ReadFrom(r.Body)
		mu.Lock()
		bodies = append(bodies, r.Method+" "+r.URL.Path+" "+body.String())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /v1/auth/token":
			if strings.Contains(body.String(), "amk_wrong") {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(401)
				_, _ = w.Write([]byte(`{"code":"invalid_api_key","status":401,"detail":"the API key is not valid"}`))
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"token": "jwt-abc", "expires_in": 3600, "agent_id": "bob", "routing_id": "rt-bob",
				"inbox_keys": []map[string]any{{"key_epoch": 1, "key": base64.StdEncoding.EncodeToString(make([]byte, 32))}}, "kafka": map[string]any{}})
		case "POST /v1/messages":
			var req map[string]any
			_ = json.Unmarshal(body.Bytes(), &req)
			if req["to"] == "eve" {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(403)
				_, _ = w.Write([]byte(`{"code":"not_reachable","status":403,"detail":"you may only talk to friends and group mates"}`))
				return
			}
			w.WriteHeader(202)
			_ = json.NewEncoder(w).Encode(map[string]any{"task_id": "t9", "message_id": req["message_id"], "context_id": "c9", "status": "submitted"})
		case "POST /v1/tasks/t1/messages":
			var req map[string]any
			_ = json.Unmarshal(body.Bytes(), &req)
			w.WriteHeader(201)
			_ = json.NewEncoder(w).Encode(map[string]any{"task_id": "t1", "message_id": req["message_id"], "status": "working"})
		case "GET /v1/inbox":
			after := r.URL.Query().Get("after")
			var out []mesh.Envelope
			for _, e := range events {
				if after == "0" || (after == "1" && e.Seq > 1) {
					out = append(out, e)
				}
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"events": out, "next_after": 2, "oldest_seq": 1})
		case "POST /v1/agents/me/heartbeat":
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "active", "last_seq": 2})
		case "DELETE /v1/agents/me/online":
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "draining"})
		default:
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &bodies
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestCLI(t *testing.T) {
	srv, _ := fakeMesh(t)
	base := map[string]string{"MESH_API_URL": srv.URL, "MESH_API_KEY": secretKey, "HOME": t.TempDir()}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name       string
		args       []string
		env        map[string]string
		stdin      string
		wantCode   int
		wantStdout []string
		wantStderr []string
	}{
		{name: "version prints the version", args: []string{"version"}, env: base, wantStdout: []string{"meshd dev"}},
		{name: "no command prints the usage", args: nil, env: base, wantCode: 2, wantStderr: []string{"usage: meshd"}},
		{name: "an unknown command is a usage error", args: []string{"frobnicate"}, env: base, wantCode: 2, wantStderr: []string{`unknown command "frobnicate"`}},
		{name: "a missing API key is one clear line", args: []string{"send", "--to", "alice", "hi"}, env: map[string]string{"MESH_API_URL": srv.URL},
			wantCode: 1, wantStderr: []string{"meshd: MESH_API_KEY is not set"}},
		{name: "a bad API URL is one clear line", args: []string{"inbox"}, env: with(map[string]string{"MESH_API_URL": "localhost:8080"}),
			wantCode: 1, wantStderr: []string{"MESH_API_URL must start with http"}},
		{name: "run without a handler is one clear line", args: []string{"run"}, env: base,
			wantCode: 1, wantStderr: []string{"MESH_HANDLER is not set"}},
		{name: "run with a bad mode is one clear line", args: []string{"run"}, env: with(map[string]string{"MESH_HANDLER": "cat", "MESH_MODE": "carrier-pigeon"}),
			wantCode: 1, wantStderr: []string{"MESH_MODE must be auto, kafka or poll"}},
		{name: "send prints the task and message ids", args: []string{"send", "--to", "alice", "hello", "alice"}, env: base,
			wantStdout: []string{`"task_id":"t9"`, `"message_id":"`, `"context_id":"c9"`}},
		{name: "send reads the text from stdin when none is given", args: []string{"send", "--to", "alice"}, env: base, stdin: "from stdin\n",
			wantStdout: []string{`"task_id":"t9"`}},
		{name: "send without --to is one clear line", args: []string{"send", "hi"}, env: base, wantCode: 1, wantStderr: []string{"send needs --to AGENT"}},
		{name: "an API refusal is printed with its code and exits 65, the handler contract's permanent failure", args: []string{"send", "--to", "eve", "hi"}, env: base,
			wantCode: 65, wantStderr: []string{"403 not_reachable: you may only talk to friends and group mates"}},
		{name: "run with a handler that does not exist fails at once naming it", args: []string{"run", "--", "/no/such/handler"}, env: base,
			wantCode: 1, wantStderr: []string{`handler command "/no/such/handler" cannot be run`}},
		{name: "run with a MESH_HANDLER line whose program does not exist fails at once naming it", args: []string{"run"}, env: with(map[string]string{"MESH_HANDLER": "no-such-agent-xyz --flag | tee out"}),
			wantCode: 1, wantStderr: []string{`MESH_HANDLER: handler command "no-such-agent-xyz" cannot be run`}},
		{name: "run with bad attempts is one clear line", args: []string{"run", "--", "cat"}, env: with(map[string]string{"MESH_HANDLER_ATTEMPTS": "0"}),
			wantCode: 1, wantStderr: []string{"MESH_HANDLER_ATTEMPTS must be a whole number"}},
		{name: "deadletters with no state lists nothing", args: []string{"deadletters"}, env: with(map[string]string{"MESH_STATE_DIR": "/nonexistent-meshd-state"})},
		{name: "retry without a seq is one clear line", args: []string{"retry"}, env: base, wantCode: 1, wantStderr: []string{"retry needs the SEQ"}},
		{name: "inbox --json prints one event per line and the cursor on stderr", args: []string{"inbox", "--after", "1", "--json"}, env: base,
			wantStdout: []string{`"seq":2`, `"body":{"status":"working"}`}, wantStderr: []string{"next_after=2 oldest_seq=1"}},
		{name: "inbox is a readable table by default", args: []string{"inbox"}, env: base,
			wantStdout: []string{"SEQ  WHEN", "1    -     message  alice  t1"}, wantStderr: []string{"next_after=2"}},
		{name: "flags may follow the text", args: []string{"send", "hello", "alice", "--to", "alice"}, env: base,
			wantStdout: []string{`"task_id":"t9"`}},
		{name: "reply takes the task from MESH_TASK_ID, as inside a handler", args: []string{"reply", "done"}, env: with(map[string]string{"MESH_TASK_ID": "t1"}),
			wantStdout: []string{`"task_id":"t1"`}},
		{name: "reply without a task names MESH_TASK_ID", args: []string{"reply", "done"}, env: base,
			wantCode: 1, wantStderr: []string{"reply needs --task ID (or MESH_TASK_ID"}},
		{name: "a wrong key exits 65 with a hint naming MESH_API_KEY", args: []string{"whoami"}, env: with(map[string]string{"MESH_API_KEY": "amk_wrong"}),
			wantCode: 65, wantStderr: []string{"invalid_api_key", "check MESH_API_KEY"}},
		{name: "run with a wrong key exits 65 with a hint naming MESH_API_KEY", args: []string{"run", "--", "cat"}, env: with(map[string]string{"MESH_API_KEY": "amk_wrong", "MESH_STATE_DIR": t.TempDir()}),
			wantCode: 65, wantStderr: []string{"check MESH_API_KEY"}},
		{name: "an unknown flag is a usage error pointing at --help", args: []string{"send", "--frobnicate"}, env: base,
			wantCode: 2, wantStderr: []string{"unknown flag: --frobnicate", "see meshd send --help"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli(context.Background(), tc.args, env(tc.env), strings.NewReader(tc.stdin), &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d; stderr %s", code, tc.wantCode, stderr.String())
			}
			for _, w := range tc.wantStdout {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout %q lacks %q", stdout.String(), w)
				}
			}
			for _, w := range tc.wantStderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q lacks %q", stderr.String(), w)
				}
			}
			if tc.wantCode != 0 && tc.wantCode != 2 && strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
				t.Errorf("error is not one line: %q", stderr.String())
			}
			if strings.Contains(stdout.String()+stderr.String(), secretKey) || strings.Contains(stdout.String()+stderr.String(), "jwt-abc") {
				t.Error("a credential was printed")
			}
		})
	}
}

func TestRunDeliversToTheHandlerAndStopsOnCancel(t *testing.T) {
	srv, bodies := fakeMesh(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "got.jsonl")
	getenv := env(map[string]string{
		"MESH_API_URL": srv.URL, "MESH_API_KEY": secretKey, "MESH_STATE_DIR": filepath.Join(dir, "state"),
		"MESH_HANDLER": `cat >> "` + out + `"`, "MESH_MODE": "poll", "MESH_LOG_FORMAT": "json", "MESH_LOG_LEVEL": "debug",
	})
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- cli(ctx, []string{"run"}, getenv, strings.NewReader(""), &stdout, &stderr) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(out)
		if strings.Count(string(data), "\n") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handler output %q", data)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after a graceful stop; stderr %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
	data, _ := os.ReadFile(filepath.Join(dir, "state", "bob.state.json"))
	if !strings.Contains(string(data), `"last_seq":2`) {
		t.Errorf("state %s", data)
	}
	if !strings.Contains(strings.Join(*bodies, "\n"), "DELETE /v1/agents/me/online") {
		t.Error("run did not go offline on stop")
	}
	if strings.Contains(stderr.String(), secretKey) || strings.Contains(stderr.String(), "jwt-abc") ||
		strings.Contains(stderr.String(), base64.StdEncoding.EncodeToString(make([]byte, 32))) {
		t.Errorf("logs contain a credential: %s", stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("log line is not JSON: %q", line)
		}
	}
}
