package dispatch_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

// benchPartitions is the inbox topic's default partition count (config
// KAFKA_PARTITIONS).
const benchPartitions = 12

// BenchmarkDispatcherDrain measures how fast the dispatcher empties the
// outbox into the real Kafka broker (acks=all, idempotent producer): b.N
// pending events spread round-robin over M recipients are appended
// (untimed), then RunOnce runs until nothing is due, each batch sealing
// every body, producing synchronously and marking the rows sent in one
// transaction. One op is one event; events/s is the drain rate. The
// dispatcher runs with its production defaults (up to DefaultRecipients
// recipients sharing DefaultBatchEvents events per batch), so M decides how
// many recipients share a batch.
func BenchmarkDispatcherDrain(b *testing.B) {
	f := newDispFixture(b, benchPartitions)
	db := f.db
	// The system clock, not the fixture's fixed one: the events are appended
	// at the real time.
	d := &dispatch.Dispatcher{
		DB: db, Publisher: dispatch.KafkaPublisher{Client: f.prod}, Topic: f.topic, Sealer: f.sealer,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: &metrics.Sink{W: io.Discard},
	}
	for _, m := range []int{1, 50, 1000} {
		recipients := make([]string, m)
		for i := range recipients {
			recipients[i] = fmt.Sprintf("rcpt-%d-%04d", m, i)
		}
		identitytest.Agents(b, db, recipients...)
		b.Run(fmt.Sprintf("recipients=%d", m), func(b *testing.B) {
			b.StopTimer()
			appendPending(b, db, recipients, b.N)
			b.StartTimer()
			for batches := 0; ; batches++ {
				st, err := d.RunOnce(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if st.Recipients == 0 {
					break
				}
				if st.Failed > 0 || batches > b.N+10 {
					b.Fatalf("the drain is not making progress: %+v after %d batches", st, batches)
				}
			}
			b.StopTimer()
			var pending int
			if err := db.QueryRow("SELECT COUNT(*) FROM outbox_queue").Scan(&pending); err != nil {
				b.Fatal(err)
			}
			if pending != 0 {
				b.Fatalf("%d events still pending after the drain", pending)
			}
			if s := b.Elapsed().Seconds(); s > 0 {
				b.ReportMetric(float64(b.N)/s, "events/s")
			}
		})
	}
}

// appendPending appends n message events round-robin over recipients with
// outbox.Append, 500 per transaction; bodies are shaped like a send's.
func appendPending(b *testing.B, db *mysql.DB, recipients []string, n int) {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	for done := 0; done < n; {
		chunk := min(500, n-done)
		evs := make([]outbox.Event, 0, chunk)
		for i := range chunk {
			to := recipients[(done+i)%len(recipients)]
			id := fmt.Sprintf("%s-%d-%d", to, now.UnixNano(), done+i)
			body, err := json.Marshal(map[string]any{
				"message": map[string]any{"message_id": id, "from": "bench-sender", "created_at": now,
					"parts": []mesh.Part{{Kind: "text", Text: "Please translate the attached release notes into German."}}},
				"task": map[string]any{"task_id": id, "context_id": "ctx-" + id, "initiator": "bench-sender", "recipient": to, "status": mesh.TaskSubmitted},
			})
			if err != nil {
				b.Fatal(err)
			}
			evs = append(evs, outbox.Event{Type: mesh.EventMessage, To: to, From: "bench-sender", TaskID: id, ContextID: "ctx-" + id,
				MessageID: id, OccurredAt: now, Body: body})
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error { return outbox.Append(ctx, tx, evs) }); err != nil {
			b.Fatal(err)
		}
		done += chunk
	}
}
