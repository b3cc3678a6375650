package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// gatedPublisher holds every publish until the batch's assumed settle has
// been written, then checks, from another connection, that nothing of the
// batch is committed yet, and only then publishes through next.
type gatedPublisher struct {
	next    dispatch.Publisher
	settled chan struct{}
	check   func()
}

func (p *gatedPublisher) Publish(ctx context.Context, recs []*kgo.Record) []error {
	select {
	case <-p.settled:
		p.check()
	case <-ctx.Done():
	}
	return p.next.Publish(ctx, recs)
}

func TestTheSettleWrittenDuringThePublishCommitsOnlyWhatKafkaAcknowledged(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fail      func(mesh.Envelope) bool
		wantAlice map[string]int
		wantBob   map[string]int
	}{
		{"a batch Kafka takes whole is committed sent, after its acknowledgements", nil,
			map[string]int{"sent": 3}, map[string]int{"sent": 3}},
		{"a record Kafka refuses leaves it and what follows it pending, though the settle had marked them sent",
			func(e mesh.Envelope) bool { return e.To == "bob" && e.Seq == 2 },
			map[string]int{"sent": 3}, map[string]int{"sent": 1, "pending": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newDispFixture(t, 1)
			f.agents(t, "alice", "bob")
			f.send(t, "x", "alice", 3)
			f.send(t, "x", "bob", 3)
			pub := &gatedPublisher{
				next:    &faultPublisher{real: dispatch.KafkaPublisher{Client: f.prod}, fail: tc.fail},
				settled: make(chan struct{}),
			}
			pub.check = func() {
				if dl := f.deliveries(t, "alice"); dl["pending"] != 3 {
					t.Errorf("while Kafka had not answered, alice's deliveries were %v: the settle committed before the acknowledgements", dl)
				}
			}
			d := f.dispatcher(pub, nil)
			dispatch.SetAssumedSettled(d, func() { close(pub.settled) })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := d.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if dl := f.deliveries(t, "alice"); !sameCounts(dl, tc.wantAlice) {
				t.Fatalf("alice's deliveries %v, want %v", dl, tc.wantAlice)
			}
			if dl := f.deliveries(t, "bob"); !sameCounts(dl, tc.wantBob) {
				t.Fatalf("bob's deliveries %v, want %v", dl, tc.wantBob)
			}
			if want := tc.wantAlice["sent"] + tc.wantBob["sent"]; st.Sent != want {
				t.Fatalf("RunOnce counted %d sent, want %d", st.Sent, want)
			}
			var attempts int
			if err := f.db.QueryRow("SELECT attempts FROM dispatch_state WHERE recipient = 'bob'").Scan(&attempts); err != nil {
				t.Fatal(err)
			}
			if want := tc.wantBob["pending"] / 2; attempts != want {
				t.Fatalf("bob's attempts %d, want %d", attempts, want)
			}
		})
	}
}

func sameCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}
