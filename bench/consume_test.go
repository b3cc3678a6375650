package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// measureConsume times meshd consuming a burst from Kafka: meshd runs and is
// warm, n events are written to the outbox (untimed), then the dispatcher
// drains them while meshd handles them; the rate is n over the time from
// the start of the drain to the last event handled.
func measureConsume(t *testing.T, r *Results) {
	t.Chdir(repoRoot(t)) // the local stack reads template.yaml from the repository
	st := localstacktest.Start(t, localstacktest.Options{Kafka: true, Partitions: 3})
	keys := st.Agents(t, "writer", "bob", "carol")
	st.Befriend(t, "writer", "bob")
	st.Befriend(t, "writer", "carol")
	cases := []struct {
		key, agent string
		n          int
		h          meshd.Handler
	}{
		{"meshd.noop", "bob", sized(20_000, 2_000), nil},
		{"meshd.exec", "carol", sized(1_500, 200), meshd.CommandHandler{Command: []string{"true"}, Timeout: 30 * time.Second}},
	}
	for _, c := range cases {
		say("meshd consume: %d events for %s, handler %s", c.n, c.agent, c.key)
		r.set(c.key, consume(t, st, keys, c.agent, c.n, c.h), "events/s")
	}
}

func consume(t *testing.T, st *localstacktest.Stack, keys map[string]string, agent string, n int, inner meshd.Handler) float64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int64
	warm := make(chan struct{})
	h := meshd.HandlerFunc(func(ctx context.Context, env mesh.Envelope) error {
		if inner != nil {
			if err := inner.Handle(ctx, env); err != nil {
				return err
			}
		}
		if env.MessageID == "warm-up-"+agent {
			close(warm)
			return nil
		}
		handled.Add(1)
		return nil
	})
	done := make(chan error, 1)
	go func() {
		done <- meshd.Run(ctx, meshd.Config{API: meshclient.New(st.URL, keys[agent]), StateDir: t.TempDir(), Handler: h, HeartbeatEvery: 10 * time.Second,
			Log: slog.New(slog.DiscardHandler)})
	}()
	defer func() { cancel(); <-done }()
	if _, err := meshclient.New(st.URL, keys["writer"]).Send(ctx, meshclient.SendRequest{To: agent, MessageID: "warm-up-" + agent, Parts: []mesh.Part{{Kind: "text", Text: "warm-up"}}}); err != nil {
		t.Fatal(err)
	}
	drain(t, st)
	select {
	case <-warm:
	case <-time.After(time.Minute):
		t.Fatal("the warm-up event was not handled within a minute")
	}
	appendPending(t, st.Env.DB, []string{agent}, n, 500)
	start := time.Now()
	drain(t, st)
	deadline := time.Now().Add(5 * time.Minute)
	for handled.Load() < int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("meshd handled %d of %d in 5 min", handled.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return float64(n) / time.Since(start).Seconds()
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
