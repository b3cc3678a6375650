package meshd_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// expireFromKafka deletes every record of bob's partition, as Kafka's
// retention does while an agent is away: the log start moves past them.
func (f *fixture) expireFromKafka(t *testing.T) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	end, ok := ends.Lookup(f.topic, f.bobsPartition())
	if !ok || end.Err != nil {
		t.Fatalf("end offset of bob's partition: %v", end.Err)
	}
	var to kadm.Offsets
	to.AddOffset(f.topic, f.bobsPartition(), end.Offset, -1)
	res, err := adm.DeleteRecords(ctx, to)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	starts, err := adm.ListStartOffsets(ctx, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := starts.Lookup(f.topic, f.bobsPartition()); s.Offset != end.Offset {
		t.Fatalf("log start of bob's partition is %d, want %d", s.Offset, end.Offset)
	}
}

// addAll commits n events and publishes them to Kafka.
func (f *fixture) addAll(n int, prefix string) {
	for i := 0; i < n; i++ {
		f.produce(f.record(f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("%s%d", prefix, i))))
	}
}

func TestAnAgentOfflinePastRetentionGetsWhatTheMeshStillHolds(t *testing.T) {
	cases := []struct {
		name string
		// outboxFrom is the oldest seq the outbox still holds when meshd
		// returns (0: all of them).
		outboxFrom int64
		// quiet: nothing newer is on Kafka when meshd returns, so no gap
		// shows; the heartbeats' newer seq must bring the rest.
		quiet bool
		want  []int64
		lost  meshd.LostEvents
	}{
		{"past Kafka's retention but within the outbox's, everything comes from the inbox API and then Kafka again",
			0, false, seqs(1, 8), meshd.LostEvents{}},
		{"past Kafka's retention with nothing newer on Kafka, the heartbeats bring the rest from the inbox API and then Kafka again",
			0, true, seqs(1, 7), meshd.LostEvents{}},
		{"past both, the lost events are reported from their first seq and the retained ones delivered",
			5, false, []int64{1, 5, 6, 7, 8}, meshd.LostEvents{FromSeq: 2, ToSeq: 4, Total: 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, true)
			h := newRecorder()
			// A stall is noticed after 2 s: far later than Kafka delivers
			// a record, so what must come from Kafka does.
			fast := func(cfg *meshd.Config) { cfg.HeartbeatEvery, cfg.StallAfter = 50*time.Millisecond, 2*time.Second }
			// Seq 1 is handled; then the agent goes away.
			r := f.start(h, fast)
			f.fence(t, h)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			// Seqs 2-6 are published and expire from Kafka while it is away.
			f.addAll(5, "away")
			f.expireFromKafka(t)
			if c.outboxFrom > 0 {
				f.api.mu.Lock()
				f.api.oldest = c.outboxFrom
				f.api.mu.Unlock()
			}
			if !c.quiet {
				// Seq 7 is on Kafka when it returns: the gap before it
				// shows (the catch-up's page may bring seq 7 itself too).
				f.addAll(1, "back")
			}
			last := c.want[len(c.want)-1]
			r = f.start(h, fast)
			t.Cleanup(func() {
				if t.Failed() {
					t.Log(f.logs.String())
				}
			})
			h.waitForSeq(t, last-1, 30*time.Second)
			// Then it consumes Kafka again: the next seq is never asked of
			// the inbox API.
			f.addAll(1, "after")
			h.waitForSeq(t, last, 30*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if got := h.handled(); !slices.Equal(got, c.want) {
				t.Errorf("handled %v, want %v (in order, once)", got, c.want)
			}
			for _, seq := range c.want {
				// Seqs 2-6 expired from Kafka: what was handled of them came from the API.
				if seq >= 2 && seq <= 6 && f.api.servedCount(seq) == 0 {
					t.Errorf("seq %d, gone from Kafka, was not read from the inbox API", seq)
				}
			}
			if n := f.api.servedCount(last); n != 0 {
				t.Errorf("seq %d was read from the inbox API %d times, want it from Kafka", last, n)
			}
			st := f.state()
			if st.LastSeq != last || st.Topic != f.topic || st.Partition != f.bobsPartition() || st.Offset < 0 {
				t.Errorf("state %+v, want seq %d at an offset of bob's partition of %s", st, last, f.topic)
			}
			got := st.Lost
			got.At = time.Time{}
			if got != c.lost {
				t.Errorf("state's loss %+v, want %+v", st.Lost, c.lost)
			}
			if c.lost.Total == 0 {
				return
			}
			if st.Lost.At.IsZero() {
				t.Error("the loss has no time")
			}
			f.logs.WaitLine(t, time.Second, "expired before they were handled", `"from_seq":2`, `"to_seq":4`, `"lost":3`)
			// A restart still reports it in its heartbeats (the console
			// shows them): the loss is in the state.
			r = f.start(h, fast)
			f.fence(t, h)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			f.api.mu.Lock()
			lost, _ := f.api.lastStats["lost"].(map[string]any)
			f.api.mu.Unlock()
			if lost["events"] != 3.0 || lost["from_seq"] != 2.0 || lost["to_seq"] != 4.0 {
				t.Errorf("the heartbeat reports the loss as %v, want 3 events from seq 2 to 4 (stats %v)", lost, f.api.lastStats)
			}
		})
	}
}
