package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// relayPartitions is the inbox topic's default partition count.
const relayPartitions = 12

// relayEnv is one database and one topic shared by every relay measured, and
// a producer with the project's settings (acks=all, idempotent, no linger).
type relayEnv struct {
	db     *mysql.DB
	topic  string
	prod   *kgo.Client
	sealer *seal.Sealer
}

func newRelayEnv(t testing.TB) *relayEnv {
	db, _ := mysqltest.New(t)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, relayPartitions)
	prod, err := kafka.NewProducer(context.Background(), kafka.Options{Brokers: brokers}, topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	master := make([]byte, seal.KeySize)
	_, _ = rand.Read(master)
	s, err := seal.New(master)
	if err != nil {
		t.Fatal(err)
	}
	return &relayEnv{db: db, topic: topic, prod: prod, sealer: s}
}

// relayRounds is how many times the relays and raw produce are measured:
// a raw produce of 30,000 records lasts a fraction of a second and moved by
// half from one run to the next on a shared machine, so each figure is the
// mean of rounds. Raw produce opens the odd rounds and closes the even
// ones, bracketing the relays as the physical lines bracket meshd.
const relayRounds = 2

// measureRelays runs the relays one after the other on the same database
// and broker, relayRounds times over, and records the mean rate of each.
func measureRelays(t *testing.T, r *Results) {
	e := newRelayEnv(t)
	n := sized(30_000, 3_000)
	wn := sized(10_000, 1_000)
	type figure struct {
		unit   string
		mean   float64
		rounds []string
	}
	figs := map[string]*figure{}
	var keys []string // in the order first measured
	measure := func(key, unit string, v float64) {
		f := figs[key]
		if f == nil {
			f = &figure{unit: unit}
			figs[key] = f
			keys = append(keys, key)
		}
		f.mean += v / relayRounds
		f.rounds = append(f.rounds, fmt.Sprintf("%.0f", v))
	}
	raw := func(round int) {
		say("relay: round %d of %d: raw franz-go produce (acks=all, idempotent), %d records", round, relayRounds, n)
		measure("relay.raw", "records/s", e.rawProduce(t, n))
	}
	// Untimed, so that no timed figure pays for warming up: the producer's
	// first records also fetch metadata and a producer id, and the broker's
	// JVM compiles its produce path over the first tens of thousands.
	const warmProduces = 3
	for range warmProduces {
		e.rawProduce(t, n)
	}
	for round := 1; round <= relayRounds; round++ {
		if round%2 == 1 {
			raw(round)
		}
		for _, m := range []int{1, 50, 1000} {
			say("relay: round %d of %d: project dispatcher, %d events over %d recipients", round, relayRounds, n, m)
			measure(fmt.Sprintf("relay.dispatcher.r%d", m), "events/s", e.dispatcher(t, fmt.Sprintf("relay%d-%d-", m, round), n, m))
		}
		say("relay: round %d of %d: watermill-sql MySQL subscriber -> franz-go, %d messages", round, relayRounds, wn)
		measure("relay.watermill", "events/s", e.watermill(t, fmt.Sprintf("bench_relay_%d", round), wn))
		if round%2 == 0 {
			raw(round)
		}
	}
	list := make([]string, len(keys))
	for i, k := range keys {
		r.set(k, figs[k].mean, figs[k].unit)
		list[i] = fmt.Sprintf("%s %s", k, strings.Join(figs[k].rounds, " / "))
	}
	r.note("Relays: each rate is the mean of %d rounds, each the dispatcher at 1, 50 and 1,000 recipients and watermill in turn, with a raw produce at the start of odd rounds and the end of even ones (after %d records untimed, so the producer and the broker are warm); the rounds' rates: %s.", relayRounds, warmProduces*n, strings.Join(list, "; "))
	sd := sized(5*time.Second, 3*time.Second)
	say("relay: the original design's algorithm (1 s poll, 50 rows one by one) for %v", sd)
	r.set("relay.seed", e.seedAlgorithm(t, sd), "events/s")
}

// dispatcher drains n pending events over m new recipients (ids of prefix)
// with the project's dispatcher at its production defaults and returns
// events/s.
func (e *relayEnv) dispatcher(t *testing.T, prefix string, n, m int) float64 {
	recipients := ids(prefix, m)
	insertAgents(t, e.db, recipients)
	appendPending(t, e.db, recipients, n, 500)
	d := &dispatch.Dispatcher{
		DB: e.db, Publisher: dispatch.KafkaPublisher{Client: e.prod}, Topic: e.topic, Sealer: e.sealer,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: &metrics.Sink{W: io.Discard},
	}
	ctx := context.Background()
	start := time.Now()
	sent := 0
	for batches := 0; ; batches++ {
		st, err := d.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Recipients == 0 {
			break
		}
		if st.Failed > 0 || batches > n {
			t.Fatalf("the dispatcher is not making progress: %+v", st)
		}
		sent += st.Sent
	}
	el := time.Since(start)
	if sent != n {
		t.Fatalf("dispatcher sent %d of %d", sent, n)
	}
	return float64(n) / el.Seconds()
}

// sealedSize is the size of one sealed record value as the dispatcher
// produces it, so the raw produce moves the same bytes.
func (e *relayEnv) sealedRecord(i int) *kgo.Record {
	to := fmt.Sprintf("raw-%03d", i%50)
	now := time.Now().UTC()
	id := fmt.Sprintf("raw-%d", i)
	k, v, err := e.sealer.SealEvent(mesh.Envelope{V: 2, EventID: id, Seq: int64(i), Type: mesh.EventMessage, To: to, From: "bench-sender",
		TaskID: id, ContextID: "ctx-" + id, MessageID: id, OccurredAt: now, Body: messageBody(id, "bench-sender", to, now)})
	if err != nil {
		panic(err)
	}
	return &kgo.Record{Topic: e.topic, Key: k, Value: v}
}

