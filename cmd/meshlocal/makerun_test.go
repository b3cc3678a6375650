package main

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// freePort is a TCP port nothing listens on right now (testenv.FreePort).
func freePort(t *testing.T) string { return strconv.Itoa(testenv.FreePort(t)) }

// bootUntilReady starts Run (make run's code) with the demo and returns its
// base URL, its terminal output so far and a stop function.
func bootUntilReady(t *testing.T, env map[string]string) (string, *testenv.Buffer, func()) {
	t.Helper()
	return boot(t, env, true)
}

// boot starts Run, with or without the demo, waits until it serves and
// returns its base URL, its terminal output and a stop function (also run
// at cleanup).
func boot(t *testing.T, env map[string]string, demo bool) (string, *testenv.Buffer, func()) {
	t.Helper()
	var o, e testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		done <- Run(ctx, Options{Dir: ".", Getenv: func(k string) string { return env[k] }, Out: &o, Stderr: &e, Demo: demo,
			Ready: func(base string) { ready <- base }})
	}()
	var base string
	select {
	case base = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("Run returned before it was ready: %v\n%s\n%s", err, o.String(), e.String())
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatalf("not ready after 2 minutes:\n%s", o.String())
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not stop within 30 s")
			}
		})
	}
	t.Cleanup(stop)
	return base, &o, stop
}

// demoKey is the API key the terminal output prints for agent.
func demoKey(t *testing.T, out, agent string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, agent+" API key") {
			if k := apiKeyRe.FindString(line); k != "" {
				return k
			}
		}
	}
	t.Fatalf("no %s API key in the output:\n%s", agent, out)
	return ""
}

// Two make runs in a row on one state directory: the second prints the
// same demo keys, and a meshd started against the first keeps delivering
// from the (recreated) embedded Kafka topic after the restart, without
// the inbox API's catch-up.
func TestTwoMakeRunsKeepTheDemoKeysAndAMeshdKeepsDelivering(t *testing.T) {
	if testing.Short() {
		t.Skip("boots the whole local mesh twice")
	}
	_, dsn := mysqltest.New(t)
	env := map[string]string{"MYSQL_DSN": dsn, "MESH_HTTP_ADDR": "127.0.0.1:" + freePort(t), "MESH_KFAKE_PORT": freePort(t), "MESH_STATE_DIR": t.TempDir()}

	base, out1, stop1 := bootUntilReady(t, env)
	aliceKey, bobKey := demoKey(t, out1.String(), "alice"), demoKey(t, out1.String(), "bob")

	var mu sync.Mutex
	var handled []int64
	seen := func() []int64 { mu.Lock(); defer mu.Unlock(); return append([]int64(nil), handled...) }
	logs := &testenv.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		ran <- meshd.Run(ctx, meshd.Config{
			API:      meshclient.New(base, bobKey, meshclient.WithRetry(meshclient.RetryPolicy{Base: 100 * time.Millisecond, Max: time.Second, MaxElapsed: 5 * time.Second})),
			StateDir: t.TempDir(), Mode: meshd.ModeKafka, Log: slog.New(slog.NewTextHandler(logs, nil)),
			// No catch-up through the inbox API within the test: what arrives
			// comes from Kafka.
			StallAfter: time.Hour, RetryBase: 100 * time.Millisecond, RetryMax: time.Second,
			Handler: meshd.HandlerFunc(func(_ context.Context, env mesh.Envelope) error {
				mu.Lock()
				handled = append(handled, env.Seq)
				mu.Unlock()
				return nil
			}),
		})
	}()
	t.Cleanup(func() { cancel(); <-ran })
	waitSeq := func(seq int64, within time.Duration) bool {
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if s := seen(); len(s) > 0 && s[len(s)-1] >= seq {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	}
	if !waitSeq(1, 30*time.Second) {
		t.Fatalf("bob's meshd did not handle the first run's demo message; handled %v\n%s", seen(), logs.String())
	}
	stop1()

	_, out2, _ := bootUntilReady(t, env)
	t.Run("the second run prints the same demo keys", func(t *testing.T) {
		if a, b := demoKey(t, out2.String(), "alice"), demoKey(t, out2.String(), "bob"); a != aliceKey || b != bobKey {
			t.Errorf("keys changed across runs")
		}
		if !strings.Contains(out2.String(), "alice existed (API key kept), bob existed (API key kept)") {
			t.Errorf("the output does not say the keys were kept:\n%s", out2.String())
		}
	})
	t.Run("the terminal shows progress lines only: structured log lines stay in the log file", func(t *testing.T) {
		for _, line := range strings.Split(out1.String()+out2.String(), "\n") {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, "{") || strings.HasPrefix(l, "time=") {
				t.Errorf("a log line on the terminal: %s", line)
			}
		}
	})
	t.Run("the meshd started against the first run receives the second run's messages from Kafka", func(t *testing.T) {
		alice := meshclient.New(base, aliceKey)
		if _, err := alice.Send(context.Background(), meshclient.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: "text", Text: "after the restart"}}}); err != nil {
			t.Fatal(err)
		}
		// Seq 2 is the second run's demo message, seq 3 this one.
		if !waitSeq(3, 30*time.Second) {
			t.Fatalf("handled %v, want up to seq 3\n%s", seen(), logs.String())
		}
		if got := seen(); len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
			t.Errorf("handled %v, want [1 2 3]", got)
		}
		if strings.Contains(logs.String(), "fetching the missing events from the inbox API") {
			t.Errorf("meshd filled a gap through the inbox API:\n%s", logs.String())
		}
	})
}
