package faults_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// TestRelayRateAtReplication3AgainstReplication1 measures (a figure, no
// target) the dispatcher's relay rate into a topic of replication 3 with
// min.insync.replicas 2, as the project creates it on a cluster of three,
// against a topic of replication 1 on the same cluster, back to back in
// rounds so the machine's noise falls on both.
func TestRelayRateAtReplication3AgainstReplication1(t *testing.T) {
	c := startCluster(t)
	c.must(t, "up")
	t.Setenv("KAFKA_BROKERS", strings.Join(c.brokers, ","))
	db, _ := mysqltest.New(t)
	repl3 := kafkatest.Topic(t, c.brokers, partitions)
	c.healthy(t, repl3)
	repl1 := "faults.relay.r1." + fmt.Sprint(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.adm.CreateTopic(ctx, partitions, 1, nil, repl1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.adm.DeleteTopics(context.Background(), repl1) })
	master := make([]byte, seal.KeySize)
	_, _ = rand.Read(master)
	sealer, err := seal.New(master)
	if err != nil {
		t.Fatal(err)
	}
	const n, m, rounds = 3000, 50, 3
	rates := map[string][]float64{}
	for round := range rounds {
		for _, topic := range []string{repl3, repl1} {
			prod, err := kafka.NewProducer(ctx, kafka.Options{Brokers: c.brokers}, topic)
			if err != nil {
				t.Fatal(err)
			}
			to := make([]string, m)
			for i := range to {
				to[i] = fmt.Sprintf("relay%d-%s-%03d", round, topic[len(topic)-6:], i)
			}
			insertAgents(t, db, to)
			appendPending(t, db, to, n)
			d := &dispatch.Dispatcher{DB: db, Publisher: dispatch.KafkaPublisher{Client: prod}, Topic: topic, Sealer: sealer,
				Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: &metrics.Sink{W: io.Discard}}
			start, sent := time.Now(), 0
			for batches := 0; sent < n; batches++ {
				st, err := d.RunOnce(context.Background())
				if err != nil || st.Failed > 0 || batches > n {
					t.Fatalf("the dispatcher is not making progress: %+v %v", st, err)
				}
				sent += st.Sent
			}
			key := "replication 3"
			if topic == repl1 {
				key = "replication 1"
			}
			rates[key] = append(rates[key], float64(n)/time.Since(start).Seconds())
			prod.Close()
		}
	}
	r3, r1 := median(rates["replication 3"]), median(rates["replication 1"])
	t.Logf("relay rate: replication 3 %.0f events/s, replication 1 %.0f events/s (medians of %d rounds of %d events over %d recipients)", r3, r1, rounds, n, m)
	figure("- relay rate (dispatcher, %d events over %d recipients, median of %d): replication 3 + min.insync.replicas 2 %.0f events/s, replication 1 %.0f events/s (ratio %.2f)",
		n, m, rounds, r3, r1, r3/r1)
}

// insertAgents creates the agents (and their inbox counters) directly.
func insertAgents(t *testing.T, db *mysql.DB, ids []string) {
	t.Helper()
	now := time.Now().UTC()
	for _, id := range ids {
		if _, err := db.Exec("INSERT INTO agents (agent_id, name, created_at) VALUES (?, ?, ?)", id, id, now); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("INSERT INTO inbox_counters (recipient, last_seq) VALUES (?, 0)", id); err != nil {
			t.Fatal(err)
		}
	}
}

// appendPending appends n message events round-robin over recipients with
// outbox.Append, 500 a transaction.
func appendPending(t *testing.T, db *mysql.DB, recipients []string, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	for done := 0; done < n; {
		c := min(500, n-done)
		evs := make([]outbox.Event, 0, c)
		for i := range c {
			to := recipients[(done+i)%len(recipients)]
			id := fmt.Sprintf("%s-%d", to, done+i)
			body, _ := json.Marshal(map[string]any{
				"message": map[string]any{"message_id": id, "from": "relay-sender", "created_at": now,
					"parts": []mesh.Part{{Kind: "text", Text: "Please translate the attached release notes into German."}}},
				"task": map[string]any{"task_id": id, "context_id": "ctx-" + id, "initiator": "relay-sender", "recipient": to, "status": mesh.TaskSubmitted},
			})
			evs = append(evs, outbox.Event{Type: mesh.EventMessage, To: to, From: "relay-sender", TaskID: id, ContextID: "ctx-" + id,
				MessageID: id, OccurredAt: now, Body: body})
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error { return outbox.Append(ctx, tx, evs) }); err != nil {
			t.Fatal(err)
		}
		done += c
	}
}