// rawProduce is the limit: n records like the dispatcher's, produced
// asynchronously by the same client settings, waiting for every ack.
func (e *relayEnv) rawProduce(t *testing.T, n int) float64 {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = e.sealedRecord(i)
	}
	var failed atomic.Int64
	start := time.Now()
	for _, rec := range recs {
		e.prod.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
		})
	}
	if err := e.prod.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	if failed.Load() > 0 {
		t.Fatalf("%d raw produces failed", failed.Load())
	}
	return float64(n) / el.Seconds()
}

// watermill publishes n messages into watermill-sql's MySQL table of topic
// (untimed), then times its subscriber forwarding each to Kafka
// (ProduceSync, then Ack), the shape of watermill's forwarder.
func (e *relayEnv) watermill(t *testing.T, topic string, n int) float64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := watermill.NopLogger{}
	schema := wsql.DefaultMySQLSchema{SubscribeBatchSize: 100}
	pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(e.db.DB), wsql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, logger)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for done := 0; done < n; {
		c := min(500, n-done)
		msgs := make([]*message.Message, c)
		for i := range msgs {
			id := fmt.Sprintf("wm-%d", done+i)
			msgs[i] = message.NewMessage(watermill.NewUUID(), message.Payload(messageBody(id, "bench-sender", fmt.Sprintf("wm-%03d", (done+i)%50), now)))
			msgs[i].Metadata.Set("recipient", fmt.Sprintf("wm-%03d", (done+i)%50))
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			t.Fatal(err)
		}
		done += c
	}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(e.db.DB), wsql.SubscriberConfig{
		ConsumerGroup: "bench", SchemaAdapter: schema, OffsetsAdapter: wsql.DefaultMySQLOffsetsAdapter{},
		InitializeSchema: true, PollInterval: 10 * time.Millisecond,
	}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	start := time.Now()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Minute)
	for got := 0; got < n; got++ {
		select {
		case msg := <-ch:
			rec := &kgo.Record{Topic: e.topic, Key: []byte(msg.Metadata.Get("recipient")), Value: msg.Payload}
			if err := e.prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
			msg.Ack()
		case <-deadline:
			t.Fatalf("watermill forwarded %d of %d in 5 min", got, n)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// The original design's relay (ARCHITECTURE.md's predecessor): every second
// it reads up to 50 pending rows in id order and, one by one, produces each
// to Kafka and marks it sent (or backs it off). Its own table: it keys
// events by an auto-increment id, not a per-recipient seq.
const (
	seedTableSQL = `CREATE TABLE seed_outbox (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  aggregate_key VARCHAR(64) NOT NULL,
  payload JSON NOT NULL,
  status VARCHAR(16) NOT NULL DEFAULT 'pending',
  retries INT NOT NULL DEFAULT 0,
  next_run_at DATETIME(6) NOT NULL,
  KEY seed_due (status, next_run_at, id)
)`
	seedInsertSQL  = `INSERT INTO seed_outbox (aggregate_key, payload, next_run_at) VALUES (?, ?, ?)`
	seedSelectSQL  = `SELECT id, aggregate_key, payload FROM seed_outbox WHERE status = 'pending' AND next_run_at <= ? ORDER BY id LIMIT 50`
	seedSentSQL    = `UPDATE seed_outbox SET status = 'sent' WHERE id = ?`
	seedBackoffSQL = `UPDATE seed_outbox SET retries = retries + 1, next_run_at = ? WHERE id = ?`
)

// seedAlgorithm runs the original relay for d over a backlog larger than it
// can drain and returns events/s.
func (e *relayEnv) seedAlgorithm(t *testing.T, d time.Duration) float64 {
	ctx := context.Background()
	if _, err := e.db.Exec(seedTableSQL); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	backlog := int(d/time.Second)*50 + 500
	for i := 0; i < backlog; i++ {
		id := fmt.Sprintf("seed-%d", i)
		if _, err := e.db.Exec(seedInsertSQL, fmt.Sprintf("seed-%03d", i%50), string(messageBody(id, "bench-sender", "x", now)), now); err != nil {
			t.Fatal(err)
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	start := time.Now()
	sent := 0
	for time.Since(start) < d {
		rows, err := e.db.QueryContext(ctx, seedSelectSQL, time.Now().UTC())
		if err != nil {
			t.Fatal(err)
		}
		type ev struct {
			id       int64
			key, val []byte
		}
		var evs []ev
		for rows.Next() {
			var x ev
			if err := rows.Scan(&x.id, &x.key, &x.val); err != nil {
				t.Fatal(err)
			}
			evs = append(evs, x)
		}
		rows.Close()
		for _, x := range evs {
			if err := e.prod.ProduceSync(ctx, &kgo.Record{Topic: e.topic, Key: x.key, Value: x.val}).FirstErr(); err != nil {
				_, _ = e.db.ExecContext(ctx, seedBackoffSQL, time.Now().UTC().Add(time.Second), x.id)
				continue
			}
			if _, err := e.db.ExecContext(ctx, seedSentSQL, x.id); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		<-tick.C
	}
	return float64(sent) / time.Since(start).Seconds()
}
