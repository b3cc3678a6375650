package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// measureConsume measures meshd's own consume rate and, in the same run,
// the physical lines it is held to: one pwrite + fdatasync of the state
// record (phys.fdatasync) and one process start (phys.spawn).
//
// Each meshd figure is meshd's alone: meshd handles a warm-up event and
// stops, the n events are written to the outbox and drained to Kafka
// (untimed), then meshd starts again on the same state and the rate is n-1
// over the time from the first to the last event its handler saw. The relay
// is then done before the clock starts, and meshd's own start (token,
// probe, consumer) is outside it.
func measureConsume(t *testing.T, r *Results) {
	t.Chdir(repoRoot(t)) // the local stack reads template.yaml from the repository
	st := localstacktest.Start(t, localstacktest.Options{Kafka: true, Partitions: 3})
	keys := st.Agents(t, "writer", "bob", "carol", "dave")
	for _, a := range []string{"bob", "carol", "dave"} {
		st.Befriend(t, "writer", a)
	}
	cases := []struct {
		key, agent string
		n          int
		batch      int
		h          meshd.Handler
		phys       func(t *testing.T, d time.Duration) (key string, n int, took time.Duration) // the line it is held to
	}{
		{"meshd.noop", "bob", sized(20_000, 2_000), 1, nil, physFdatasync},
		{"meshd.exec", "carol", sized(1_500, 200), 1, meshd.CommandHandler{Command: []string{"true"}, Timeout: 30 * time.Second}, physSpawn},
		// The batch consumer reads its stdin, as a real one must.
		{"meshd.exec.batch100", "dave", sized(20_000, 2_000), 100, meshd.CommandHandler{Command: []string{"sh", "-c", "cat >/dev/null"}, Timeout: 30 * time.Second}, nil},
	}
	var around []string
	for _, c := range cases {
		var n1 int
		var t1 time.Duration
		if c.phys != nil {
			_, n1, t1 = c.phys(t, physFor/2)
		}
		say("meshd consume: %d events for %s, handler %s", c.n, c.agent, c.key)
		r.set(c.key, consume(t, st, keys, c.agent, c.n, c.batch, c.h), "events/s")
		if c.phys != nil {
			// Half before and half after the meshd figure: a disk or CPU
			// shared with other work drifts, and the line must be the one
			// meshd ran against.
			k, n2, t2 := c.phys(t, physFor/2)
			unit := map[string]string{"phys.fdatasync": "records/s", "phys.spawn": "starts/s"}[k]
			r.set(k, float64(n1+n2)/(t1+t2).Seconds(), unit)
			around = append(around, fmt.Sprintf("%s %.0f before, %.0f after", k, float64(n1)/t1.Seconds(), float64(n2)/t2.Seconds()))
			if h, ok := c.h.(meshd.CommandHandler); ok {
				// The handler alone, outside meshd, in this process: what
				// of the gap to phys.spawn is the handler's own.
				around = append(around, fmt.Sprintf("CommandHandler.Handle alone %.0f/s", handleRate(t, h, physFor/2)))
			}
		}
	}
	r.note("meshd consume figures are meshd's own: the events are drained to Kafka before meshd starts (on the state of a warm-up run), and the rate is timed from the first to the last event its handler saw. phys.fdatasync is one 512-byte pwrite alternating two slots + fdatasync in a fresh temp dir like meshd's state dir; phys.spawn is sequential os/exec runs of `true` with an 1 KiB stdin in its own process group, as meshd starts a handler. Each is measured for %v, half right before and half right after the meshd figure it bounds (%s).", physFor, strings.Join(around, "; "))
}

// physFor is how long each physical line is measured.
const physFor = 2 * time.Second

// physFdatasync is this machine's rate of what one meshd mark costs: a
// 512-byte record written in place into one of two slots of a
// preallocated file, then fdatasync.
func physFdatasync(t *testing.T, d time.Duration) (string, int, time.Duration) {
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "phys.state"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rec := make([]byte, 512)
	if _, err := f.WriteAt(make([]byte, 1024), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		rec[0] = byte(n)
		if _, err := f.WriteAt(rec, int64(n%2)*512); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return "phys.fdatasync", n, time.Since(start)
}

// physSpawn is this machine's rate of process starts the way meshd runs an
// exec handler: os/exec, its own process group, the event on stdin.
func physSpawn(t *testing.T, d time.Duration) (string, int, time.Duration) {
	stdin := bytes.Repeat([]byte("x"), 1024)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		cmd := exec.Command("true")
		cmd.Stdin = bytes.NewReader(stdin)
		cmd.Env = os.Environ()
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return "phys.spawn", n, time.Since(start)
}

// handleRate is the rate of sequential CommandHandler.Handle runs for d,
// each with a small event, as meshd runs it (a cancelable context).
func handleRate(t *testing.T, h meshd.CommandHandler, d time.Duration) float64 {
	env := mesh.Envelope{V: mesh.EnvelopeVersion, EventID: "ev-phys", Seq: 1, Type: mesh.EventMessage, To: "carol", From: "writer", OccurredAt: time.Now()}
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		ctx, cancel := context.WithCancel(context.Background())
		if err := h.Handle(ctx, env); err != nil {
			t.Fatal(err)
		}
		cancel()
		n++
	}
	return float64(n) / time.Since(start).Seconds()
}

