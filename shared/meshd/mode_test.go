package meshd_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// gate is a TCP proxy to the real broker on a fixed local port that starts
// closed (connections refused, as with a broker that is down) and opens on
// demand.
type gate struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{addr: ln.Addr().String(), target: target}
	ln.Close() // closed until open: dials are refused
	t.Cleanup(func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.ln != nil {
			g.ln.Close()
		}
	})
	return g
}

func (g *gate) open(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		t.Fatalf("reopening %s: %v", g.addr, err)
	}
	g.mu.Lock()
	g.ln = ln
	g.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, err := net.Dial("tcp", g.target)
				if err != nil {
					return
				}
				defer b.Close()
				go func() { _, _ = io.Copy(b, c); b.Close() }()
				_, _ = io.Copy(c, b)
			}()
		}
	}()
}

func TestAutoModeMovesBackToKafkaWhenTheBrokerReturns(t *testing.T) {
	f := newFixture(t, true)
	g := newGate(t, f.brokers[0])
	f.api.brokers = []string{g.addr} // the mesh announces a broker that is down
	e1 := f.api.add(mesh.EventMessage, "alice", "m1")
	e2 := f.api.add(mesh.EventMessage, "alice", "m2")
	f.produce(f.record(e1), f.record(e2))
	h := newRecorder()
	r := f.start(h, func(c *meshd.Config) {
		c.Mode = meshd.ModeAuto
		c.ProbeTimeout = 500 * time.Millisecond
		c.ProbeEvery = 200 * time.Millisecond
		c.PollWait = 5 * time.Second
	})
	h.waitFor(t, 2, 20*time.Second)
	if f.api.servedCount(1) == 0 || !strings.Contains(f.logs.String(), "poll mode") {
		t.Fatal("meshd did not start in poll mode with the broker down")
	}

	g.open(t)
	waitUntil(t, "meshd switched to Kafka", 30*time.Second, func() bool {
		return strings.Contains(f.logs.String(), "Kafka is reachable again")
	})
	e3 := f.api.add(mesh.EventMessage, "alice", "m3")
	f.produce(f.record(e3))
	h.waitFor(t, 3, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, seqs(1, 3)) {
		t.Errorf("handled %v", got)
	}
	if n := f.api.servedCount(3); n != 0 {
		t.Errorf("seq 3 came from the inbox API (%d times), not from Kafka", n)
	}
	if st := f.state(); st.Offset != 2 || st.Topic != f.topic {
		t.Errorf("state %+v, want the consumed offset 2 of %s", st, f.topic)
	}
}

// offsetsSeen records the offsets the consumer buffered.
type offsetsSeen struct {
	mu   sync.Mutex
	offs []int64
}

func (o *offsetsSeen) OnFetchRecordBuffered(r *kgo.Record) {
	o.mu.Lock()
	o.offs = append(o.offs, r.Offset)
	o.mu.Unlock()
}

func TestARestartAfterPollModeResumesKafkaAtTheHandledSeq(t *testing.T) {
	f := newFixture(t, true)
	// Five events committed hours apart, published as they came (one batch
	// each), handled through the inbox API while Kafka was out of reach.
	// The fixture's producer fails records whose timestamp is older than its
	// delivery timeout; this one writes them as they are.
	old, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...), kgo.DefaultProduceTopic(f.topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i := 1; i <= 5; i++ {
		env := f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i))
		env.OccurredAt = now.Add(-time.Duration(6-i) * time.Hour)
		f.api.mu.Lock()
		f.api.events[i-1].OccurredAt = env.OccurredAt
		f.api.mu.Unlock()
		rec := f.record(env)
		rec.Timestamp, rec.Partition = env.OccurredAt, f.bobsPartition()
		if err := old.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	first := newRecorder()
	r := f.start(first, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
	first.waitFor(t, 5, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := f.state(); st.Offset != -1 || st.LastSeq != 5 {
		t.Fatalf("state after poll mode %+v, want seq 5 and no offset", st)
	}

	e6 := f.api.add(mesh.EventMessage, "alice", "m6")
	f.produce(f.record(e6))
	seen := &offsetsSeen{}
	second := newRecorder()
	r = f.start(second, func(c *meshd.Config) { c.KafkaOpts = []kgo.Opt{kgo.WithHooks(seen)} })
	second.waitFor(t, 1, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := second.handled(); !slices.Equal(got, []int64{6}) || f.api.servedCount(6) != 0 {
		t.Errorf("second run handled %v (seq 6 served by the inbox %d times), want 6 from Kafka", got, f.api.servedCount(6))
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.offs) == 0 || slices.Min(seen.offs) < 4 {
		t.Errorf("the consumer read offsets %v: it went back before the handled seq 5 (offset 4), towards the start of retention", seen.offs)
	}
}
