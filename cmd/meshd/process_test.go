package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// The tests in this file run the real meshd binary, built from this
// package, against the in-process mesh (real MariaDB, real Kafka broker),
// with this test binary as the handler command: run with
// MESHD_TEST_HANDLER set, it plays a handler role instead of the tests.

func TestMain(m *testing.M) {
	if role := os.Getenv("MESHD_TEST_HANDLER"); role != "" {
		os.Exit(handlerRole(role))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// handlerRole is one handler run for the event on stdin.
//
//	record: append "start SEQ PID" to $MESHD_TEST_RECORD, fsync, work for
//	        50-250 ms, append "done SEQ", fsync (the external recorder of
//	        the crash test).
//	picky:  fail (exit 1, reason on stderr) for an event whose body says
//	        "poison" unless $MESHD_TEST_FIXED exists; else append "SEQ".
func handlerRole(role string) int {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		return 1
	}
	seq := os.Getenv("MESH_SEQ")
	record := func(line string) int {
		f, err := os.OpenFile(os.Getenv("MESHD_TEST_RECORD"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		if _, err := f.WriteString(line + "\n"); err != nil {
			return 1
		}
		if err := f.Sync(); err != nil {
			return 1
		}
		return 0
	}
	switch role {
	case "record":
		if code := record(fmt.Sprintf("start %s %d", seq, os.Getpid())); code != 0 {
			return code
		}
		time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
		return record("done " + seq)
	case "picky":
		if _, err := os.Stat(os.Getenv("MESHD_TEST_FIXED")); bytes.Contains(in, []byte("poison")) && err != nil {
			fmt.Fprintf(os.Stderr, "cannot handle seq %s: it is poison\n", seq)
			return 1
		}
		return record(seq)
	}
	return 2
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// meshdBinary builds cmd/meshd once per test process.
func meshdBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "meshd-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "meshd")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// selfHandler is the handler command: this test binary in a role.
func selfHandler(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// proc is one meshd process.
type proc struct {
	cmd    *exec.Cmd
	stderr *testenv.Buffer
	done   chan error
}

// startMeshd runs the binary with env (added to the test's) and args.
func startMeshd(t *testing.T, env map[string]string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(meshdBinary(t), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &proc{cmd: cmd, stderr: &testenv.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		p.done <- nil
	})
	return p
}

// wait waits for the process to exit and returns its status.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(timeout):
		t.Fatalf("meshd did not exit within %v; stderr:\n%s", timeout, p.stderr.String())
		return -1
	}
}

// kafkaMesh is the in-process mesh with a Kafka topic and a dispatcher
// draining the outbox as its schedule would, and friends alice and bob.
func kafkaMesh(t *testing.T) (*localstacktest.Stack, map[string]string) {
	t.Helper()
	st := localstacktest.Start(t, localstacktest.Options{Kafka: true, Partitions: 3})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_ = st.Dispatcher.Run(ctx, time.Minute)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	keys := st.Agents(t, "alice", "bob")
	st.Befriend(t, "alice", "bob")
	return st, keys
}

// readLines reads a recorder file (missing = empty).
func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestACrashWhileTheHandlerRunsLosesNothing SIGKILLs meshd (and its
// handler, as a host crash would) while the handler is running, several
// times, and checks with the handler's own fsynced record that every event
// was handled, in order, with at most one repeat per kill. meshd marking an
// event handled before running its handler loses the event being handled
// at the kill.
func TestACrashWhileTheHandlerRunsLosesNothing(t *testing.T) {
	st, keys := kafkaMesh(t)
	ctx := context.Background()
	const n, kills = 24, 4
	alice := meshclient.New(st.URL, keys["alice"])
	for i := 1; i <= n; i++ {
		if _, err := alice.Send(ctx, meshclient.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: "text", Text: fmt.Sprintf("m%d", i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	rec := filepath.Join(dir, "record.log")
	env := map[string]string{
		"MESH_API_URL": st.URL, "MESH_API_KEY": keys["bob"], "MESH_STATE_DIR": filepath.Join(dir, "state"),
		"MESH_MODE": "kafka", "MESHD_TEST_HANDLER": "record", "MESHD_TEST_RECORD": rec,
	}
	// inFlight is the handler running now, if it handles seq ≥ least: a
	// start line without its done.
	inFlight := func(from, least int) (seq string, pid int, ok bool) {
		lines := readLines(t, rec)
		if len(lines) <= from {
			return "", 0, false
		}
		last := strings.Fields(lines[len(lines)-1])
		if s, _ := strconv.Atoi(last[1]); last[0] != "start" || s < least {
			return "", 0, false
		}
		pid, _ = strconv.Atoi(last[2])
		return last[1], pid, true
	}
	for k := 1; k <= kills; k++ {
		before := len(readLines(t, rec))
		least := k * n / (kills + 1) // the kills spread over the stream
		p := startMeshd(t, env, "run", "--", selfHandler(t))
		var seq string
		var pid int
		deadline := time.Now().Add(60 * time.Second)
		for {
			var ok bool
			if seq, pid, ok = inFlight(before, least); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: no handler started within 60 s; meshd stderr:\n%s", k, p.stderr.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		// The host dies: meshd and the handler it runs (its own process group).
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		p.wait(t, 10*time.Second)
		t.Logf("kill %d while the handler of seq %s ran", k, seq)
	}

	p := startMeshd(t, env, "run", "--", selfHandler(t))
	handled := func() map[int]int {
		done := map[int]int{}
		for _, l := range readLines(t, rec) {
			if f := strings.Fields(l); f[0] == "done" {
				s, _ := strconv.Atoi(f[1])
				done[s]++
			}
		}
		return done
	}
	// Delivery is in order, so the last event done means the run is over.
	deadline := time.Now().Add(90 * time.Second)
	for {
		done := handled()
		if done[n] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d kills, handled %v; want up to seq %d; record:\n%s\nmeshd stderr:\n%s",
				kills, done, n, strings.Join(readLines(t, rec), "\n"), p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Errorf("meshd exited %d after SIGTERM", code)
	}

	var order []int
	for _, l := range readLines(t, rec) {
		if f := strings.Fields(l); f[0] == "done" {
			s, _ := strconv.Atoi(f[1])
			order = append(order, s)
		}
	}
	t.Run("every event was handled, in order: each is the next one or a repeat of the last", func(t *testing.T) {
		for s, c := handled(), 1; c <= n; c++ {
			if s[c] == 0 {
				t.Errorf("seq %d was never handled (lost at a kill)", c)
			}
		}
		top := 0
		for _, s := range order {
			if s != top && s != top+1 {
				t.Fatalf("handled order %v: %d after %d", order, s, top)
			}
			top = max(top, s)
		}
		if top != n {
			t.Errorf("handled up to %d, want %d", top, n)
		}
	})
	t.Run("at most one event was repeated per kill", func(t *testing.T) {
		if repeats := len(order) - n; repeats > kills {
			t.Errorf("%d repeats after %d kills: %v", repeats, kills, order)
		}
	})
}

// TestAMessageTheHandlerCannotTakeIsParkedAndRetried is issue 7's
// acceptance: a handler that exits 1 for one message. meshd parks it after
// its attempts, the task is failed with the handler's error, every later
// message is handled in order, `meshd deadletters` lists it and
// `meshd retry` runs it again.
func TestAMessageTheHandlerCannotTakeIsParkedAndRetried(t *testing.T) {
	st, keys := kafkaMesh(t)
	ctx := context.Background()
	alice := meshclient.New(st.URL, keys["alice"])
	var tasks []string
	for _, text := range []string{"m1", "poison", "m3", "m4"} {
		res, err := alice.Send(ctx, meshclient.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: "text", Text: text}}})
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, res.TaskID)
	}
	dir := t.TempDir()
	rec, fixed := filepath.Join(dir, "record.log"), filepath.Join(dir, "fixed")
	env := map[string]string{
		"MESH_API_URL": st.URL, "MESH_API_KEY": keys["bob"], "MESH_STATE_DIR": filepath.Join(dir, "state"),
		"MESH_HANDLER_ATTEMPTS": "3", "MESH_HANDLER_BACKOFF": "20ms",
		"MESHD_TEST_HANDLER": "picky", "MESHD_TEST_RECORD": rec, "MESHD_TEST_FIXED": fixed,
	}
	p := startMeshd(t, env, "run", "--", selfHandler(t))
	deadline := time.Now().Add(60 * time.Second)
	for len(readLines(t, rec)) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("handled %v; meshd stderr:\n%s", readLines(t, rec), p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("meshd exited %d; stderr:\n%s", code, p.stderr.String())
	}
	logs := p.stderr.String()

	t.Run("every later message is handled, in order", func(t *testing.T) {
		if got := strings.Join(readLines(t, rec), ","); got != "1,3,4" {
			t.Errorf("handled %s, want 1,3,4", got)
		}
	})
	t.Run("the message was tried 3 times, then parked with one log line", func(t *testing.T) {
		if c := strings.Count(logs, "handler failed; retrying"); c != 2 {
			t.Errorf("%d retries logged, want 2", c)
		}
		if c := strings.Count(logs, "event parked"); c != 1 || !strings.Contains(logs, "reason=attempts_exhausted attempts=3") {
			t.Errorf("%d parked lines:\n%s", c, logs)
		}
		if c := strings.Count(logs, `msg="event handled"`); c != 3 {
			t.Errorf("%d handled lines, want 3", c)
		}
	})
	t.Run("its task is failed with the handler's error", func(t *testing.T) {
		task, err := alice.GetTask(ctx, tasks[1])
		if err != nil {
			t.Fatal(err)
		}
		var note string
		for _, m := range task.Messages {
			if m.From == "bob" && len(m.Parts) > 0 {
				note = m.Parts[0].Text
			}
		}
		if task.Status != mesh.TaskFailed || !strings.Contains(note, "cannot handle seq 2: it is poison") {
			t.Errorf("task %s is %s with note %q", tasks[1], task.Status, note)
		}
		if other, _ := alice.GetTask(ctx, tasks[2]); other.Status == mesh.TaskFailed {
			t.Error("a handled message's task was failed too")
		}
	})
	cli := func(args ...string) (int, string) {
		q := startMeshd(t, env, args...)
		var out bytes.Buffer
		q.cmd.Stdout = nil
		code := q.wait(t, 30*time.Second)
		out.WriteString(q.stderr.String())
		return code, out.String()
	}
	list := func(t *testing.T) string {
		cmd := exec.Command(meshdBinary(t), "deadletters")
		cmd.Env = append(os.Environ(), "MESH_STATE_DIR="+env["MESH_STATE_DIR"])
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("meshd deadletters: %v", err)
		}
		return string(out)
	}
	t.Run("meshd deadletters lists it with its error", func(t *testing.T) {
		out := list(t)
		if !strings.Contains(out, "\n2 ") || !strings.Contains(out, " "+tasks[1]+" ") || !strings.Contains(out, "attempts_exhausted  3 ") || !strings.Contains(out, "it is poison") {
			t.Errorf("deadletters printed %q", out)
		}
	})
	t.Run("meshd retry runs it again: still failing it stays, fixed it is handled and gone", func(t *testing.T) {
		if code, out := cli("retry", "2", "--", selfHandler(t)); code != 1 || !strings.Contains(out, "failed again") {
			t.Errorf("retry of a still failing event: exit %d, %s", code, out)
		}
		if err := os.WriteFile(fixed, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out := cli("retry", "2", "--", selfHandler(t)); code != 0 {
			t.Fatalf("retry: exit %d, %s", code, out)
		}
		if got := strings.Join(readLines(t, rec), ","); got != "1,3,4,2" {
			t.Errorf("handled %s, want 1,3,4,2", got)
		}
		if out := list(t); out != "" {
			t.Errorf("still listed: %q", out)
		}
	})
	t.Run("meshd run with a handler that does not exist exits within 2 s naming it", func(t *testing.T) {
		began := time.Now()
		code, out := cli("run", "--", "/no/such/handler")
		if code == 0 || !strings.Contains(out, "/no/such/handler") || time.Since(began) > 2*time.Second {
			t.Errorf("exit %d after %v: %s", code, time.Since(began), out)
		}
	})
}

// presence is bob's own status and instance as GET /v1/agents/me says.
func presence(t *testing.T, base string, c *meshclient.Client) (status, instance string) {
	t.Helper()
	tok, err := c.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/agents/me", nil)
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var me struct {
		Status     string  `json:"status"`
		InstanceID *string `json:"instance_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&me); err != nil {
		t.Fatal(err)
	}
	if me.InstanceID != nil {
		instance = *me.InstanceID
	}
	return me.Status, instance
}

// TestSIGTERMAtAnyMomentOfTheStartLeavesTheAgentDraining stops meshd at
// random moments of its start: while the token is exchanged, around the
// first heartbeat, while auto mode probes a broker that does not answer.
// Each time the agent must read draining afterwards, not active.
func TestSIGTERMAtAnyMomentOfTheStartLeavesTheAgentDraining(t *testing.T) {
	st := localstacktest.Start(t, localstacktest.Options{})
	keys := st.Agents(t, "bob")
	bob := meshclient.New(st.URL, keys["bob"])
	// Start from draining, as after an earlier clean stop.
	if _, err := bob.Heartbeat(context.Background(), "earlier", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.GoOffline(context.Background(), "earlier"); err != nil {
		t.Fatal(err)
	}
	// A broker that accepts connections and never answers: auto mode
	// probes it for its whole probe timeout (5 s), a long mode-choice phase.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	env := map[string]string{
		"MESH_API_URL": st.URL, "MESH_API_KEY": keys["bob"], "MESH_STATE_DIR": t.TempDir(),
		"MESH_MODE": "auto", "MESH_KAFKA_BROKERS": silent.Addr().String(),
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	_, lastInstance := presence(t, st.URL, bob)
	announced := 0
	for i := 1; i <= 10; i++ {
		// Half the stops land in the first 300 ms (token, heartbeat), half
		// later (mode choice).
		delay := time.Duration(rng.IntN(300)) * time.Millisecond
		if i%2 == 0 {
			delay = 300*time.Millisecond + time.Duration(rng.IntN(1200))*time.Millisecond
		}
		p := startMeshd(t, env, "run", "--", "cat")
		time.Sleep(delay)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		code := p.wait(t, 20*time.Second)
		status, instance := presence(t, st.URL, bob)
		if instance != lastInstance {
			announced++ // this run heartbeated before the stop
			lastInstance = instance
		}
		if status != mesh.PresenceDraining {
			t.Errorf("stop %d after %v: exit %d, agent is %s, want draining; meshd stderr:\n%s", i, delay, code, status, p.stderr.String())
		}
	}
	if announced < 5 {
		t.Errorf("only %d of 10 stops came after meshd announced itself: the test did not reach the later phases", announced)
	}
}
