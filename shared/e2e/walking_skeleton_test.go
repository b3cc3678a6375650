// Package e2e_test drives the whole mesh across every tier at once: HTTP
// routes served from template.yaml, the real MariaDB, the dispatcher, the
// real Kafka broker, and meshd running a handler command.
package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// TestWalkingSkeleton sends a message from alice to bob over HTTP and checks
// that bob's handler command receives exactly that message, having travelled
// API → MariaDB (message + outbox, one commit) → dispatcher → Kafka → meshd.
func TestWalkingSkeleton(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	stack := localstacktest.Start(t, localstacktest.Options{Kafka: true, Partitions: 3, Log: log})
	brokers, topic, disp := stack.Brokers, stack.Topic, stack.Dispatcher
	// The dispatcher runs as its schedule would.
	dispCtx, stopDisp := context.WithCancel(ctx)
	dispDone := make(chan error, 1)
	go func() { dispDone <- disp.Run(dispCtx, time.Minute) }()
	defer func() { stopDisp(); <-dispDone }()

	// Bootstrap the graph with the admin key, over HTTP.
	keys := stack.Agents(t, "alice", "bob")
	stack.Befriend(t, "alice", "bob")

	// Bob's meshd consumes its own partition and runs a handler command that
	// stores each event it is given.
	dir := t.TempDir()
	got := filepath.Join(dir, "got.json")
	bobAPI := meshclient.New(stack.URL, keys["bob"])
	runCtx, stopBob := context.WithCancel(ctx)
	bobDone := make(chan error, 1)
	go func() {
		bobDone <- meshd.Run(runCtx, meshd.Config{
			API: bobAPI, StateDir: filepath.Join(dir, "state"), Mode: meshd.ModeKafka, Log: log,
			Handler: meshd.CommandHandler{Command: []string{"sh", "-c", `cat > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"`}, Env: []string{"OUT=" + got}},
		})
	}()
	defer func() { stopBob(); <-bobDone }()

	parts := []mesh.Part{
		{Kind: "text", Text: "Hello bob — ünïcode and \"quotes\" survive"},
		{Kind: "data", Data: json.RawMessage(`{"priority":2,"tags":["a","b"]}`)},
	}
	sent, err := meshclient.New(stack.URL, keys["alice"]).Send(ctx, meshclient.SendRequest{To: "bob", Parts: parts})
	if err != nil {
		t.Fatalf("alice's send: %v", err)
	}

	var raw []byte
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if raw, err = os.ReadFile(got); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bob's handler never ran; log:\n%s", logs.String())
		}
	}
	var ev mesh.Envelope
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatalf("the handler got no envelope: %v\n%s", err, raw)
	}
	if ev.Type != mesh.EventMessage || ev.From != "alice" || ev.To != "bob" || ev.Seq != 1 ||
		ev.MessageID != sent.MessageID || ev.TaskID != sent.TaskID {
		t.Fatalf("handler got %+v, want seq 1 message %s of task %s from alice", ev, sent.MessageID, sent.TaskID)
	}
	var body tasks.MessageBody
	if err := json.Unmarshal(ev.Body, &body); err != nil {
		t.Fatal(err)
	}
	var gotParts []mesh.Part
	if err := json.Unmarshal(body.Message.Parts, &gotParts); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(parts)
	have, _ := json.Marshal(gotParts)
	if !bytes.Equal(want, have) {
		t.Fatalf("handler got parts %s, want exactly %s", have, want)
	}

	// It came through Kafka: meshd recorded a consumed offset, and the record
	// on the topic carries the body sealed, never in clear.
	stopBob()
	<-bobDone
	bobDone <- nil
	st, err := meshd.LoadState(filepath.Join(dir, "state"), "bob")
	if err != nil || st.LastSeq != 1 || st.Offset < 0 || st.Topic != topic {
		t.Fatalf("meshd state %+v (%v): want seq 1 consumed from %s", st, err, topic)
	}
	recs := kafkatest.ReadTopic(t, brokers, topic, 1, 10*time.Second)
	if len(recs) != 1 || bytes.Contains(recs[0].Value, []byte("Hello bob")) {
		t.Fatalf("want one sealed record on %s, got %d records", topic, len(recs))
	}
}
