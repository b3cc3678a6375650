package dispatch_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// handed is one record a Pusher received, with the outbox row's delivery
// as another connection saw it at that moment.
type handed struct {
	agent    string
	seq      int64
	value    []byte
	delivery string
}

// recordingPusher records what it is handed. block, when set, holds every
// Push until closed (entered signals the first); panics makes Push panic.
type recordingPusher struct {
	db      *mysql.DB
	block   chan struct{}
	entered chan struct{}
	panics  bool

	mu      sync.Mutex
	got     []handed
	drained bool
}

func (p *recordingPusher) Push(agent string, seq int64, value []byte) {
	if p.entered != nil {
		select {
		case p.entered <- struct{}{}:
		default:
		}
	}
	if p.block != nil {
		<-p.block
	}
	p.mu.Lock()
	panics := p.panics
	p.mu.Unlock()
	if panics {
		panic("injected pusher panic")
	}
	h := handed{agent: agent, seq: seq, value: value}
	if p.db != nil {
		_ = p.db.QueryRow("SELECT "+outbox.DeliveryOfSQL+" FROM outbox_events e LEFT JOIN outbox_queue q ON q.recipient = e.recipient AND q.seq = e.seq WHERE e.recipient = ? AND e.seq = ?", agent, seq).Scan(&h.delivery)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, h)
}

func (p *recordingPusher) Drain(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drained = true
}

