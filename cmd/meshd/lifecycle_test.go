package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// runBin runs the meshd binary to completion (bounded) with env added.
func runBin(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, meshdBinary(t), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), o.String(), e.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, o.String(), e.String()
}

// eventually polls f every 100 ms until it is true or d passed.
func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pidAlive: the process runs (an exited daemon may stay a zombie until
// whoever adopted it reaps it).
func pidAlive(pid int) bool { return syscall.Kill(pid, 0) == nil && !isZombie(pid) }

func TestStartStatusStop(t *testing.T) {
	st, keys := kafkaMesh(t)
	dir := t.TempDir()
	env := map[string]string{"MESH_API_URL": st.URL, "MESH_API_KEY": keys["bob"], "MESH_STATE_DIR": dir, "HOME": t.TempDir(),
		"MESH_HANDLER": "cat > /dev/null", "MESH_MODE": "kafka"}

	code, out, errOut := runBin(t, env, "start")
	if code != 0 || !strings.Contains(out, "meshd started for agent bob") {
		t.Fatalf("start: exit %d\n%s%s", code, out, errOut)
	}
	ri, ok := readRunInfo(dir, "bob")
	if !ok {
		t.Fatal("no run info after start")
	}
	t.Cleanup(func() { _ = syscall.Kill(ri.PID, syscall.SIGKILL) })

	t.Run("a second start refuses: meshd already runs", func(t *testing.T) {
		if code, _, errOut := runBin(t, env, "start"); code != 1 || !strings.Contains(errOut, "already runs for agent bob") {
			t.Errorf("second start: exit %d, %s", code, errOut)
		}
	})

	alice := meshclient.New(st.URL, keys["alice"])
	if _, err := alice.Send(context.Background(), meshclient.SendRequest{To: "bob", Parts: textPart("hello")}); err != nil {
		t.Fatal(err)
	}
	var status daemonStatus
	eventually(t, 30*time.Second, "status shows seq 1 handled", func() bool {
		code, out, _ := runBin(t, env, "status", "--json")
		status = daemonStatus{}
		return code == 0 && json.Unmarshal([]byte(out), &status) == nil && status.HandledSeq >= 1
	})
	t.Run("status shows the agent online, its mode and lag 0 once the message is handled", func(t *testing.T) {
		if !status.Running || status.PID != ri.PID || status.Presence != "active" || status.Mode != "kafka" || status.Lag != 0 || status.NewestSeq != 1 {
			t.Errorf("status %+v", status)
		}
		_, out, _ := runBin(t, env, "status")
		for _, want := range []string{"agent     bob", "running, pid " + strconv.Itoa(ri.PID), "mode kafka", "presence  active", "lag 0", "parked    0"} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("stop leaves the agent draining and the process gone", func(t *testing.T) {
		// stop returns once the process is gone (it fails after its own
		// --timeout otherwise).
		code, out, errOut := runBin(t, env, "stop", "--timeout", "30s")
		if code != 0 || !strings.Contains(out, "draining") {
			t.Fatalf("stop: exit %d\n%s%s", code, out, errOut)
		}
		if pidAlive(ri.PID) {
			t.Error("the process is alive after stop")
		}
		if p, _ := presence(t, st.URL, meshclient.New(st.URL, keys["bob"])); p != "draining" {
			t.Errorf("presence %q after stop, want draining", p)
		}
		if _, ok := readRunInfo(dir, "bob"); ok {
			t.Error("the run info is left behind")
		}
	})
}

func textPart(s string) []mesh.Part { return []mesh.Part{{Kind: "text", Text: s}} }

func TestInstallWritesAUnitThatRunsMeshdRunWithTheConfig(t *testing.T) {
	home := t.TempDir()
	env := env(map[string]string{"HOME": home, "XDG_CONFIG_HOME": filepath.Join(home, "cfg")})
	cfg := filepath.Join(home, "cfg", "meshd", "config.toml")
	var stdout, stderr bytes.Buffer
	if code := cli(context.Background(), []string{"init", "--api-url", "http://mesh.example:8080", "--handler", "./h.sh"}, env, strings.NewReader("amk_k_v\n"), &stdout, &stderr); code != 0 {
		t.Fatalf("init: %d %s", code, stderr.String())
	}
	t.Run("init writes the config with mode 0600 and every command reads it", func(t *testing.T) {
		fi, err := os.Stat(cfg)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("config %v %v", fi, err)
		}
		conf, err := readConfig(cfg)
		if err != nil || conf["MESH_API_KEY"] != "amk_k_v" || conf["MESH_API_URL"] != "http://mesh.example:8080" || conf["MESH_HANDLER"] != "./h.sh" {
			t.Errorf("config %v %v", conf, err)
		}
	})
	exe, _ := os.Executable()
	for _, c := range []struct{ goos, path, want string }{
		{"linux", filepath.Join(home, "cfg", "systemd", "user", "meshd.service"), "ExecStart=" + exe + " run --config " + cfg + "\n"},
		{"darwin", filepath.Join(home, "Library", "LaunchAgents", "net.agentmesh.meshd.plist"), "<string>" + exe + "</string><string>run</string><string>--config</string><string>" + cfg + "</string>"},
	} {
		t.Run("install --user on "+c.goos+" writes a unit running meshd run --config", func(t *testing.T) {
			stdout.Reset()
			if code := cli(context.Background(), []string{"install", "--user", "--os", c.goos}, env, strings.NewReader(""), &stdout, &stderr); code != 0 {
				t.Fatalf("install: %d %s", code, stderr.String())
			}
			b, err := os.ReadFile(c.path)
			if c.goos == "linux" && !strings.Contains(string(b), "RestartPreventExitStatus=65\n") {
				t.Errorf("the unit restarts a refused key in a loop:\n%s", b)
			}
			if err != nil || !strings.Contains(string(b), c.want) {
				t.Errorf("%s: %v\n%s\nwant %q", c.path, err, b, c.want)
			}
		})
	}
}

func TestAShellHandlerMadeOfMeshdCommandsRepliesAndCompletesTheTask(t *testing.T) {
	st, keys := kafkaMesh(t)
	home := t.TempDir()
	cfg := filepath.Join(home, "bob.toml")
	var stdout, stderr bytes.Buffer
	if code := cli(context.Background(), []string{"init", "--config", cfg, "--api-url", st.URL}, env(map[string]string{"HOME": home}), strings.NewReader(keys["bob"]+"\n"), &stdout, &stderr); code != 0 {
		t.Fatalf("init: %s", stderr.String())
	}
	script := filepath.Join(home, "handler.sh")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
set -e
[ "$MESH_EVENT_TYPE" = message ] || exit 0
meshd reply --message-id "reply-$MESH_EVENT_ID" "hello $MESH_FROM, I got it"
exec meshd tasks status completed "done"
`), 0o700); err != nil {
		t.Fatal(err)
	}
	// Only the config file holds the key, and the handler is not told where
	// it is: its meshd commands go through meshd's control socket.
	p := startMeshd(t, map[string]string{"PATH": filepath.Dir(meshdBinary(t)) + ":" + os.Getenv("PATH"), "MESH_API_KEY": "", "MESH_API_URL": "",
		"MESH_STATE_DIR": t.TempDir(), "HOME": home}, "run", "--config", cfg, "--", script)
	task := completedTask(t, st.URL, keys["alice"], "bob", "hi bob")
	var texts []string
	for _, m := range task.Messages {
		texts = append(texts, m.From+": "+meshclient.PartsText(m.Parts))
	}
	if got := strings.Join(texts, " | "); !strings.Contains(got, "bob: hello alice, I got it") || !strings.Contains(got, "bob: done") {
		t.Errorf("messages %q; meshd stderr:\n%s", got, p.stderr.String())
	}
}

// completedTask sends text from the agent of key to agent to through the
// API at url, waits until the handler completes the task and returns it.
func completedTask(t *testing.T, url, key, to, text string) meshclient.TaskDetail {
	t.Helper()
	from := meshclient.New(url, key)
	res, err := from.Send(context.Background(), meshclient.SendRequest{To: to, Parts: textPart(text)})
	if err != nil {
		t.Fatal(err)
	}
	var task meshclient.TaskDetail
	eventually(t, 30*time.Second, "the task is completed", func() bool {
		task, err = from.GetTask(context.Background(), res.TaskID)
		return err == nil && task.Status == "completed"
	})
	return task
}

// TestAHandlerWithoutTheKeyRepliesThroughMeshd is the handler contract of
// meshd run --help: meshd has MESH_API_KEY, its handler does not, and the
// handler's meshd reply, artifact add and tasks status still act on the
// event's task, through meshd's control socket.
func TestAHandlerWithoutTheKeyRepliesThroughMeshd(t *testing.T) {
	st, keys := kafkaMesh(t)
	home := t.TempDir()
	envFile := filepath.Join(home, "handler.env")
	script := filepath.Join(home, "handler.sh")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
set -e
env > "`+envFile+`"
# meshd's own environment, as a curious handler would look for it
cat "/proc/$PPID/environ" > "`+envFile+`.meshd" 2>/dev/null || true
[ "$MESH_EVENT_TYPE" = message ] || exit 0
meshd reply --message-id "reply-$MESH_EVENT_ID" "pong from $MESH_TO"
meshd artifact add --message-id "art-$MESH_EVENT_ID" result.txt "42"
exec meshd tasks status --message-id "done-$MESH_EVENT_ID" completed "done"
`), 0o700); err != nil {
		t.Fatal(err)
	}
	p := startMeshd(t, map[string]string{"PATH": filepath.Dir(meshdBinary(t)) + ":" + os.Getenv("PATH"), "MESH_API_KEY": keys["bob"], "MESH_API_URL": st.URL,
		"MESH_STATE_DIR": t.TempDir(), "HOME": home, "MESH_MODE": "kafka"}, "run", "--", script)
	task := completedTask(t, st.URL, keys["alice"], "bob", "ping")
	t.Run("the reply and the artifact reached the event's task", func(t *testing.T) {
		var texts []string
		for _, m := range task.Messages {
			texts = append(texts, m.From+": "+meshclient.PartsText(m.Parts))
		}
		if got := strings.Join(texts, " | "); !strings.Contains(got, "bob: pong from bob") || !strings.Contains(got, "bob: done") {
			t.Errorf("messages %q; meshd stderr:\n%s", got, p.stderr.String())
		}
		if len(task.Artifacts) != 1 || task.Artifacts[0].Name != "result.txt" {
			t.Errorf("artifacts %+v", task.Artifacts)
		}
	})
	t.Run("the handler's environment held neither the key nor where to find it", func(t *testing.T) {
		b, err := os.ReadFile(envFile)
		if err != nil {
			t.Fatal(err)
		}
		if env := string(b); strings.Contains(env, keys["bob"]) || strings.Contains(env, "MESH_API_KEY=") || strings.Contains(env, "MESH_CONFIG=") ||
			!strings.Contains(env, meshd.EnvHandlerSocket+"=") || !strings.Contains(env, meshd.EnvHandlerToken+"=") {
			t.Errorf("the handler's environment:\n%s", env)
		}
	})
	t.Run("nor could the handler read the key from meshd's own environment", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("/proc/PID/environ is Linux's")
		}
		if os.Geteuid() == 0 {
			t.Skip("as root the handler reads every process's environ; shared/meshd's TestHideProcessMakesThisProcessNonDumpable checks the mechanism")
		}
		b, err := os.ReadFile(envFile + ".meshd")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), keys["bob"]) {
			t.Error("the handler read MESH_API_KEY from /proc/<meshd's pid>/environ")
		}
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Errorf("meshd exited %d after SIGTERM", code)
	}
}

