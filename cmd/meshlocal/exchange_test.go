package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// serveOnly runs the local mesh without the demo (no meshd), calls use
// with its URL, and stops it.
func serveOnly(t *testing.T, env map[string]string, use func(base string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	ready := make(chan string, 1)
	var out testenv.Buffer
	go func() {
		done <- Run(ctx, Options{Dir: ".", Getenv: func(k string) string { return env[k] }, Out: &out, Stderr: &testenv.Buffer{},
			Ready: func(base string) { ready <- base }})
	}()
	select {
	case base := <-ready:
		use(base)
	case err := <-done:
		t.Fatalf("Run returned before it was ready: %v\n%s", err, out.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("not ready after 2 minutes:\n%s", out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The issue 7 report: bob's task was completed from another client while
// his meshd was away; his reply to it then fails for good (409
// task_terminal). meshd used to retry that event forever, and every later
// event, the next demo message included, waited behind it.
func TestTheDemoIsNotStuckBehindAReplyThatFailsForGood(t *testing.T) {
	if testing.Short() {
		t.Skip("boots the whole local mesh three times")
	}
	_, dsn := mysqltest.New(t)
	state := t.TempDir()
	env := map[string]string{"MYSQL_DSN": dsn, "MESH_HTTP_ADDR": "127.0.0.1:0", "MESH_KFAKE_PORT": "0", "MESH_STATE_DIR": state}
	out, _ := runMesh(t, env)
	keys := regexp.MustCompile(`(alice|bob) API key\s+(amk_[A-Za-z0-9_-]+)`).FindAllStringSubmatch(out, -1)
	if len(keys) != 2 {
		t.Fatalf("demo keys not found in:\n%s", out)
	}
	key := map[string]string{keys[0][1]: keys[0][2], keys[1][1]: keys[1][2]}

	// With bob's meshd down: alice asks, bob finishes the task from
	// another client without replying.
	serveOnly(t, env, func(base string) {
		ctx := context.Background()
		res, err := meshclient.New(base, key["alice"]).Send(ctx, meshclient.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: "text", Text: "a question bob answers elsewhere"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := meshclient.New(base, key["bob"]).UpdateStatus(ctx, res.TaskID, meshclient.StatusRequest{Status: mesh.TaskCompleted}); err != nil {
			t.Fatal(err)
		}
	})

	out3, _ := runMesh(t, env)
	if !strings.Contains(out3, "exchange complete") || strings.Contains(out3, "FAILED") {
		t.Errorf("the demo did not get past the event whose reply fails for good:\n%s", out3)
	}
	dls, err := meshd.ListDeadLetters(filepath.Join(state, "meshlocal", "meshd"), "bob")
	if err != nil || len(dls) != 1 || dls[0].Reason != meshd.ReasonPermanent || !strings.Contains(dls[0].Error, "task_terminal") {
		t.Errorf("bob's parked events %+v (%v), want the one whose reply got 409 task_terminal", dls, err)
	}
}
