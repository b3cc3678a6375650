package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshd"
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
		case "GET /v1/agents/me":
			_ = json.NewEncoder(w).Encode(map[string]any{"agent_id": "bob", "name": "bob", "status": "offline", "key_epoch": 1, "last_seq": 2, "created_at": "2026-01-01T00:00:00Z"})
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
			wantCode: 1, wantStderr: []string{"MESH_MODE must be auto, push, kafka or poll"}},
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
		{name: "run with --batch 0 is a usage error naming the bounds", args: []string{"run", "--batch", "0", "--", "cat"}, env: base,
			wantCode: 2, wantStderr: []string{"--batch must be 1..1000 (got 0)"}},
		{name: "run with --batch over 1000 is a usage error naming the bounds", args: []string{"run", "--batch", "1001", "--", "cat"}, env: base,
			wantCode: 2, wantStderr: []string{"--batch must be 1..1000 (got 1001)"}},
		{name: "start with a --batch out of bounds fails before starting anything", args: []string{"start", "--batch", "-5", "--", "cat"}, env: base,
			wantCode: 2, wantStderr: []string{"--batch must be 1..1000 (got -5)"}},
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
	// The handler says on a FIFO when it has handled an event, so the test
	// waits on that instead of polling the output file.
	fifo := filepath.Join(dir, "handled.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Opened read-write, the FIFO neither blocks this open nor sees EOF
	// between handler runs.
	ff, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ff.Close() })
	handled := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(ff)
		for sc.Scan() {
			handled <- sc.Text()
		}
	}()
	getenv := env(map[string]string{
		"MESH_API_URL": srv.URL, "MESH_API_KEY": secretKey, "MESH_STATE_DIR": filepath.Join(dir, "state"),
		"MESH_HANDLER": `cat >> "` + out + `" && echo "$MESH_SEQ" > "` + fifo + `"`, "MESH_MODE": "poll", "MESH_LOG_FORMAT": "json", "MESH_LOG_LEVEL": "debug",
	})
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- cli(ctx, []string{"run"}, getenv, strings.NewReader(""), &stdout, &stderr) }()
	for _, want := range []string{"1", "2"} {
		select {
		case seq := <-handled:
			if seq != want {
				t.Fatalf("handled seq %s, want %s", seq, want)
			}
		case <-time.After(30 * time.Second):
			data, _ := os.ReadFile(out)
			t.Fatalf("seq %s not handled within 30 s; handler output %q", want, data)
		}
	}
	if data, _ := os.ReadFile(out); strings.Count(string(data), "\n") != 2 {
		t.Errorf("handler output %q, want two events", data)
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
	if st, err := meshd.LoadState(filepath.Join(dir, "state"), "bob"); err != nil || st.LastSeq != 2 {
		t.Errorf("state %+v err %v", st, err)
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

func TestConfigFilesOfEveryFormatLoad(t *testing.T) {
	tomlFile := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(tomlFile, []byte("# TOML by hand\napi_url = 'http://mesh.example:8080' # a literal string\napi_key = \"amk_\\u00e9t\\\"\"\nhandler_attempts = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path string
		want       map[string]string
	}{
		{"a file meshd init wrote before the config was TOML loads with its Go escapes undone", filepath.Join("testdata", "config-init-v0.toml"), map[string]string{
			"MESH_API_URL":   "http://mesh.example:8080",
			"MESH_API_KEY":   `amk_k"ey\with\quote`,
			"MESH_HANDLER":   "printf '%s\\n' \"$MESH_TEXT\"\t| tee -a log # not a comment\a",
			"MESH_STATE_DIR": "/home/bob/state dir",
		}},
		{"a hand-written file of the old form with unquoted values loads", filepath.Join("testdata", "config-handwritten-v0.toml"), map[string]string{
			"MESH_API_URL": "http://127.0.0.1:8080",
			"MESH_API_KEY": `amk_hand"written\`,
			"MESH_HANDLER": "cat > /dev/null",
		}},
		{"a TOML file with comments, a literal string and a number loads", tomlFile, map[string]string{
			"MESH_API_URL":          "http://mesh.example:8080",
			"MESH_API_KEY":          "amk_ét\"",
			"MESH_HANDLER_ATTEMPTS": "3",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readConfig(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestABrokenConfigFileIsAnErrorNamingIt(t *testing.T) {
	for _, c := range []struct{ name, content string }{
		{"an unterminated string", "api_url = \"http://x\n"},
		{"a table where a setting belongs", "[api]\nurl = \"http://x\"\n"},
	} {
		t.Run(c.name+" is refused", func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if conf, err := readConfig(path); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("got %q, %v; want an error naming %s", conf, err, path)
			}
		})
	}
}

func TestTheConfigFileRoundTripsAsTOML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meshd", "config.toml")
	values := map[string]string{
		"api_url":   "http://mesh.example:8080/base?x=1#frag",
		"api_key":   "amk_\"quoted\"\\back\\slash",
		"handler":   "printf '%s\\n' \"$MESH_TEXT\" | tee -a log\t# not a comment\a\v\x01 é ☃",
		"state_dir": "C:\\Users\\bob\\state\nsecond line",
	}
	keys := []string{"api_url", "api_key", "handler", "state_dir"}
	if err := writeConfig(path, keys, values); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the file is TOML a TOML library reads back to the same values", func(t *testing.T) {
		var raw map[string]string
		if _, err := toml.Decode(string(data), &raw); err != nil {
			t.Fatalf("not TOML: %v\n%s", err, data)
		}
		if !reflect.DeepEqual(raw, values) {
			t.Errorf("TOML holds %q, want %q", raw, values)
		}
	})
	t.Run("readConfig reads back every value", func(t *testing.T) {
		got, err := readConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if got["MESH_"+strings.ToUpper(k)] != values[k] {
				t.Errorf("%s = %q, want %q", k, got["MESH_"+strings.ToUpper(k)], values[k])
			}
		}
	})
	t.Run("the keys keep the order they were given in", func(t *testing.T) {
		last := -1
		for _, k := range keys {
			i := strings.Index(string(data), "\n"+k+" = ")
			if i < last {
				t.Errorf("%s is out of order:\n%s", k, data)
			}
			last = i
		}
	})
	t.Run("a value that is not UTF-8 is refused, not written unreadable", func(t *testing.T) {
		if err := writeConfig(filepath.Join(t.TempDir(), "c.toml"), []string{"api_key"}, map[string]string{"api_key": "amk_\xff"}); err == nil {
			t.Error("wrote a value TOML cannot hold")
		}
	})
}

func TestTheConfigFileIsPrivateWhateverWasThereBefore(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Unix permission bits")
	}
	cases := []struct {
		name   string
		before func(t *testing.T, path string)
	}{
		{"a world-readable leftover temp file of an earlier write", func(t *testing.T, path string) {
			writeWorldReadable(t, path+".tmp")
		}},
		{"a world-readable config file", func(t *testing.T, path string) {
			writeWorldReadable(t, path)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name+" does not make the new key readable by others", func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.toml")
			tc.before(t, path)
			if err := writeConfig(path, []string{"api_key"}, map[string]string{"api_key": secretKey}); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("config file mode %o, want 600", fi.Mode().Perm())
			}
			if conf, err := readConfig(path); err != nil || conf["MESH_API_KEY"] != secretKey {
				t.Errorf("config %v %v", conf, err)
			}
		})
	}
}

// writeWorldReadable leaves a file at path that anyone may read and write,
// whatever the umask.
func writeWorldReadable(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("old"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
}

func TestStartMakesAStateDirThatDoesNotExistYet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the meshd binary")
	}
	srv, _ := fakeMesh(t)
	dir := filepath.Join(t.TempDir(), "new", "state")
	env := map[string]string{"MESH_API_URL": srv.URL, "MESH_API_KEY": secretKey, "MESH_STATE_DIR": dir, "HOME": t.TempDir(),
		"MESH_HANDLER": "cat > /dev/null", "MESH_MODE": "poll"}
	// Runs before the fake mesh closes (cleanups run last first): stop the
	// daemon start left running.
	t.Cleanup(func() {
		if ri, ok := readRunInfo(dir, "bob"); ok && alive(ri.PID) {
			if code, out, errOut := runBin(t, env, "stop"); code != 0 {
				t.Errorf("stop: exit %d\n%s%s", code, out, errOut)
				_ = syscall.Kill(ri.PID, syscall.SIGKILL)
			}
		}
	})
	code, out, errOut := runBin(t, env, "start")
	if code != 0 || !strings.Contains(out, "meshd started for agent bob") {
		t.Fatalf("start: exit %d\n%s%s", code, out, errOut)
	}
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{dir, 0o700}, {filepath.Join(dir, "bob.log"), 0o600}} {
		if fi, err := os.Stat(p.path); err != nil || fi.Mode().Perm() != p.mode {
			t.Errorf("%s: %v, want mode %o", p.path, err, p.mode)
		}
	}
}
