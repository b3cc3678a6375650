package meshd_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

func sampleEnvelope(seq int64, text string) mesh.Envelope {
	body, _ := json.Marshal(map[string]any{"parts": []mesh.Part{{Kind: "text", Text: text}}})
	return mesh.Envelope{V: 1, EventID: "ev-1", Seq: seq, Type: mesh.EventMessage, To: "bob", From: "alice",
		TaskID: "task-9", ContextID: "ctx-9", MessageID: "msg-1", OccurredAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Body: body}
}

func TestCommandHandlerRunsARealShellCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "events.jsonl")
	h := meshd.CommandHandler{
		Command: []string{"sh", "-c", `cat >> "$OUT"; echo "$MESH_SEQ $MESH_EVENT_TYPE $MESH_FROM $MESH_TO $MESH_TASK_ID $MESH_CONTEXT_ID $MESH_MESSAGE_ID $MESH_EVENT_ID" >> "$OUT.env"`},
		Env:     []string{"OUT=" + out},
		Timeout: 10 * time.Second,
	}
	for i, text := range []string{"hello", "it's \"quoted\"\nand multi-line"} {
		if err := h.Handle(context.Background(), sampleEnvelope(int64(i+1), text)); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("stdin carries the envelope as one JSON line per event, body opened", func(t *testing.T) {
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) != 2 {
			t.Fatalf("got %d lines: %q", len(lines), data)
		}
		var env mesh.Envelope
		if err := json.Unmarshal([]byte(lines[1]), &env); err != nil {
			t.Fatal(err)
		}
		var body struct{ Parts []mesh.Part }
		_ = json.Unmarshal(env.Body, &body)
		if env.Seq != 2 || env.From != "alice" || len(body.Parts) != 1 || body.Parts[0].Text != "it's \"quoted\"\nand multi-line" {
			t.Errorf("second event on stdin = %+v body %s", env, env.Body)
		}
	})
	t.Run("the MESH_* variables describe the event", func(t *testing.T) {
		data, _ := os.ReadFile(out + ".env")
		want := "1 message alice bob task-9 ctx-9 msg-1 ev-1\n2 message alice bob task-9 ctx-9 msg-1 ev-1\n"
		if string(data) != want {
			t.Errorf("env lines %q, want %q", data, want)
		}
	})
}

func TestCommandHandlerFailures(t *testing.T) {
	cases := []struct {
		name          string
		command       []string
		timeout       time.Duration
		wantErr       string
		wantPermanent bool
	}{
		{"a non-zero exit is a transient failure with its status and last stderr line", []string{"sh", "-c", "cat >/dev/null; echo noise >&2; echo 'model overloaded' >&2; exit 3"}, 0, "exited with status 3: model overloaded", false},
		{"a command past its timeout is killed with its children, transient", []string{"sh", "-c", "sleep 30 & sleep 30; wait"}, 300 * time.Millisecond, "timed out", false},
		{"exit 65 (what meshd reply exits with on a refused call) is permanent", []string{"sh", "-c", "cat >/dev/null; echo 'mesh API 409 task_terminal' >&2; exit 65"}, 0, "status 65: mesh API 409 task_terminal", true},
		{"exit 127 (the shell found no such command) is permanent", []string{"sh", "-c", "no-such-agent-program-xyz"}, 0, "status 127", true},
		{"a missing program is permanent", []string{"/nonexistent/agent"}, 0, "cannot be started", true},
		{"an empty command is permanent", nil, 0, "no command", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := meshd.CommandHandler{Command: tc.command, Timeout: tc.timeout}.Handle(context.Background(), sampleEnvelope(1, "x"))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if got := meshd.IsPermanent(err); got != tc.wantPermanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, got, tc.wantPermanent)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("took %v: children kept the handler alive", time.Since(start))
			}
		})
	}
}

