package dispatch_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// recordsOnTopic counts the records Kafka holds on the fixture's topic (one
// partition, written by this test alone: its end offset is the count).
func (f *dispFixture) recordsOnTopic(t *testing.T) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		n += o.Offset
	})
	return n
}

// deadlock is the error MariaDB and MySQL give a transaction chosen as a
// deadlock victim: mysql.InTx retries it.
var deadlock = &mysqldriver.MySQLError{Number: mysql.ErrDeadlock, Message: "Deadlock found when trying to get lock; try restarting transaction"}

func TestABatchIsPublishedOnceWhenItsSettleDeadlocks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int64 // settles that deadlock, the batch's own first
		want     string
	}{
		{"a deadlock in the settle after the publish settles the batch as sent without publishing it again", 1, "sent"},
		{"a deadlock in the settle and in the settle redone after it is settled by the third attempt, still with one publish", 2, "sent"},
		{"a settle that keeps deadlocking returns the error, leaves the rows pending and publishes nothing more, and the next run publishes them again", 1000, "pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newDispFixture(t, 1)
			f.agents(t, "alice", "bob")
			f.send(t, "x", "alice", 3)
			f.send(t, "x", "bob", 2)
			pub := &faultPublisher{real: dispatch.KafkaPublisher{Client: f.prod}}
			pusher := &recordingPusher{db: f.db}
			d := f.dispatcher(pub, nil)
			d.Pusher = pusher
			var settles atomic.Int64
			dispatch.SetSettleFault(d, func() error {
				if settles.Add(1) <= tc.failures {
					return deadlock
				}
				return nil
			})

			st, err := d.RunOnce(context.Background())
			if pub.calls("alice") != 3 || pub.calls("bob") != 2 {
				t.Fatalf("published alice's events %d times and bob's %d times, want 3 and 2: a deadlock after the publish published the batch again", pub.calls("alice"), pub.calls("bob"))
			}
			if n := f.recordsOnTopic(t); n != 5 {
				t.Fatalf("Kafka holds %d records, want the batch's 5 once", n)
			}
			if dl, dl2 := f.deliveries(t, "alice"), f.deliveries(t, "bob"); dl[tc.want] != 3 || dl2[tc.want] != 2 {
				t.Fatalf("deliveries alice %v, bob %v: want every row %s", dl, dl2, tc.want)
			}
			if tc.want == "pending" {
				if err == nil || !mysql.IsRetryable(err) {
					t.Fatalf("RunOnce returned %v, want the deadlock", err)
				}
				// At least once: once the deadlocks end, the next run
				// publishes the rows again and settles them.
				dispatch.SetSettleFault(d, nil)
				drainHandoff(t, d)
				if dl := f.deliveries(t, "alice"); dl["sent"] != 3 || pub.calls("alice") != 6 {
					t.Fatalf("after the deadlocks ended: alice's deliveries %v, published %d times, want sent once republished", dl, pub.calls("alice"))
				}
				// Only the committed second batch is pushed.
				if got := pusher.handed(); len(got) != 5 {
					t.Fatalf("pushed %d records, want the 5 of the batch that committed", len(got))
				}
				return
			}
			drainHandoff(t, d) // nothing is due any more: this only drains the pushes
			if err != nil || st.Sent != 5 || st.Recipients != 2 {
				t.Fatalf("RunOnce = %+v, %v; want 5 sent to 2 recipients", st, err)
			}
			if n := settles.Load(); n != tc.failures+1 {
				t.Fatalf("settled %d times, want %d", n, tc.failures+1)
			}
			got := pusher.handed()
			if len(got) != 5 {
				t.Fatalf("pushed %d records, want the 5 settled ones once", len(got))
			}
			for _, h := range got {
				if h.delivery != "sent" {
					t.Fatalf("pushed %s seq %d while it was %q: a push must follow the commit", h.agent, h.seq, h.delivery)
				}
			}
			if fmt.Sprint(f.seqsOnKafka(t, 1, 5)) != "map[alice:[1 2 3] bob:[1 2]]" {
				t.Fatalf("Kafka holds %v, want alice [1 2 3] and bob [1 2] in order", f.seqsOnKafka(t, 1, 5))
			}
		})
	}
}

func TestTheSettleRedoneAfterADeadlockLeavesARecipientSettledSinceAlone(t *testing.T) {
	f := newDispFixture(t, 1)
	f.agents(t, "alice", "bob")
	f.send(t, "x", "alice", 3)
	f.send(t, "x", "bob", 2)
	pub := &faultPublisher{real: dispatch.KafkaPublisher{Client: f.prod}}
	d := f.dispatcher(pub, nil)
	var settles atomic.Int64
	dispatch.SetSettleFault(d, func() error {
		if settles.Add(1) > 1 {
			return nil
		}
		// Between the batch's publish and its settle, alice's first event
		// is settled by someone else (as an overlapping run would once this
		// transaction rolls back); then the settle deadlocks.
		if _, err := f.db.Exec("DELETE FROM outbox_queue WHERE recipient = 'alice' AND seq = 1"); err != nil {
			t.Error(err)
		}
		return deadlock
	})
	if _, err := d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pub.calls("alice") != 3 || pub.calls("bob") != 2 {
		t.Fatalf("published alice's events %d times and bob's %d times, want once each", pub.calls("alice"), pub.calls("bob"))
	}
	if dl := f.deliveries(t, "bob"); dl["sent"] != 2 {
		t.Fatalf("bob's deliveries %v, want both sent by the redone settle", dl)
	}
	// alice's rows are no longer the batch's to settle: the rest stays
	// pending for whoever holds her next (published again, dropped by seq).
	if dl := f.deliveries(t, "alice"); dl["sent"] != 1 || dl["pending"] != 2 {
		t.Fatalf("alice's deliveries %v, want seq 1 sent by the other and 2-3 left pending", dl)
	}
}
