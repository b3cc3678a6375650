package meshd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// BenchmarkMemoryUnderLag measures meshd's heap while a slow handler leaves
// a large backlog on its Kafka partition: 500 or 2,000 sealed events with
// 16 KiB bodies (8 or 32 MiB) wait on the real broker, and the handler takes
// 1 ms per event, so nearly all of the backlog is lag for the whole run. One
// op is one full run from an empty state directory until the handler has
// seen every event in order. peak-heap-MiB is the highest runtime HeapAlloc
// of the whole test process during the run (sampled every 5 ms, garbage
// included), to compare with backlog-MiB (the bodies; sealed and base64 on
// the broker they are a third larger): memory must track the consumer's
// bounded fetch buffer (4 MiB), not the lag.
func BenchmarkMemoryUnderLag(b *testing.B) {
	const size = 16 << 10
	brokers := kafkatest.Brokers(b)
	sealer := newSealer(b)
	// Two backlogs, 4× apart: the peak must not grow with the lag.
	for _, n := range []int{500, 2000} {
		b.Run(fmt.Sprintf("backlog=%dx%dKiB", n, size>>10), func(b *testing.B) {
			lagRun(b, brokers, sealer, n, size)
		})
	}
}

// lagRun is one case of BenchmarkMemoryUnderLag: n events of size bytes.
func lagRun(b *testing.B, brokers []string, sealer *seal.Sealer, n, size int) {
	const handlerDelay = time.Millisecond
	topic := kafkatest.Topic(b, brokers, 12)
	// The routes meshd calls besides Kafka (token, heartbeat, offline); the
	// fake holds no events, so nothing is ever read through the inbox API.
	_, srv := newFakeAPI(b, "bob", sealer, brokers, topic)
	produceBacklog(b, brokers, topic, sealer, n, size)

	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	b.ReportAllocs()
	var peak uint64
	for b.Loop() {
		var handled, lastSeq atomic.Int64
		done := make(chan struct{})
		h := meshd.HandlerFunc(func(_ context.Context, env mesh.Envelope) error {
			time.Sleep(handlerDelay)
			lastSeq.Store(env.Seq)
			if handled.Add(1) == int64(n) {
				close(done)
			}
			return nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		stopSampling := sampleHeap(&peak)
		runErr := make(chan error, 1)
		go func() {
			runErr <- meshd.Run(ctx, meshd.Config{
				API: meshclient.New(srv.URL, "amk_bench"), StateDir: b.TempDir(), Handler: h, Log: log, Mode: meshd.ModeKafka,
			})
		}()
		select {
		case <-done:
		case err := <-runErr:
			cancel()
			stopSampling()
			b.Fatalf("meshd stopped early after %d events: %v", handled.Load(), err)
		case <-time.After(2 * time.Minute):
			cancel()
			stopSampling()
			b.Fatalf("the handler saw %d of %d events in 2 minutes", handled.Load(), n)
		}
		cancel()
		err := <-runErr
		stopSampling()
		if err != nil {
			b.Fatal(err)
		}
		if handled.Load() != int64(n) || lastSeq.Load() != int64(n) {
			b.Fatalf("handled %d events ending at seq %d, want %d ending at %d", handled.Load(), lastSeq.Load(), n, n)
		}
	}
	const mib = 1 << 20
	b.ReportMetric(float64(peak)/mib, "peak-heap-MiB")
	b.ReportMetric(float64(n*size)/mib, "backlog-MiB")
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N*n)/s, "events/s")
	}
}

// produceBacklog puts n sealed envelopes for bob (seq 1..n, bodies of about
// size bytes) on the topic, as the dispatcher would, and waits for the acks.
func produceBacklog(b *testing.B, brokers []string, topic string, sealer *seal.Sealer, n, size int) {
	b.Helper()
	prod, err := kafka.NewProducer(context.Background(), kafka.Options{Brokers: brokers}, topic)
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	filler := strings.Repeat("x", size)
	for start := 1; start <= n; start += 200 {
		var recs []*kgo.Record
		for seq := start; seq < start+200 && seq <= n; seq++ {
			s := strconv.Itoa(seq)
			body, _ := json.Marshal(map[string]any{"parts": []mesh.Part{{Kind: "text", Text: filler}}})
			env := mesh.Envelope{
				V: mesh.EnvelopeVersion, EventID: "ev-" + s, Seq: int64(seq), Type: mesh.EventMessage, To: "bob", From: "alice",
				TaskID: "task-" + s, ContextID: "ctx-1", MessageID: "msg-" + s, OccurredAt: time.Now().UTC(), KeyEpoch: 1,
			}
			env.Body = body
			key, value, err := sealer.SealEvent(env)
			if err != nil {
				b.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Key: key, Value: value})
		}
		if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(fmt.Errorf("produce the backlog: %w", err))
		}
	}
}

// sampleHeap records the highest HeapAlloc into peak until the returned
// func is called. It collects garbage first, so what the previous setup
// left behind does not count.
func sampleHeap(peak *uint64) (stop func()) {
	runtime.GC()
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			*peak = max(*peak, ms.HeapAlloc)
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(quit); <-finished }
}