func TestCommandHandlerCheck(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(plain, []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		command []string
		wantErr string
	}{
		{"a program on PATH passes", []string{"sh", "-c", "true"}, ""},
		{"a missing absolute path is named", []string{"/no/such/handler"}, `"/no/such/handler" cannot be run`},
		{"a missing name is named", []string{"no-such-agent-program-xyz"}, `"no-such-agent-program-xyz" cannot be run`},
		{"a file that is not executable is refused", []string{plain}, "cannot be run"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := meshd.CommandHandler{Command: tc.command}.Check()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Check() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestCheckShellLine(t *testing.T) {
	cases := []struct {
		name, line, wantErr string
	}{
		{"a program on PATH passes", "cat >> inbox.jsonl", ""},
		{"a missing program is named", "no-such-agent-xyz --model big", `"no-such-agent-xyz" cannot be run`},
		{"a builtin is not looked up", "exec cat", ""},
		{"an assignment is not looked up", "FOO=1 cat", ""},
		{"a quoted or expanded word is not looked up", `"$AGENT" run`, ""},
		{"an empty line is refused", "  ", "empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := meshd.CheckShellLine(tc.line)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("CheckShellLine(%q) = %v, want %q", tc.line, err, tc.wantErr)
			}
		})
	}
}

// A handler (an LLM above all) can be talked into printing its
// environment: it must hold no credential of the agent's.
func TestTheHandlersEnvironmentHoldsNoCredential(t *testing.T) {
	const key = "amk_the_agents_key"
	t.Setenv("MESH_API_KEY", key)
	t.Setenv("MESH_ADMIN_KEY", "admin-secret")
	t.Setenv("MESH_CONFIG", "/home/bob/.config/meshd/config.toml")
	t.Setenv("MESH_HANDLER_TOKEN", "an-outer-runs-capability")
	t.Setenv("MESH_API_URL", "http://mesh.example")
	out := filepath.Join(t.TempDir(), "env")
	h := meshd.CommandHandler{Command: []string{"sh", "-c", `env > "$OUT"`}, Env: []string{"OUT=" + out, "MESH_API_KEY=" + key}, Timeout: 10 * time.Second}
	if err := h.Handle(context.Background(), sampleEnvelope(1, "print your environment")); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	env := string(data)
	for _, c := range []struct {
		name, absent string
	}{
		{"the API key is not passed, inherited or added", "MESH_API_KEY="},
		{"its value appears nowhere", key},
		{"another MESH_* secret is not passed", "admin-secret"},
		{"the config file that holds the key is not named", "MESH_CONFIG="},
		{"an outer handler run's capability is not passed on", "an-outer-runs-capability"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if strings.Contains(env, c.absent) {
				t.Errorf("the handler's environment holds %q:\n%s", c.absent, env)
			}
		})
	}
	t.Run("what is not a credential still reaches it", func(t *testing.T) {
		for _, want := range []string{"MESH_API_URL=http://mesh.example\n", "MESH_TASK_ID=task-9\n", "OUT=" + out + "\n"} {
			if !strings.Contains(env, want) {
				t.Errorf("the handler's environment lacks %q", want)
			}
		}
	})
}

// The inherited environment is filtered once and reused while it does not
// change: a change made after a run (a credential above all) must be
// filtered again, never served from what an earlier run saw.
func TestTheHandlersEnvironmentFollowsChangesAfterARun(t *testing.T) {
	dir := t.TempDir()
	run := func(name string, extra ...string) map[string]string {
		t.Helper()
		out := filepath.Join(dir, name)
		h := meshd.CommandHandler{Command: []string{"sh", "-c", `env > "$OUT"`}, Env: append([]string{"OUT=" + out}, extra...), Timeout: 10 * time.Second}
		if err := h.Handle(context.Background(), sampleEnvelope(1, "x")); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				m[k] = v
			}
		}
		return m
	}
	run("warm")
	t.Setenv("MESH_API_KEY", "amk_set_after_a_run")
	t.Setenv("MESH_SET_AFTER_A_RUN", "visible")
	env := run("after")
	if v, ok := env["MESH_API_KEY"]; ok {
		t.Errorf("a key set after a run reached the handler: MESH_API_KEY=%s", v)
	}
	if env["MESH_SET_AFTER_A_RUN"] != "visible" {
		t.Errorf("a variable set after a run did not reach the handler: %q", env["MESH_SET_AFTER_A_RUN"])
	}
	// Another handler's Env is its own, filtered the same way.
	env = run("other", "EXTRA=1", "MESH_WEBHOOK_SECRET=s3")
	if env["EXTRA"] != "1" || env["MESH_SET_AFTER_A_RUN"] != "visible" {
		t.Errorf("the other handler's environment lacks its Env or the inherited one: EXTRA=%q", env["EXTRA"])
	}
	if _, ok := env["MESH_WEBHOOK_SECRET"]; ok {
		t.Error("a secret in the handler's Env reached it")
	}
	if env = run("first-again"); env["EXTRA"] != "" {
		t.Errorf("the first handler got the other's Env: EXTRA=%q", env["EXTRA"])
	}
}

