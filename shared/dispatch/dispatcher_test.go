package dispatch_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/seal"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// dispFixture is a database, a real Kafka topic and a dispatcher wired to both.
type dispFixture struct {
	db      *mysql.DB
	brokers []string
	topic   string
	sealer  *seal.Sealer
	prod    *kgo.Client
	clock   *testenv.Clock // the dispatcher's time, moved on by the backoff tests
	loadSeq atomic.Int64
}

func newDispFixture(t testing.TB, partitions int32) *dispFixture {
	t.Helper()
	db, _ := mysqltest.New(t)
	return newDispFixtureOn(t, db, kafkatest.Brokers(t), partitions)
}

// newDispFixtureOn is newDispFixture on a given database and Kafka cluster.
func newDispFixtureOn(t testing.TB, db *mysql.DB, brokers []string, partitions int32) *dispFixture {
	t.Helper()
	topic := kafkatest.Topic(t, brokers, partitions)
	master := make([]byte, seal.KeySize)
	_, _ = rand.Read(master)
	s, err := seal.New(master)
	if err != nil {
		t.Fatal(err)
	}
	prod, err := kafka.NewProducer(context.Background(), kafka.Options{Brokers: brokers}, topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &dispFixture{db: db, brokers: brokers, topic: topic, sealer: s, prod: prod, clock: testenv.NewClockAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))}
}

func (f *dispFixture) dispatcher(p dispatch.Publisher, sink *metrics.Sink) *dispatch.Dispatcher {
	if p == nil {
		p = dispatch.KafkaPublisher{Client: f.prod}
	}
	if sink == nil {
		sink = &metrics.Sink{W: &bytes.Buffer{}}
	}
	return &dispatch.Dispatcher{DB: f.db, Publisher: p, Topic: f.topic, Sealer: f.sealer, Clock: f.clock.Now, Metrics: sink}
}

// agents creates the agents with identity.CreateAgent (through
// identitytest, so they hold every row a real agent has) and registers them
// as recipients decode can open records for.
func (f *dispFixture) agents(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		recipients.Store(f.sealer.RoutingID(id), recipient{id, f.sealer})
	}
	identitytest.Agents(t, f.db, ids...)
}

// recipients maps the routing ids of the agents the fixtures created to
// those agents (routing ids come from each fixture's random master key, so
// fixtures never collide).
var recipients sync.Map // routing id -> recipient

type recipient struct {
	id     string
	sealer *seal.Sealer
}

// decode opens a record of the topic as its recipient would (with its key
// of the record's epoch), after checking that the record shows nothing in
// clear: no headers, and a value of exactly {v, key_epoch, sealed}.
func decode(rec *kgo.Record) (mesh.Envelope, error) {
	r, ok := recipients.Load(string(rec.Key))
	if !ok {
		return mesh.Envelope{}, fmt.Errorf("record key %q is no routing id of a known agent", rec.Key)
	}
	if len(rec.Headers) > 0 {
		return mesh.Envelope{}, fmt.Errorf("record carries headers %v", rec.Headers)
	}
	var v seal.Record
	if err := json.Unmarshal(rec.Value, &v); err != nil {
		return mesh.Envelope{}, err
	}
	to := r.(recipient)
	env, err := seal.OpenEvent(map[int][]byte{v.KeyEpoch: to.sealer.AgentKey(to.id, v.KeyEpoch)}, string(rec.Key), rec.Value)
	if err == nil && env.To != to.id {
		err = fmt.Errorf("record under %s's routing id holds an event for %q", to.id, env.To)
	}
	return env, err
}

