// Package e2e_test drives the whole mesh across every tier at once: HTTP
// routes served from template.yaml, the real MariaDB, the dispatcher, the
// real Kafka broker, and meshd running a handler command.
package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/localstack"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

func randB64(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// TestWalkingSkeleton sends a message from alice to bob over HTTP and checks
// that bob's handler command receives exactly that message, having travelled
// API → MariaDB (message + outbox, one commit) → dispatcher → Kafka → meshd.
func TestWalkingSkeleton(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, dsn := mysqltest.New(t)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 3)

	adminKey := randB64(24)
	cfg, err := config.Load(func(k string) string {
		return map[string]string{
			"MYSQL_DSN":             dsn,
			"MESH_ADMIN_KEY":        adminKey,
			"MESH_JWT_KEYS":         "k1:" + randB64(32),
			"MESH_INBOX_MASTER_KEY": randB64(32),
			"KAFKA_BROKERS":         strings.Join(brokers, ","),
			"KAFKA_TOPIC":           topic,
		}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	env, err := app.New(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer env.DB.Close()
	disp, err := dispatch.NewKafkaDispatcher(ctx, env.DB, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := localstack.NewRegistry(env, localstack.Deps{Dispatcher: disp})
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := localstack.LoadTemplate(filepath.Join("..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := localstack.NewServer(tpl, reg.HTTP, log)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(srv)
	defer api.Close()
	// The dispatcher runs as its schedule would.
	dispCtx, stopDisp := context.WithCancel(ctx)
	dispDone := make(chan error, 1)
	go func() { dispDone <- disp.Run(dispCtx, time.Minute) }()
	defer func() { stopDisp(); <-dispDone }()

	// Bootstrap the graph with the admin key, over HTTP.
	keys := map[string]string{}
	for _, id := range []string{"alice", "bob"} {
		var out struct {
			APIKey string `json:"api_key"`
		}
		adminCall(t, api.URL, adminKey, "/v1/admin/agents", map[string]string{"agent_id": id, "name": id}, &out)
		keys[id] = out.APIKey
	}
	adminCall(t, api.URL, adminKey, "/v1/admin/friendships", map[string]string{"a": "alice", "b": "bob"}, nil)

	// Bob's meshd consumes its own partition and runs a handler command that
	// stores each event it is given.
	dir := t.TempDir()
	got := filepath.Join(dir, "got.json")
	bobAPI := meshclient.New(api.URL, keys["bob"])
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
	sent, err := meshclient.New(api.URL, keys["alice"]).Send(ctx, meshclient.SendRequest{To: "bob", Parts: parts})
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
		var p bytes.Buffer
		_, _ = p.ReadFrom(resp.Body)
		t.Fatalf("POST %s: %s %s", path, resp.Status, p.String())
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}