// refusingURL is the URL of a local port that was just free and is closed
// again, so a connection to it is refused at once: an API that is down.
func refusingURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	return url
}

// TestAnUnreachableAPIIsNamedFirst: the first thing a command says when the
// API does not answer names MESH_API_URL (after 1.5 s of silence, or at the
// first refused attempt), then it counts the retries.
func TestAnUnreachableAPIIsNamedFirst(t *testing.T) {
	refusedURL := refusingURL(t)
	// A listener that never accepts: connections hang without an error.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silentURL := "http://" + silent.Addr().String()
	for _, c := range []struct {
		name, url string
		want      []string
	}{
		{"a refused connection: the first line names MESH_API_URL, then retries are counted", refusedURL, []string{"MESH_API_URL=" + refusedURL + " is unreachable", "retry 2:"}},
		{"an address that never answers: the first line names MESH_API_URL", silentURL, []string{"waiting for the mesh API at MESH_API_URL=" + silentURL}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &testenv.Buffer{}
			code := make(chan int, 1)
			go func() {
				code <- cli(ctx, []string{"send", "--to", "alice", "hi"}, env(map[string]string{"MESH_API_URL": c.url, "MESH_API_KEY": secretKey}), strings.NewReader(""), &bytes.Buffer{}, w)
			}()
			w.WaitFor(t, 20*time.Second, c.want...)
			cancel() // the call would retry for 30 s
			select {
			case got := <-code:
				if got != 1 {
					t.Errorf("exit %d after the cancel, want 1", got)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the command did not end after its context was canceled")
			}
			if first, _, _ := strings.Cut(w.String(), "\n"); !strings.Contains(first, "MESH_API_URL=") {
				t.Errorf("first line %q, want one naming MESH_API_URL", first)
			}
		})
	}
}

