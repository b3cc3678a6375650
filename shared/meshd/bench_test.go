package meshd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
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

// BenchmarkConsume measures meshd's own consume rate on a filled partition:
// n small sealed events wait on the real broker before meshd starts, so no
// producer is inside the figure, and the rate is timed from the first to
// the last event the handler saw (start-up excluded). With the no-op
// handler each event costs one durable mark (compare BenchmarkStateSave);
// with `true` one process start and one mark; with --batch 100 and a
// handler that reads its stdin, one start and one mark per 100 events.
func BenchmarkConsume(b *testing.B) {
	cases := []struct {
		name  string
		n     int
		batch int
		h     meshd.Handler
		line  func(b *testing.B) // the physical line it is held to, run between meshd's runs
	}{
		{"noop", 5000, 1, nil, physFdatasync},
		{"exec", 500, 1, meshd.CommandHandler{Command: []string{"true"}}, physSpawn},
		{"exec-batch100", 5000, 100, meshd.CommandHandler{Command: []string{"sh", "-c", "cat >/dev/null"}}, nil},
	}
	brokers := kafkatest.Brokers(b)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) { consumeRun(b, brokers, c.n, c.batch, c.h, c.line) })
	}
}

// physRuns is how many operations one physical-line measurement times.
const physRuns = 200

// physFdatasync times physRuns of what one mark costs at the least: a
// 512-byte pwrite into one of two slots of a preallocated file, then
// fdatasync. It reports the rate as fdatasync/s.
func physFdatasync(b *testing.B) {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "phys.state"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 1024), 0); err != nil {
		b.Fatal(err)
	}
	rec := make([]byte, 512)
	for i := range physRuns {
		rec[0] = byte(i)
		if _, err := f.WriteAt(rec, int64(i%2)*512); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
	}
}

// physSpawn times physRuns process starts of `true` as meshd starts a
// handler at the least: its own process group, a 1 KiB stdin.
func physSpawn(b *testing.B) {
	stdin := bytes.Repeat([]byte("x"), 1024)
	for range physRuns {
		cmd := exec.Command("true")
		cmd.Stdin = bytes.NewReader(stdin)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// countingHandler counts what its inner handler (if any) handled.
type countingHandler struct {
	inner meshd.Handler
	count func(n int)
}

func (c countingHandler) Handle(ctx context.Context, env mesh.Envelope) error {
	if c.inner != nil {
		if err := c.inner.Handle(ctx, env); err != nil {
			return err
		}
	}
	c.count(1)
	return nil
}

type countingBatchHandler struct{ countingHandler }

func (c countingBatchHandler) HandleBatch(ctx context.Context, envs []mesh.Envelope) error {
	if err := c.inner.(meshd.BatchHandler).HandleBatch(ctx, envs); err != nil {
		return err
	}
	c.count(len(envs))
	return nil
}

// consumeRun runs meshd over n events per op. With a physical line, the line
// is timed before each op too (interleaved, so the ratio survives a loaded
// machine) and reported as line/s and the meshd rate as %-of-line.
func consumeRun(b *testing.B, brokers []string, n, batch int, inner meshd.Handler, line func(*testing.B)) {
	sealer := newSealer(b)
	topic := kafkatest.Topic(b, brokers, 12)
	_, srv := newFakeAPI(b, "bob", sealer, brokers, topic)
	produceBacklog(b, brokers, topic, sealer, n, 64)
	log := slog.New(slog.DiscardHandler)
	var total, lineTook time.Duration
	for b.Loop() {
		if line != nil {
			b.StopTimer()
			t0 := time.Now()
			line(b)
			lineTook += time.Since(t0)
			b.StartTimer()
		}
		var handled atomic.Int64
		var first time.Time
		done := make(chan time.Time, 1)
		ch := countingHandler{inner: inner, count: func(k int) {
			if handled.Add(int64(k)) == int64(k) {
				first = time.Now()
			}
			if handled.Load() == int64(n) {
				done <- time.Now()
			}
		}}
		var h meshd.Handler = ch
		if batch > 1 {
			h = countingBatchHandler{ch}
		}
		ctx, cancel := context.WithCancel(context.Background())
		runErr := make(chan error, 1)
		go func() {
			runErr <- meshd.Run(ctx, meshd.Config{API: meshclient.New(srv.URL, "amk_bench"), StateDir: b.TempDir(), Handler: h, Log: log, Mode: meshd.ModeKafka, Batch: batch})
		}()
		select {
		case last := <-done:
			total += last.Sub(first)
		case err := <-runErr:
			cancel()
			b.Fatalf("meshd stopped early after %d events: %v", handled.Load(), err)
		case <-time.After(2 * time.Minute):
			cancel()
			b.Fatalf("the handler saw %d of %d events in 2 minutes", handled.Load(), n)
		}
		cancel()
		if err := <-runErr; err != nil {
			b.Fatal(err)
		}
	}
	rate := float64(b.N*(n-1)) / total.Seconds()
	b.ReportMetric(rate, "events/s")
	if line != nil {
		lineRate := float64(b.N*physRuns) / lineTook.Seconds()
		b.ReportMetric(lineRate, "line/s")
		b.ReportMetric(100*rate/lineRate, "%-of-line")
	}
}