// counted counts the events a handler handled; the warm-up event closes
// warm instead.
type counted struct {
	inner   meshd.Handler
	warmID  string
	warm    chan struct{}
	handled atomic.Int64
	first   atomic.Int64 // unix ns of the first counted event
	last    atomic.Int64 // unix ns of the latest
}

func (c *counted) count(env mesh.Envelope) {
	if env.MessageID == c.warmID {
		close(c.warm)
		return
	}
	now := time.Now().UnixNano()
	c.first.CompareAndSwap(0, now)
	c.last.Store(now)
	c.handled.Add(1)
}

func (c *counted) Handle(ctx context.Context, env mesh.Envelope) error {
	if c.inner != nil {
		if err := c.inner.Handle(ctx, env); err != nil {
			return err
		}
	}
	c.count(env)
	return nil
}

// batchCounted is counted for a batch handler.
type batchCounted struct{ *counted }

func (c batchCounted) HandleBatch(ctx context.Context, envs []mesh.Envelope) error {
	if err := c.inner.(meshd.BatchHandler).HandleBatch(ctx, envs); err != nil {
		return err
	}
	for _, env := range envs {
		c.count(env)
	}
	return nil
}

func consume(t *testing.T, st *localstacktest.Stack, keys map[string]string, agent string, n, batch int, inner meshd.Handler) float64 {
	c := &counted{inner: inner, warmID: "warm-up-" + agent, warm: make(chan struct{})}
	var h meshd.Handler = c
	if _, ok := inner.(meshd.BatchHandler); ok && batch > 1 {
		h = batchCounted{c}
	}
	stateDir := t.TempDir()
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- meshd.Run(ctx, meshd.Config{API: meshclient.New(st.URL, keys[agent]), StateDir: stateDir, Handler: h, Batch: batch,
				HeartbeatEvery: 10 * time.Second, Log: slog.New(slog.DiscardHandler)})
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
	stop := run()
	if _, err := meshclient.New(st.URL, keys["writer"]).Send(context.Background(), meshclient.SendRequest{To: agent, MessageID: c.warmID, Parts: []mesh.Part{{Kind: "text", Text: "warm-up"}}}); err != nil {
		t.Fatal(err)
	}
	drain(t, st)
	select {
	case <-c.warm:
	case <-time.After(time.Minute):
		t.Fatal("the warm-up event was not handled within a minute")
	}
	stop()
	appendPending(t, st.Env.DB, []string{agent}, n, 500)
	drain(t, st)
	stop = run()
	defer stop()
	deadline := time.Now().Add(5 * time.Minute)
	for c.handled.Load() < int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("meshd handled %d of %d in 5 min", c.handled.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return float64(n-1) / time.Duration(c.last.Load()-c.first.Load()).Seconds()
}

// drain runs the stack's dispatcher until nothing is due.
func drain(t *testing.T, st *localstacktest.Stack) {
	for i := 0; ; i++ {
		s, err := st.Dispatcher.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.Recipients == 0 {
			return
		}
		if i > 10_000 {
			t.Fatal("the dispatcher is not draining")
		}
	}
}

var initRE = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)

// measureInit runs built bootstraps under aws-lambda-rie (infra/rie.sh, the
// Lambda build flags) and reads the emulator's INIT REPORT: the time from
// the process start to the runtime's first /next (config, database pool,
// clients), the cold-start share the function controls.
func measureInit(t *testing.T, r *Results) {
	root := repoRoot(t)
	for _, fn := range []string{"health", "auth-token", "send-message", "inbox"} {
		say("function init: %s under aws-lambda-rie", fn)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, filepath.Join(root, "infra", "rie.sh"), "functions/"+fn, "events/"+fn+".json")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "RIE_LOG_LEVEL=info")
		out, err := cmd.CombinedOutput()
		cancel()
		m := initRE.FindSubmatch(out)
		if m == nil {
			t.Errorf("%s: no INIT REPORT in the emulator's log (%v):\n%s", fn, err, tailOf(string(out), 2000))
			continue
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		r.set("init."+fn, v, "ms")
	}
}

func tailOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprint("…", s[len(s)-n:])
}