// TestRunNamesAnUnreachableAPIAndStops: meshd run says which MESH_API_URL
// does not answer while it retries, and a stop ends it. How soon (within
// the token exchange's grace, not after its 15 s of retries) is proven on
// the bubble's clock by shared/meshd's
// TestAStopWhileTheAPIDoesNotAnswerEndsRunWithinTheTokenGrace.
func TestRunNamesAnUnreachableAPIAndStops(t *testing.T) {
	url := refusingURL(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &testenv.Buffer{}
	code := make(chan int, 1)
	go func() {
		code <- cli(ctx, []string{"run", "--", "cat"}, env(map[string]string{"MESH_API_URL": url, "MESH_API_KEY": secretKey, "MESH_STATE_DIR": t.TempDir()}), strings.NewReader(""), &bytes.Buffer{}, w)
	}()
	w.WaitFor(t, 20*time.Second, "check MESH_API_URL", url)
	cancel()
	select {
	case got := <-code:
		if got != 0 {
			t.Errorf("meshd run exited %d after the stop, want 0:\n%s", got, w.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("meshd run did not stop while the API was unreachable:\n%s", w.String())
	}
}

func TestEveryCommandHasHelpWithItsFlagsAndExamples(t *testing.T) {
	for _, c := range commands() {
		t.Run(c.name+" --help", func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli(context.Background(), append(strings.Fields(c.name), "--help"), env(nil), strings.NewReader(""), &stdout, &stderr)
			out := stdout.String()
			if code != 0 || !strings.Contains(out, "usage: meshd "+c.name) || !strings.Contains(out, "--config") || !strings.Contains(out, "examples:\n  ") {
				t.Errorf("exit %d:\n%s%s", code, out, stderr.String())
			}
		})
	}
	t.Run("run --help documents the handler contract", func(t *testing.T) {
		var stdout bytes.Buffer
		cli(context.Background(), []string{"run", "--help"}, env(nil), strings.NewReader(""), &stdout, &bytes.Buffer{})
		for _, want := range []string{"stdin", "MESH_TASK_ID", "65, 126, 127", "--message-id reply-$MESH_EVENT_ID", "second Ctrl-C", "WITHOUT its credentials: no MESH_API_KEY", "MESH_HANDLER_SOCKET", "MESH_HANDLER_TOKEN", "refused once this run of the handler has ended"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("run --help lacks %q", want)
			}
		}
	})
	t.Run("a command group lists its subcommands", func(t *testing.T) {
		var stdout bytes.Buffer
		if code := cli(context.Background(), []string{"friends"}, env(nil), strings.NewReader(""), &stdout, &bytes.Buffer{}); code != 0 || !strings.Contains(stdout.String(), "friends accept") {
			t.Errorf("exit %d: %s", code, stdout.String())
		}
	})
}

func TestASecondInstanceAndAFreshStateDir(t *testing.T) {
	st, keys := kafkaMesh(t)
	tmp := t.TempDir()
	envFor := func(dir, rec string) map[string]string {
		return map[string]string{"MESH_API_URL": st.URL, "MESH_API_KEY": keys["bob"], "MESH_STATE_DIR": filepath.Join(tmp, dir), "HOME": tmp,
			"MESH_MODE": "kafka", "MESHD_TEST_HANDLER": "picky", "MESHD_TEST_RECORD": filepath.Join(tmp, rec), "MESHD_TEST_FIXED": filepath.Join(tmp, "fixed")}
	}
	alice := meshclient.New(st.URL, keys["alice"])
	sent := 0 // bob's events are alice's messages: the newest seq
	send := func(text string) {
		t.Helper()
		if _, err := alice.Send(context.Background(), meshclient.SendRequest{To: "bob", Parts: textPart(text)}); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	first := startMeshd(t, envFor("one", "rec1"), "run", "--", selfHandler(t))
	send("m1")
	send("m2")
	eventually(t, 30*time.Second, "the first meshd handles 1 and 2", func() bool { return len(readLines(t, filepath.Join(tmp, "rec1"))) == 2 })

	t.Run("start refuses while another instance of the agent is live", func(t *testing.T) {
		code, _, errOut := runBin(t, envFor("two", "rec2"), "start", "--", selfHandler(t))
		if code != 1 || !strings.Contains(errOut, "another meshd is live for agent bob") {
			t.Errorf("start: exit %d, %s", code, errOut)
		}
	})
	t.Run("run warns loudly while another instance of the agent is live", func(t *testing.T) {
		second := startMeshd(t, envFor("two", "rec2"), "run", "--", selfHandler(t))
		eventually(t, 20*time.Second, "the warning", func() bool {
			return strings.Contains(second.stderr.String(), "ANOTHER MESHD IS RUNNING FOR THIS AGENT")
		})
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		second.wait(t, 20*time.Second)
	})
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	first.wait(t, 20*time.Second)
	send("m3")

	for _, c := range []struct {
		name, dir string
		args      []string
		want      string
	}{
		// Each case ends with a fence (one more message, the next seq):
		// delivery is in order, so anything else it would deliver before
		// the fence (a repeat above all) shows up first.
		{"a fresh state dir starts after the seq the agent's last meshd handled", "three", nil, "3"},
		{"--from 0 delivers every retained event", "four", []string{"--from", "0"}, "1,2,3,4"},
		{"--from latest delivers only what arrives later", "five", []string{"--from", "latest"}, "6"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := c.dir + ".rec"
			p := startMeshd(t, envFor(c.dir, rec), append(append([]string{"run"}, c.args...), "--", selfHandler(t))...)
			if c.want == "6" {
				eventually(t, 20*time.Second, "meshd delivering", func() bool { return strings.Contains(p.stderr.String(), "meshd started") })
				send("m6")
			}
			handled := func() string { return strings.Join(readLines(t, filepath.Join(tmp, rec)), ",") }
			eventually(t, 30*time.Second, "seq "+c.want+" handled", func() bool { return strings.HasPrefix(handled()+",", c.want+",") })
			send("fence")
			want := c.want + "," + strconv.Itoa(sent)
			eventually(t, 30*time.Second, "the fence handled", func() bool { return strings.Contains(","+handled()+",", ","+strconv.Itoa(sent)+",") })
			if got := handled(); got != want {
				t.Errorf("handled %s, want %s (then the fence)", got, want)
			}
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			p.wait(t, 20*time.Second)
		})
	}
}

func TestStopNowKillsTheRunningHandler(t *testing.T) {
	st, keys := kafkaMesh(t)
	dir := t.TempDir()
	started := filepath.Join(t.TempDir(), "started")
	env := map[string]string{"MESH_API_URL": st.URL, "MESH_API_KEY": keys["bob"], "MESH_STATE_DIR": dir, "HOME": t.TempDir(),
		"MESH_HANDLER": "touch " + started + "; sleep 120", "MESH_MODE": "kafka"}
	if code, out, errOut := runBin(t, env, "start"); code != 0 {
		t.Fatalf("start: exit %d\n%s%s", code, out, errOut)
	}
	ri, _ := readRunInfo(dir, "bob")
	t.Cleanup(func() {
		_ = syscall.Kill(ri.PID, syscall.SIGKILL)
		// A failed run must not leave the handler behind: its shell (its
		// command line names this test's file) leads its process group.
		out, _ := exec.Command("pgrep", "-f", started).Output()
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	})
	if _, err := meshclient.New(st.URL, keys["alice"]).Send(context.Background(), meshclient.SendRequest{To: "bob", Parts: textPart("take your time")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the handler runs", func() bool { _, err := os.Stat(started); return err == nil })
	// The handler sleeps 120 s: stop succeeds within its own --timeout
	// only if --now killed it.
	code, out, errOut := runBin(t, env, "stop", "--now", "--timeout", "45s")
	if code != 0 || pidAlive(ri.PID) {
		t.Fatalf("stop --now: exit %d, alive %v\n%s%s", code, pidAlive(ri.PID), out, errOut)
	}
	if out, _ := exec.Command("pgrep", "-f", started).Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("the handler's sleep survived: pids %s", out)
	}
	if st, err := meshd.LoadState(dir, "bob"); err != nil || st.LastSeq != 0 {
		t.Errorf("state %+v %v: the interrupted event must come again at the next start", st, err)
	}
}
