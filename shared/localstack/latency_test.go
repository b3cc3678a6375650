package localstack_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/localstack"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/metrics"
)

var (
	latency         = flag.Bool("latency", false, "run BenchmarkDeliveryLatency (minutes long; make latency)")
	latencyDuration = flag.Duration("latency.duration", 3*time.Minute, "how long each rate of BenchmarkDeliveryLatency sends")
)

// BenchmarkDeliveryLatency measures what an agent waits between its send's 2xx
// and the recipient's handler, through the local stack as `make run` runs it:
// every route and every schedule of template.yaml (the dispatcher's runs
// overlapping as on AWS), the real Kafka broker, and meshd for the recipient.
// It reports p50/p95/p99/max per rate and checks order. Minutes long, so it
// runs only with -latency (make latency); figures, not a pass/fail timing.
func BenchmarkDeliveryLatency(b *testing.B) {
	if !*latency {
		b.Skip("a report of several minutes: run it with make latency (go test -bench DeliveryLatency -args -latency)")
	}
	for _, rate := range []int{1, 50} {
		b.Run(fmt.Sprintf("%d msg/s for %v", rate, *latencyDuration), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				measureLatency(b, rate, *latencyDuration)
			}
		})
	}
}

func measureLatency(b *testing.B, rate int, d time.Duration) {
	st := localstacktest.Start(b, localstacktest.Options{Kafka: true, Partitions: 3})
	// Senders of at most 10 msg/s each stay clear of the per-agent rate limit.
	senders := (rate + 9) / 10
	var ids []string
	for i := 0; i < senders; i++ {
		ids = append(ids, fmt.Sprintf("sender-%d", i))
	}
	keys := st.Agents(b, append(ids, "bob")...)
	for _, id := range ids {
		st.Befriend(b, id, "bob")
	}

	st.Dispatcher.Metrics = &metrics.Sink{W: io.Discard}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every schedule of the template, fired as meshlocal fires them.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		served <- (&localstack.Stack{Template: st.Template, Registry: st.Registry}).Serve(ctx, ln)
	}()
	defer func() { cancel(); <-served }()

	var mu sync.Mutex
	acked := map[string]time.Time{} // message_id -> when its send got its 2xx
	var lat []time.Duration
	var seqs []int64
	handled := make(chan struct{}, 1<<16)
	warm := make(chan struct{})
	bob := meshclient.New(st.URL, keys["bob"])
	h := meshd.HandlerFunc(func(_ context.Context, env mesh.Envelope) error {
		now := time.Now()
		if env.Type != mesh.EventMessage {
			return nil
		}
		if env.MessageID == "warm-up" {
			close(warm)
			return nil
		}
		mu.Lock()
		if at, ok := acked[env.MessageID]; ok {
			lat = append(lat, now.Sub(at))
		} else {
			lat = append(lat, 0) // handled before its send returned
		}
		seqs = append(seqs, env.Seq)
		mu.Unlock()
		handled <- struct{}{}
		return nil
	})
	meshdDone := make(chan error, 1)
	go func() {
		meshdDone <- meshd.Run(ctx, meshd.Config{API: bob, StateDir: b.TempDir(), Handler: h, HeartbeatEvery: 10 * time.Second})
	}()
	defer func() { cancel(); <-meshdDone }()
	// One message through the whole path before measuring: meshd is
	// consuming and every connection is open.
	if _, err := meshclient.New(st.URL, keys[ids[0]]).Send(ctx, meshclient.SendRequest{To: "bob", MessageID: "warm-up", Parts: []mesh.Part{{Kind: "text", Text: "warm-up"}}}); err != nil {
		b.Fatal(err)
	}
	select {
	case <-warm:
	case <-time.After(2 * time.Minute):
		b.Fatal("the warm-up message was not handled within 2 min")
	}

	total := rate * int(d/time.Second)
	per := total / senders
	b.ResetTimer()
	var wg sync.WaitGroup
	for s, id := range ids {
		c := meshclient.New(st.URL, keys[id])
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second * time.Duration(senders) / time.Duration(rate))
			defer tick.Stop()
			for i := 0; i < per; i++ {
				msgID := fmt.Sprintf("lat-%d-%d", s, i)
				_, err := c.Send(ctx, meshclient.SendRequest{To: "bob", MessageID: msgID, Parts: []mesh.Part{{Kind: "text", Text: msgID}}})
				if err != nil {
					b.Errorf("send %s: %v", msgID, err)
					return
				}
				mu.Lock()
				acked[msgID] = time.Now()
				mu.Unlock()
				<-tick.C
			}
		}()
	}
	wg.Wait()
	want := per * senders
	deadline := time.After(2 * time.Minute)
	for n := 0; n < want; n++ {
		select {
		case <-handled:
		case <-deadline:
			b.Fatalf("%d of %d messages handled 2 min after the last send", n, want)
		}
	}
	b.StopTimer()

	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			b.Errorf("handled out of order: seq %d after %d", seqs[i], seqs[i-1])
			break
		}
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	b.ReportMetric(float64(q(0.50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(q(0.95).Milliseconds()), "p95-ms")
	b.ReportMetric(float64(q(0.99).Milliseconds()), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
	b.Logf("%d msg/s for %v: %d handled in order; 2xx→handler p50 %v, p95 %v, p99 %v, max %v",
		rate, d, len(lat), q(0.50), q(0.95), q(0.99), lat[len(lat)-1])
}