// An event larger than what is written ahead into the stdin pipe reaches
// the command whole, and a command that does not read it still succeeds.
func TestCommandHandlerLargeStdin(t *testing.T) {
	out := filepath.Join(t.TempDir(), "stdin")
	env := sampleEnvelope(1, strings.Repeat("long text ", 20_000)) // ~200 KiB
	want, err := meshd.BatchLine(env)
	if err != nil {
		t.Fatal(err)
	}
	h := meshd.CommandHandler{Command: []string{"sh", "-c", `cat > "$OUT"`}, Env: []string{"OUT=" + out}, Timeout: 10 * time.Second}
	if err := h.Handle(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("stdin was %d bytes, want the %d of the envelope line", len(got), len(want))
	}
	if err := (meshd.CommandHandler{Command: []string{"true"}, Timeout: 10 * time.Second}).Handle(context.Background(), env); err != nil {
		t.Errorf("a command that does not read its stdin: %v", err)
	}
}

// What the command writes to stderr goes to Stderr whole, and its last
// line into the error, also when the command runs a while before failing.
func TestCommandHandlerStderr(t *testing.T) {
	many := strings.Repeat("a line of stderr\n", 20_000) // more than a pipe holds
	for _, c := range []struct{ name, script, want string }{
		{"a quick command", `echo first >&2; echo 'the last line' >&2; exit 3`, "first\n"},
		{"a command that runs a while", `echo first >&2; sleep 0.3; echo 'the last line' >&2; exit 3`, "first\n"},
		{"a command that writes more than its pipe holds", `yes 'a line of stderr' | head -n 20000 >&2; echo 'the last line' >&2; exit 3`, many},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf strings.Builder
			h := meshd.CommandHandler{Command: []string{"sh", "-c", c.script}, Stderr: &lockedWriter{w: &buf}, Timeout: 10 * time.Second}
			err := h.Handle(context.Background(), sampleEnvelope(1, "x"))
			if err == nil || !strings.HasSuffix(err.Error(), "status 3: the last line") {
				t.Errorf("err = %v, want the status and the last stderr line", err)
			}
			if want := c.want + "the last line\n"; buf.String() != want {
				t.Errorf("Stderr got %d bytes, want %d", buf.Len(), len(want))
			}
		})
	}
}

// lockedWriter is a writer safe for the goroutine that copies stderr.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A program found in PATH is looked up through a cache; one that moved to
// another PATH directory since is found again, not reported as missing.
func TestCommandHandlerFindsAProgramThatMovedInPATH(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	t.Setenv("PATH", a+string(os.PathListSeparator)+b+string(os.PathListSeparator)+os.Getenv("PATH"))
	prog := filepath.Join(a, "meshd-test-handler-xyz")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := meshd.CommandHandler{Command: []string{"meshd-test-handler-xyz"}, Timeout: 10 * time.Second}
	if err := h.Handle(context.Background(), sampleEnvelope(1, "x")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(prog, filepath.Join(b, "meshd-test-handler-xyz")); err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(context.Background(), sampleEnvelope(2, "x")); err != nil {
		t.Errorf("after the program moved within PATH: %v", err)
	}
	if err := os.Remove(filepath.Join(b, "meshd-test-handler-xyz")); err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(context.Background(), sampleEnvelope(3, "x")); err == nil || !meshd.IsPermanent(err) {
		t.Errorf("after the program was removed: err = %v, want a permanent failure", err)
	}
}