func (p *recordingPusher) handed() []handed {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

// drainHandoff ends with Drain, as Run does, so everything handed off has
// reached the pusher.
func drainHandoff(t *testing.T, d *dispatch.Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Run(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

func TestDispatcherHandsPublishedRecordsToThePusher(t *testing.T) {
	t.Run("after its batch commits, each published record is handed over in seq order, byte for byte its Kafka value", func(t *testing.T) {
		f := newDispFixture(t, 1)
		f.agents(t, "alice", "bob")
		for i := 0; i < 4; i++ {
			f.send(t, "x", "alice", 2)
			f.send(t, "x", "bob", 1)
		}
		p := &recordingPusher{db: f.db}
		d := f.dispatcher(nil, nil)
		d.Pusher, d.PerRecipient = p, 3 // several batches per recipient
		f.drain(t, d)
		drainHandoff(t, d)

		kafkaValue := map[string][]byte{}
		for _, r := range kafkatest.ReadTopic(t, f.brokers, f.topic, 12, 10*time.Second) {
			env, err := decode(r)
			if err != nil {
				t.Fatal(err)
			}
			kafkaValue[fmt.Sprint(env.To, env.Seq)] = r.Value
		}
		seqs := map[string][]int64{}
		for _, h := range p.handed() {
			if h.delivery != "sent" {
				t.Fatalf("%s seq %d handed over while its row was %q to others: before its batch committed", h.agent, h.seq, h.delivery)
			}
			if !bytes.Equal(h.value, kafkaValue[fmt.Sprint(h.agent, h.seq)]) {
				t.Fatalf("%s seq %d handed over with a value other than its Kafka record's", h.agent, h.seq)
			}
			seqs[h.agent] = append(seqs[h.agent], h.seq)
		}
		if fmt.Sprint(seqs["alice"]) != "[1 2 3 4 5 6 7 8]" || fmt.Sprint(seqs["bob"]) != "[1 2 3 4]" {
			t.Fatalf("handed over %v, want alice 1..8 and bob 1..4, each once and in order", seqs)
		}
		if !p.drained {
			t.Fatal("Run returned without draining the pusher")
		}
	})

	t.Run("a record Kafka refused is not handed over, nor any of its recipient's after it", func(t *testing.T) {
		f := newDispFixture(t, 1)
		f.agents(t, "alice", "bob")
		f.send(t, "x", "alice", 2)
		f.send(t, "x", "bob", 3)
		faulty := &faultPublisher{real: dispatch.KafkaPublisher{Client: f.prod}, fail: func(env mesh.Envelope) bool { return env.To == "bob" && env.Seq == 2 }}
		p := &recordingPusher{db: f.db}
		d := f.dispatcher(faulty, nil)
		d.Pusher = p
		if _, err := d.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		drainHandoff(t, d) // bob is backed off: nothing more goes
		var got []string
		for _, h := range p.handed() {
			got = append(got, fmt.Sprint(h.agent, h.seq))
		}
		if fmt.Sprint(got) != "[alice1 alice2 bob1]" {
			t.Fatalf("handed over %v, want the sent prefix only: [alice1 alice2 bob1]", got)
		}
	})

	t.Run("a batch that rolls back hands nothing over, and its retry hands each record once", func(t *testing.T) {
		f := newDispFixture(t, 1)
		f.agents(t, "alice", "bob")
		f.send(t, "x", "alice", 2)
		f.send(t, "x", "bob", 2)
		// alice settles first (recipients are held in key order), then
		// bob's settle fails and the whole batch rolls back.
		// sqlgrammar:ignore: a test fixture's trigger, beyond the grammar check's parser
		if _, err := f.db.Exec(`CREATE TRIGGER fail_bob BEFORE DELETE ON outbox_queue FOR EACH ROW
BEGIN IF OLD.recipient = 'bob' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected commit failure'; END IF; END`); err != nil {
			t.Fatal(err)
		}
		p := &recordingPusher{db: f.db}
		d := f.dispatcher(nil, nil)
		d.Pusher = p
		if _, err := d.RunOnce(context.Background()); err == nil {
			t.Fatal("the injected failure did not fail the batch")
		}
		// Run fails the same way, then drains what was handed off.
		if err := d.Run(context.Background(), 0); err == nil {
			t.Fatal("the injected failure did not fail the run")
		}
		if got := p.handed(); len(got) != 0 {
			t.Fatalf("a rolled-back batch handed over %d records, the first %s seq %d", len(got), got[0].agent, got[0].seq)
		}
		// sqlgrammar:ignore: see CREATE TRIGGER above
		if _, err := f.db.Exec("DROP TRIGGER fail_bob"); err != nil {
			t.Fatal(err)
		}
		f.drain(t, d)
		drainHandoff(t, d)
		var got []string
		for _, h := range p.handed() {
			got = append(got, fmt.Sprint(h.agent, h.seq))
		}
		if fmt.Sprint(got) != "[alice1 alice2 bob1 bob2]" {
			t.Fatalf("after the retry handed over %v, want each record once", got)
		}
	})
}

func TestAPusherThatMisbehavesNeverStopsDispatch(t *testing.T) {
	t.Run("a pusher that blocks holds neither batches nor Run, and a full handoff drops and counts", func(t *testing.T) {
		f := newDispFixture(t, 1)
		f.agents(t, "bob")
		n := dispatch.PushHandoffBatches + 4
		f.send(t, "x", "bob", n)
		p := &recordingPusher{block: make(chan struct{}), entered: make(chan struct{}, 1)}
		t.Cleanup(func() { close(p.block) })
		var sink testenv.Buffer
		d := f.dispatcher(nil, &metrics.Sink{W: &sink})
		d.Pusher, d.PerRecipient = p, 1 // one batch per event
		if _, err := d.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-p.entered // the handoff is stuck in Push with batch 1
		for i := 1; i < n; i++ {
			if _, err := d.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if dl := f.deliveries(t, "bob"); dl["sent"] != n {
			t.Fatalf("with the pusher stuck, deliveries %v, want all %d sent", dl, n)
		}
		// Batch 1 is in Push, PushHandoffBatches wait, the rest are dropped.
		if got := metricSum(t, sink.String(), "PushDropped"); got != float64(n-1-dispatch.PushHandoffBatches) {
			t.Fatalf("PushDropped summed to %v, want %d", got, n-1-dispatch.PushHandoffBatches)
		}
		done := make(chan error, 1)
		go func() { done <- d.Run(context.Background(), 0) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run waited for a stuck pusher past its drain bound")
		}
	})

	t.Run("a pusher that panics costs its batch only: dispatch goes on and later batches are handed over", func(t *testing.T) {
		f := newDispFixture(t, 1)
		f.agents(t, "bob")
		f.send(t, "x", "bob", 2)
		p := &recordingPusher{panics: true}
		d := f.dispatcher(nil, nil)
		d.Pusher = p
		f.drain(t, d)
		drainHandoff(t, d)
		if dl := f.deliveries(t, "bob"); dl["sent"] != 2 {
			t.Fatalf("deliveries %v, want both sent despite the panicking pusher", dl)
		}
		p.mu.Lock()
		p.panics = false
		p.mu.Unlock()
		f.send(t, "x", "bob", 1)
		f.drain(t, d)
		drainHandoff(t, d)
		if got := p.handed(); len(got) != 1 || got[0].seq != 3 {
			t.Fatalf("after the panics the pusher got %d records, want seq 3 alone", len(got))
		}
	})
}