// send appends one message event per recipient in its own transaction.
func (f *dispFixture) send(t *testing.T, from, to string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := f.append(from, to, fmt.Sprintf("m-%s-%s-%d", from, to, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// sendQuiet appends one event for to, retrying a transient failure; for
// load generators outside the test goroutine.
func (f *dispFixture) sendQuiet(to string) {
	id := fmt.Sprintf("m-load-%s-%d", to, f.loadSeq.Add(1))
	for i := 0; i < 5 && f.append("load", to, id) != nil; i++ {
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *dispFixture) append(from, to, messageID string) error {
	body, _ := json.Marshal(map[string]any{"text": from + "->" + to + " " + messageID})
	return f.db.InTx(context.Background(), func(tx *sql.Tx) error {
		return outbox.Append(context.Background(), tx, []outbox.Event{{
			Type: mesh.EventMessage, To: to, From: from, TaskID: "t-" + to, ContextID: "c-" + to,
			MessageID: messageID, OccurredAt: f.clock.Now(), Body: body,
		}})
	})
}

func (f *dispFixture) drain(t *testing.T, d *dispatch.Dispatcher) {
	t.Helper()
	for i := 0; i < 100; i++ {
		st, err := d.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Recipients == 0 {
			return
		}
	}
	t.Fatal("dispatcher did not drain in 100 batches")
}

// waitUnheld waits until no transaction holds recipient's dispatch_state
// row, by taking its lock and letting it go (a lock wait, bounded by
// innodb_lock_wait_timeout, not a sleep).
func (f *dispFixture) waitUnheld(t *testing.T, recipient string) {
	t.Helper()
	tx, err := f.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var r string
	if err := tx.QueryRow("SELECT recipient FROM dispatch_state WHERE recipient = ? FOR UPDATE", recipient).Scan(&r); err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
}

func (f *dispFixture) deliveries(t *testing.T, recipient string) map[string]int {
	t.Helper()
	rows, err := f.db.Query("SELECT "+outbox.DeliveryOfSQL+" AS d, COUNT(*) FROM outbox_events e LEFT JOIN outbox_queue q ON q.recipient = e.recipient AND q.seq = e.seq WHERE e.recipient = ? GROUP BY d", recipient)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var d string
		var n int
		if err := rows.Scan(&d, &n); err != nil {
			t.Fatal(err)
		}
		out[d] = n
	}
	return out
}

// seqsOnKafka reads every record of the topic and returns, per recipient, the
// seqs in partition order, checking each record against the envelope contract.
func (f *dispFixture) seqsOnKafka(t *testing.T, partitions int32, want int) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	recs := kafkatest.ReadTopic(t, f.brokers, f.topic, want, 10*time.Second)
	if len(recs) != want {
		t.Fatalf("Kafka holds %d records, want %d", len(recs), want)
	}
	// Records of one partition come in offset order; recipients never span partitions.
	{
		for _, r := range recs {
			env, err := decode(r)
			if err != nil {
				t.Fatalf("recipient cannot open its event: %v", err)
			}
			if string(r.Key) != f.sealer.RoutingID(env.To) {
				t.Fatalf("record key %q is not the routing id of %q", r.Key, env.To)
			}
			if got := kafka.PartitionFor(string(r.Key), int(partitions)); got != r.Partition {
				t.Fatalf("record for %s on partition %d, murmur2 of its routing id says %d", env.To, r.Partition, got)
			}
			out[env.To] = append(out[env.To], env.Seq)
		}
	}
	return out
}

func TestDispatcher(t *testing.T) {
	t.Run("publishes each recipient's events once, in seq order, sealed for that recipient", func(t *testing.T) {
		f := newDispFixture(t, 3)
		f.agents(t, "alice", "bob", "carol")
		for i := 0; i < 5; i++ { // interleave writers so ids and seqs differ in order
			f.send(t, "alice", "bob", 3)
			f.send(t, "bob", "carol", 2)
			f.send(t, "carol", "alice", 1)
		}
		d := f.dispatcher(nil, nil)
		d.PerRecipient = 4 // several batches per recipient
		f.drain(t, d)
		got := f.seqsOnKafka(t, 3, 30)
		for r, n := range map[string]int{"bob": 15, "carol": 10, "alice": 5} {
			if len(got[r]) != n {
				t.Fatalf("%s: %d records on Kafka, want %d", r, len(got[r]), n)
			}
			for i, s := range got[r] {
				if s != int64(i+1) {
					t.Fatalf("%s: records carry seqs %v, want 1..%d in order", r, got[r], n)
				}
			}
			if dl := f.deliveries(t, r); dl["sent"] != n || len(dl) != 1 {
				t.Fatalf("%s: outbox deliveries %v, want all %d sent", r, dl, n)
			}
		}
	})

	t.Run("an event still marked pending in its row is queued, published in order with the queued ones, and rewritten in place", func(t *testing.T) {
		f := newDispFixture(t, 1)
		f.agents(t, "alice", "bob")
		f.send(t, "alice", "bob", 3)
		// Seqs 1-2 as a function of the previous version (or a redrive)
		// leaves them: marked pending, not queued; seq 3 queued.
		if _, err := f.db.Exec("UPDATE outbox_events SET delivery = 'pending' WHERE recipient = 'bob' AND seq <= 2"); err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.Exec("DELETE FROM outbox_queue WHERE recipient = 'bob' AND seq <= 2"); err != nil {
			t.Fatal(err)
		}
		f.drain(t, f.dispatcher(nil, nil))
		if got := f.seqsOnKafka(t, 1, 3)["bob"]; !slices.Equal(got, []int64{1, 2, 3}) {
			t.Fatalf("bob's records carry seqs %v, want 1, 2, 3", got)
		}
		var settled, grown int
		if err := f.db.QueryRow("SELECT COUNT(*), COALESCE(SUM(LENGTH(delivery) <> LENGTH('pending')), 0) FROM outbox_events WHERE delivery = 'sent'").Scan(&settled, &grown); err != nil {
			t.Fatal(err)
		}
		if settled != 3 || grown != 0 {
			t.Fatalf("%d rows sent, %d of them with a delivery value of another length than 'pending'", settled, grown)
		}
		if dl := f.deliveries(t, "bob"); dl["sent"] != 3 || len(dl) != 1 {
			t.Fatalf("bob's outbox deliveries %v, want all 3 sent", dl)
		}
	})

	t.Run("a batch of more recipients than one settle text takes every event it published out of the queue, and only those", func(t *testing.T) {
		f := newDispFixture(t, 1)
		n := 2*dispatch.MarkSentChunk + 1 // three settle texts
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("r-%03d", i)
		}
		f.agents(t, append(ids, "zed")...)
		events := make([]outbox.Event, n)
		for i := range events {
			events[i] = outbox.Event{Type: mesh.EventMessage, To: ids[i], From: "zed", TaskID: "t-" + ids[i], ContextID: "c-" + ids[i],
				MessageID: fmt.Sprintf("m-%d", i), OccurredAt: f.clock.Now(), Body: json.RawMessage(`{"text":"hi"}`)}
		}
		if err := f.db.InTx(context.Background(), func(tx *sql.Tx) error { return outbox.Append(context.Background(), tx, events) }); err != nil {
			t.Fatal(err)
		}
		f.send(t, ids[0], "zed", 1) // a later recipient's event, left for the next batch
		d := f.dispatcher(nil, nil)
		d.Recipients = n
		st, err := d.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Recipients != n || st.Sent != n {
			t.Fatalf("batch %+v, want the %d recipients' events sent", st, n)
		}
		var queued []string
		rows, err := f.db.Query("SELECT recipient FROM outbox_queue")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var r string
			if err := rows.Scan(&r); err != nil {
				t.Fatal(err)
			}
			queued = append(queued, r)
		}
		rows.Close()
		if !slices.Equal(queued, []string{"zed"}) {
			t.Fatalf("queued after the batch: %v, want only zed's event", queued)
		}
	})

	t.Run("an other recipient's key cannot open an event", func(t *testing.T) {
		f := newDispFixture(t, 1)
		f.agents(t, "alice", "bob")
		f.send(t, "alice", "bob", 1)
		f.drain(t, f.dispatcher(nil, nil))
		recs := kafkatest.ReadTopic(t, f.brokers, f.topic, 1, 5*time.Second)
		if len(recs) != 1 {
			t.Fatalf("want 1 record, got %d", len(recs))
		}
		var v seal.Record
		if err := json.Unmarshal(recs[0].Value, &v); err != nil {
			t.Fatal(err)
		}
		if env, err := seal.OpenEvent(map[int][]byte{v.KeyEpoch: f.sealer.AgentKey("alice", v.KeyEpoch)}, string(recs[0].Key), recs[0].Value); err == nil {
			t.Fatalf("alice opened bob's event: %+v", env)
		}
		if env, err := decode(recs[0]); err != nil || env.To != "bob" {
			t.Fatalf("bob cannot open his event: %+v, %v", env, err)
		}
	})

	t.Run("two dispatchers running at once keep every recipient's order and publish nothing twice", func(t *testing.T) {
		f := newDispFixture(t, 3)
		var ids []string
		for i := 0; i < 8; i++ {
			ids = append(ids, fmt.Sprintf("agent-%d", i))
		}
		f.agents(t, ids...)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for w := 0; w < 2; w++ {
			d := f.dispatcher(nil, nil)
			d.Recipients, d.PerRecipient = 3, 2 // small batches force the two to contend
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					if _, err := d.RunOnce(ctx); err != nil && ctx.Err() == nil {
						errs <- err
						return
					}
				}
			}()
		}
		for round := 0; round < 10; round++ { // writers keep committing while dispatchers run
			for _, id := range ids {
				f.send(t, "writer", id, 1)
			}
		}
		// Let the dispatchers finish, then stop them.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			var pending int
			_ = f.db.QueryRow("SELECT COUNT(*) FROM outbox_queue").Scan(&pending)
			if pending == 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got := f.seqsOnKafka(t, 3, 80)
		for _, id := range ids {
			want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
			if fmt.Sprint(got[id]) != fmt.Sprint(want) {
				t.Fatalf("%s: Kafka holds seqs %v, want %v", id, got[id], want)
			}
		}
	})

	t.Run("a failing event holds back only its own recipient, backs off 5 s × 2^n and is dead-lettered after 10 attempts", func(t *testing.T) {
		f := newDispFixture(t, 1)
		f.agents(t, "alice", "bob")
		f.send(t, "x", "bob", 3)
		f.send(t, "x", "alice", 2)
		faulty := &faultPublisher{real: dispatch.KafkaPublisher{Client: f.prod}, fail: func(env mesh.Envelope) bool { return env.To == "bob" && env.Seq == 1 }}
		var sink bytes.Buffer
		d := f.dispatcher(faulty, &metrics.Sink{W: &sink})
		backoff := 5 * time.Second
		for attempt := 1; attempt <= 10; attempt++ {
			if _, err := d.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if dl := f.deliveries(t, "alice"); dl["sent"] != 2 {
				t.Fatalf("attempt %d: alice's events must flow regardless of bob: %v", attempt, dl)
			}
			if attempt == 10 {
				break
			}
			if dl := f.deliveries(t, "bob"); dl["pending"] != 3 {
				t.Fatalf("attempt %d: bob's events must all wait behind seq 1: %v", attempt, dl)
			}
			// Just before the backoff ends nothing is retried...
			f.clock.Advance(backoff - time.Millisecond)
			before := faulty.calls("bob")
			if _, err := d.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if faulty.calls("bob") != before {
				t.Fatalf("attempt %d: bob retried before its %v backoff ended", attempt, backoff)
			}
			f.clock.Advance(time.Millisecond)
			backoff *= 2
		}
		dl := f.deliveries(t, "bob")
		if dl["failed"] != 1 {
			t.Fatalf("after 10 attempts seq 1 must be dead-lettered: %v", dl)
		}
		var lastErr sql.NullString
		_ = f.db.QueryRow("SELECT last_error FROM outbox_events WHERE recipient = 'bob' AND seq = 1").Scan(&lastErr)
		if !strings.Contains(lastErr.String, "injected") {
			t.Fatalf("dead letter must keep its error, got %q", lastErr.String)
		}
		f.drain(t, d)
		if dl := f.deliveries(t, "bob"); dl["sent"] != 2 || dl["failed"] != 1 {
			t.Fatalf("after the dead letter the rest of bob's events go: %v", dl)
		}
		// The alarm sums the metric: it must count the dead letter, not just exist.
		if got := metricSum(t, sink.String(), "OutboxDeadLetters"); got != 1 {
			t.Fatalf("OutboxDeadLetters summed to %v over the run, want 1 (one event dead-lettered)", got)
		}
	})

	t.Run("Kafka down then back: nothing is lost and order holds", func(t *testing.T) {
		f := newDispFixture(t, 1)
		f.agents(t, "bob")
		f.send(t, "x", "bob", 5)
		// A producer aimed at a port where no broker listens: every publish fails.
		dead, err := kafka.NewProducer(context.Background(), kafka.Options{Brokers: []string{"127.0.0.1:1"}}, f.topic)
		if err != nil {
			t.Fatal(err)
		}
		defer dead.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		st, err := f.dispatcher(dispatch.KafkaPublisher{Client: dead}, nil).RunOnce(ctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		if st.Sent != 0 {
			t.Fatalf("sent %d events to a dead broker", st.Sent)
		}
		if dl := f.deliveries(t, "bob"); dl["pending"] != 5 {
			t.Fatalf("events must stay pending while Kafka is down: %v", dl)
		}
		// The dead run ended with its context, and database/sql rolls such
		// a transaction back from its own goroutine, possibly after RunOnce
		// has returned: until then it holds bob, whom the next dispatcher
		// would skip (SKIP LOCKED).
		f.waitUnheld(t, "bob")
		f.clock.Advance(5 * time.Second)
		f.drain(t, f.dispatcher(nil, nil))
		if got := f.seqsOnKafka(t, 1, 5)["bob"]; fmt.Sprint(got) != "[1 2 3 4 5]" {
			t.Fatalf("after recovery Kafka holds %v, want [1 2 3 4 5]", got)
		}
	})

	t.Run("a dispatcher killed after publishing but before committing leaves its events pending for the next one", func(t *testing.T) {
		f := newDispFixture(t, 1)
		f.agents(t, "bob")
		f.send(t, "x", "bob", 3)
		crash := &faultPublisher{real: dispatch.KafkaPublisher{Client: f.prod}, panicAfter: true}
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the injected crash did not happen")
				}
			}()
			_, _ = f.dispatcher(crash, nil).RunOnce(context.Background())
		}()
		if dl := f.deliveries(t, "bob"); dl["pending"] != 3 {
			t.Fatalf("a crash before commit must leave events pending: %v", dl)
		}
		f.drain(t, f.dispatcher(nil, nil))
		// Kafka now holds the batch twice; consumers drop the repeat by seq.
		if got := f.seqsOnKafka(t, 1, 6)["bob"]; fmt.Sprint(got) != "[1 2 3 1 2 3]" {
			t.Fatalf("Kafka holds %v, want the batch then its republication", got)
		}
		if dl := f.deliveries(t, "bob"); dl["sent"] != 3 {
			t.Fatalf("after the second dispatcher all are sent: %v", dl)
		}
	})
}

