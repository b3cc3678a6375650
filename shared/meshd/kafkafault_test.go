package meshd_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// An in-process broker (kfake) lets the test cut Kafka fetches mid-run,
// which the real broker cannot do on demand. The core consumer tests run on
// the real broker (run_test.go).
func TestDeliveryContinuesThroughAKafkaOutageAndRecovery(t *testing.T) {
	f := newFixture(t, false)
	f.topic = "inbox.events"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, f.topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	f.brokers = cluster.ListenAddrs()
	f.api.brokers, f.api.topic = f.brokers, f.topic
	f.prod, err = kafka.NewProducer(context.Background(), kafka.Options{Brokers: f.brokers}, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.prod.Close)

	var down atomic.Bool
	cluster.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if down.Load() {
			return nil, errors.New("broker unreachable"), true // drops the connection
		}
		return nil, nil, false
	})

	e1 := f.api.add(mesh.EventMessage, "alice", "m1")
	e2 := f.api.add(mesh.EventMessage, "alice", "m2")
	f.produce(f.record(e1), f.record(e2))
	h := newRecorder()
	// Skipped offsets are persisted within 20 ms, so the test can wait for
	// the broker's copies of 3..5 to be consumed instead of guessing a time.
	r := f.start(h, func(c *meshd.Config) { quickStalls(c); c.FlushEvery = 20 * time.Millisecond })
	h.waitFor(t, 2, 30*time.Second)

	// Kafka goes away; the API keeps accepting messages.
	down.Store(true)
	e3 := f.api.add(mesh.EventMessage, "alice", "m3")
	e4 := f.api.add(mesh.EventMessage, "alice", "m4")
	h.waitFor(t, 4, 30*time.Second)
	if f.api.servedCount(3) == 0 || f.api.servedCount(4) == 0 {
		t.Error("events 3 and 4 did not come through the inbox API during the outage")
	}

	// Kafka comes back; the dispatcher publishes its backlog (3, 4, now
	// duplicates) and a new event.
	down.Store(false)
	e5 := f.api.add(mesh.EventMessage, "alice", "m5")
	f.produce(f.record(e3), f.record(e4), f.record(e5))
	h.waitFor(t, 5, 30*time.Second)
	// Event 5 may have come through the inbox API (a stall catch-up) before
	// the consumer, backing off after the outage, fetched again.
	for deadline := time.Now().Add(30 * time.Second); f.state().Offset < 4; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the records published after the outage were never consumed: state %+v", f.state())
		}
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, seqs(1, 5)) {
		t.Errorf("handled %v, want 1..5 once each in order", got)
	}
	if st := f.state(); st.LastSeq != 5 || st.Offset != 4 {
		t.Errorf("state %+v, want last_seq 5 and the last record's offset 4", st)
	}
}
