package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// adminCall sends in as JSON to path with the admin key and decodes the
// answer into out (unless nil).
func adminCall(t *testing.T, base, adminKey, path string, in, out any) {
	t.Helper()
	b, _ := json.Marshal(in)
	req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %s", path, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

// A meshd outside the local mesh, in push mode with only the API's URL and
// its key, keeps its mail across a restart of meshlocal: messages sent just
// before the stop and just after the start (while it reconnects) are all
// handled, seq 1..N once each, in order.
func TestAMeshdInPushModeMissesNothingAcrossAMeshlocalRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("boots the whole local mesh twice")
	}
	_, dsn := mysqltest.New(t)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	addr := "127.0.0.1:" + freePort(t)
	base := "http://" + addr
	env := map[string]string{
		"MYSQL_DSN": dsn, "MESH_HTTP_ADDR": addr, "MESH_STATE_DIR": t.TempDir(),
		"KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_TOPIC": topic, "KAFKA_PARTITIONS": "1",
	}
	_, out, stop1 := boot(t, env, false)
	adminKey := adminKeyRe.FindString(out.String())
	if adminKey == "" {
		t.Fatalf("no admin key in the output:\n%s", out.String())
	}
	keys := map[string]string{}
	for _, id := range []string{"alice", "bob"} {
		var a struct {
			APIKey string `json:"api_key"`
		}
		adminCall(t, base, adminKey, "/v1/admin/agents", map[string]string{"agent_id": id, "name": id}, &a)
		keys[id] = a.APIKey
	}
	adminCall(t, base, adminKey, "/v1/admin/friendships", map[string]string{"a": "alice", "b": "bob"}, nil)

	var mu sync.Mutex
	var got []mesh.Envelope
	handled := func() []mesh.Envelope { mu.Lock(); defer mu.Unlock(); return append([]mesh.Envelope(nil), got...) }
	var modes []string
	logs := &testenv.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		ran <- meshd.Run(ctx, meshd.Config{
			API:      meshclient.New(base, keys["bob"], meshclient.WithRetry(meshclient.RetryPolicy{Base: 50 * time.Millisecond, Max: 500 * time.Millisecond, MaxElapsed: 5 * time.Second})),
			StateDir: t.TempDir(), Mode: meshd.ModePush, Log: slog.New(slog.NewTextHandler(logs, nil)),
			// Only pushes and the reconnect's catch-up bring events.
			StallAfter: time.Hour, RetryBase: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
			PushRetryBase: 50 * time.Millisecond, PushRetryMax: 500 * time.Millisecond, PushDialsPerMinute: 600,
			OnMode: func(_, mode string) { mu.Lock(); modes = append(modes, mode); mu.Unlock() },
			Handler: meshd.HandlerFunc(func(_ context.Context, e mesh.Envelope) error {
				mu.Lock()
				got = append(got, e)
				mu.Unlock()
				return nil
			}),
		})
	}()
	t.Cleanup(func() { cancel(); <-ran })
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 30 s for %s; handled %d\n%s", what, len(handled()), logs.String())
			}
		}
	}
	connects := func() int { return strings.Count(logs.String(), "push connection open") }

	alice := meshclient.New(base, keys["alice"])
	var texts []string
	send := func(n int) {
		t.Helper()
		for range n {
			text := fmt.Sprintf("message %d", len(texts)+1)
			if _, err := alice.Send(context.Background(), meshclient.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: "text", Text: text}}}); err != nil {
				t.Fatalf("send %d: %v", len(texts)+1, err)
			}
			texts = append(texts, text)
		}
	}
	waitFor("meshd's push connection", func() bool { return connects() == 1 })
	send(2)
	waitFor("the first two messages", func() bool { return len(handled()) == 2 })
	// Sent right before the stop: some are still in the outbox, or being
	// pushed, when meshlocal goes.
	send(3)
	stop1()
	boot(t, env, false)
	send(3) // while meshd reconnects
	waitFor("meshd to reconnect to the new process", func() bool { return connects() >= 2 })
	send(2)
	waitFor("every message", func() bool { return len(handled()) >= len(texts) })

	h := handled()
	if len(h) != len(texts) {
		t.Fatalf("handled %d events for %d messages", len(h), len(texts))
	}
	for i, e := range h {
		var body tasks.MessageBody
		var parts []mesh.Part
		_ = json.Unmarshal(e.Body, &body)
		_ = json.Unmarshal(body.Message.Parts, &parts)
		if e.Seq != int64(i+1) || len(parts) != 1 || parts[0].Text != texts[i] {
			t.Fatalf("event %d: seq %d %+v, want seq %d saying %q", i+1, e.Seq, parts, i+1, texts[i])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range modes {
		if m != meshd.ModePush {
			t.Fatalf("meshd delivered in modes %v, want push only", modes)
		}
	}
}