// faultPublisher wraps the real Kafka publisher: it fails chosen records
// without sending them, or crashes after a real publish.
type faultPublisher struct {
	real       dispatch.Publisher
	fail       func(mesh.Envelope) bool
	panicAfter bool
	mu         sync.Mutex
	byTo       map[string]int
}

func (p *faultPublisher) calls(to string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byTo[to]
}

func (p *faultPublisher) Publish(ctx context.Context, recs []*kgo.Record) []error {
	errs := make([]error, len(recs))
	var pass []*kgo.Record
	var idx []int
	p.mu.Lock()
	if p.byTo == nil {
		p.byTo = map[string]int{}
	}
	for i, r := range recs {
		env, _ := decode(r)
		p.byTo[env.To]++
		if p.fail != nil && p.fail(env) {
			errs[i] = fmt.Errorf("injected failure for %s seq %d", env.To, env.Seq)
			continue
		}
		pass = append(pass, r)
		idx = append(idx, i)
	}
	p.mu.Unlock()
	for j, err := range p.real.Publish(ctx, pass) {
		errs[idx[j]] = err
	}
	if p.panicAfter {
		panic("injected crash between publish and commit")
	}
	return errs
}

// TestDispatcherServesEveryRecipientUnderLoad proves a batch does not always
// start at the alphabetically first recipients: while they keep receiving
// events, a later recipient still gets its turn instead of starving.
func TestDispatcherServesEveryRecipientUnderLoad(t *testing.T) {
	f := newDispFixture(t, 1)
	f.agents(t, "a", "b", "c")
	d := f.dispatcher(nil, nil)
	d.Recipients = 2
	f.send(t, "x", "a", 1)
	f.send(t, "x", "b", 1)
	f.send(t, "x", "c", 1)
	for round := 1; round <= 3; round++ {
		if _, err := d.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if f.deliveries(t, "c")["sent"] == 1 {
			return
		}
		// a and b get new mail between batches, as under sustained load.
		f.send(t, "x", "a", 1)
		f.send(t, "x", "b", 1)
	}
	t.Fatalf("c was never published in 3 batches of 2 while a and b kept receiving: %v", f.deliveries(t, "c"))
}

func TestABatchSharesItsEventsAmongTheRecipientsItHolds(t *testing.T) {
	for _, tc := range []struct {
		name       string
		recipients []string
		perRcpt    int // 0: the default
		want       map[string]int
	}{
		{"a recipient alone takes the whole batch", []string{"alice"}, 0, map[string]int{"alice": 6}},
		{"three recipients take an equal share each", []string{"alice", "bob", "carol"}, 0, map[string]int{"alice": 2, "bob": 2, "carol": 2}},
		{"PerRecipient caps a share", []string{"alice"}, 4, map[string]int{"alice": 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newDispFixture(t, 1)
			f.agents(t, tc.recipients...)
			for _, r := range tc.recipients {
				f.send(t, "x", r, 10)
			}
			d := f.dispatcher(nil, nil)
			d.BatchEvents, d.PerRecipient = 6, tc.perRcpt
			st, err := d.RunOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for r, n := range tc.want {
				if got := f.deliveries(t, r)["sent"]; got != n {
					t.Fatalf("%s: %d events sent by one batch, want %d", r, got, n)
				}
				total += n
			}
			if st.Sent != total {
				t.Fatalf("the batch reports %d sent, want %d", st.Sent, total)
			}
		})
	}
}

func TestAFailureAfterAPublishedPrefixSettlesThePrefixAlone(t *testing.T) {
	f := newDispFixture(t, 1)
	f.agents(t, "alice", "bob")
	f.send(t, "x", "bob", 3)
	f.send(t, "x", "alice", 2)
	failing := true
	faulty := &faultPublisher{real: dispatch.KafkaPublisher{Client: f.prod}, fail: func(env mesh.Envelope) bool { return failing && env.To == "bob" && env.Seq == 2 }}
	d := f.dispatcher(faulty, nil)
	state := func() (attempts int, lastErr sql.NullString) {
		t.Helper()
		if err := f.db.QueryRow("SELECT attempts, last_error FROM dispatch_state WHERE recipient = 'bob'").Scan(&attempts, &lastErr); err != nil {
			t.Fatal(err)
		}
		return attempts, lastErr
	}
	if _, err := d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Run("the acknowledged prefix is sent, the failed event and the ones after it stay pending", func(t *testing.T) {
		if dl := f.deliveries(t, "bob"); dl["sent"] != 1 || dl["pending"] != 2 {
			t.Fatalf("bob's deliveries %v, want seq 1 sent and seqs 2-3 pending", dl)
		}
		if dl := f.deliveries(t, "alice"); dl["sent"] != 2 {
			t.Fatalf("alice's deliveries %v, want both sent in the same batch", dl)
		}
		if a, e := state(); a != 1 || !e.Valid {
			t.Fatalf("bob's state: attempts %d, last_error %v; want 1 attempt and the error", a, e)
		}
	})
	t.Run("once the retry goes through, the recipient's backoff is cleared", func(t *testing.T) {
		failing = false
		f.clock.Advance(time.Minute)
		f.drain(t, d)
		if dl := f.deliveries(t, "bob"); dl["sent"] != 3 {
			t.Fatalf("bob's deliveries %v, want all 3 sent", dl)
		}
		if a, e := state(); a != 0 || e.Valid {
			t.Fatalf("bob's state after the retry: attempts %d, last_error %v; want 0 and none", a, e)
		}
	})
}
