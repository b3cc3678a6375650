package localstack_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/apigwlocal"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/metrics"
)

var (
	latency         = flag.Bool("latency", false, "run BenchmarkDeliveryLatency (minutes long; make latency)")
	latencyDuration = flag.Duration("latency.duration", 3*time.Minute, "how long each rate of BenchmarkDeliveryLatency sends")
	latencyRates    = flag.String("latency.rates", "1,50", "comma-separated rates (msg/s) of BenchmarkDeliveryLatency")
	latencyExec     = flag.Bool("latency.exec", false, "split each rate between a recipient with the in-process no-op handler and one whose meshd runs an exec handler (true)")
	latencyOut      = flag.String("latency.out", "", "append every latency measured, one JSON line per rate, mode and handler, to this file (bench/ reads it for its report)")
	latencyModes    = flag.String("latency.modes", "push,kafka,poll", "comma-separated delivery modes of meshd measured side by side in each rate (push, kafka, poll)")
)

// BenchmarkDeliveryLatency measures what an agent waits between its send's 2xx
// and the recipient's handler, through the local stack as `make run` runs it:
// every route and every schedule of template.yaml (the dispatcher's runs
// overlapping as on AWS), the real Kafka broker, and meshd for the recipient.
// Each delivery mode of -latency.modes gets its own recipient (its meshd
// pinned to that mode) in the same run, so push, Kafka and poll share the
// stack, the dispatcher and the load they are compared under. It reports
// p50/p95/p99/max per rate, mode and handler and checks order. Minutes long,
// so it runs only with -latency (make latency); figures, not a pass/fail
// timing.
func BenchmarkDeliveryLatency(b *testing.B) {
	if !*latency {
		b.Skip("a report of several minutes: run it with make latency (go test -bench DeliveryLatency -args -latency)")
	}
	for _, f := range strings.Split(*latencyRates, ",") {
		rate, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || rate <= 0 {
			b.Fatalf("-latency.rates: %q is not a positive rate", f)
		}
		b.Run(fmt.Sprintf("%d msg/s for %v", rate, *latencyDuration), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				measureLatency(b, rate, *latencyDuration)
			}
		})
	}
}

// maxInFlightPerSender bounds one sender agent's sends waiting for their 2xx
// at once. A sender sends 10 msg/s, so up to 800 ms of send latency keeps
// its schedule; past that the measured rate falls short and says so.
const maxInFlightPerSender = 8

// latencyRecipient is one measured recipient: its meshd's handler and what
// it saw.
type latencyRecipient struct {
	id, mode, handler string
	h                 meshd.Handler
	warm              chan struct{}
	// inMode is closed when meshd first reports mode; left counts its
	// reports of another mode after that (a measurement of the wrong path).
	inMode chan struct{}
	left   int
	lat    []time.Duration
	sent   []time.Time // when each of lat's messages got its 2xx
	seqs   []int64
}

// latencyModeList parses -latency.modes.
func latencyModeList(b *testing.B) []string {
	var modes []string
	for _, f := range strings.Split(*latencyModes, ",") {
		m := strings.TrimSpace(f)
		switch m {
		case meshd.ModePush, meshd.ModeKafka, meshd.ModePoll:
		default:
			b.Fatalf("-latency.modes: %q is not push, kafka or poll", f)
		}
		if slices.Contains(modes, m) {
			b.Fatalf("-latency.modes: %q twice", m)
		}
		modes = append(modes, m)
	}
	return modes
}

func measureLatency(b *testing.B, rate int, d time.Duration) {
	modes := latencyModeList(b)
	// Push needs the stack's WebSocket API announced in the token; Kafka
	// mode and the dispatcher need the broker.
	st := localstacktest.Start(b, localstacktest.Options{Kafka: true, Partitions: 3, Push: true})
	// Senders of at most 10 msg/s each stay clear of the per-agent rate limit.
	senders := (rate + 9) / 10
	var ids []string
	for i := 0; i < senders; i++ {
		ids = append(ids, fmt.Sprintf("sender-%d", i))
	}
	var rcpts []*latencyRecipient
	for _, m := range modes {
		rcpts = append(rcpts, &latencyRecipient{id: "noop-" + m, mode: m, handler: "noop"})
		if *latencyExec {
			// The exec handler as meshd runs a MESH_HANDLER line: a process
			// per event (true reads nothing and exits 0).
			rcpts = append(rcpts, &latencyRecipient{id: "exec-" + m, mode: m, handler: "exec", h: meshd.CommandHandler{Command: []string{"true"}, Timeout: 30 * time.Second}})
		}
	}
	all := append([]string{}, ids...)
	for _, r := range rcpts {
		all = append(all, r.id)
	}
	keys := st.Agents(b, all...)
	// Friendships straight through identity: every sender with a recipient
	// per mode and handler is more than the admin routes' burst allows.
	for _, id := range ids {
		for _, r := range rcpts {
			if _, _, err := st.Env.Identity.AdminCreateFriendship(context.Background(), id, r.id); err != nil {
				b.Fatalf("befriend %s and %s: %v", id, r.id, err)
			}
		}
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
		served <- (&apigwlocal.Stack{Template: st.Template, Registry: st.Registry}).Serve(ctx, ln)
	}()
	defer func() { cancel(); <-served }()

	var mu sync.Mutex
	acked := map[string]time.Time{} // message_id -> when its send got its 2xx
	handled := make(chan struct{}, 1<<16)
	meshdDone := make(chan error, len(rcpts))
	for _, r := range rcpts {
		r.warm, r.inMode = make(chan struct{}), make(chan struct{})
		onMode := func(_, m string) {
			mu.Lock()
			defer mu.Unlock()
			select {
			case <-r.inMode:
				if m != r.mode {
					r.left++
				}
			default:
				if m == r.mode {
					close(r.inMode)
				}
			}
		}
		h := meshd.HandlerFunc(func(ctx context.Context, env mesh.Envelope) error {
			if r.h != nil {
				if err := r.h.Handle(ctx, env); err != nil {
					return err
				}
			}
			now := time.Now()
			if env.Type != mesh.EventMessage {
				return nil
			}
			if strings.HasPrefix(env.MessageID, "warm-up") {
				close(r.warm)
				return nil
			}
			mu.Lock()
			if at, ok := acked[env.MessageID]; ok {
				r.lat, r.sent = append(r.lat, now.Sub(at)), append(r.sent, at)
			} else {
				r.lat, r.sent = append(r.lat, 0), append(r.sent, now) // handled before its send returned
			}
			r.seqs = append(r.seqs, env.Seq)
			mu.Unlock()
			handled <- struct{}{}
			return nil
		})
		api := meshclient.New(st.URL, keys[r.id])
		go func() {
			meshdDone <- meshd.Run(ctx, meshd.Config{API: api, StateDir: b.TempDir(), Handler: h, HeartbeatEvery: 10 * time.Second, Mode: r.mode, OnMode: onMode})
		}()
	}
	defer func() {
		cancel()
		for range rcpts {
			<-meshdDone
		}
	}()
	// One message through the whole path before measuring: meshd is in its
	// mode (push: its connection is open), consuming, and every connection
	// is open.
	for _, r := range rcpts {
		select {
		case <-r.inMode:
		case <-time.After(2 * time.Minute):
			b.Fatalf("the meshd of %s did not reach mode %s within 2 min", r.id, r.mode)
		}
		if _, err := meshclient.New(st.URL, keys[ids[0]]).Send(ctx, meshclient.SendRequest{To: r.id, MessageID: "warm-up-" + r.id, Parts: []mesh.Part{{Kind: "text", Text: "warm-up"}}}); err != nil {
			b.Fatal(err)
		}
		select {
		case <-r.warm:
		case <-time.After(2 * time.Minute):
			b.Fatalf("the warm-up message to %s was not handled within 2 min", r.id)
		}
	}

	total := rate * int(d/time.Second)
	per := total / senders
	b.ResetTimer()
	// Open loop: each message has its time in a fixed schedule and its send
	// starts then, whether or not the sender's earlier sends have returned
	// (up to maxInFlightPerSender at once). A sender that waited for each
	// 2xx before the next send would lower the rate whenever sends slow
	// down, and a slower send path would be measured under less load.
	period := time.Second * time.Duration(senders) / time.Duration(rate)
	start := time.Now()
	cpu0, cpuOK := machineCPU()
	var wg sync.WaitGroup
	for s, id := range ids {
		c := meshclient.New(st.URL, keys[id])
		slots := make(chan struct{}, maxInFlightPerSender)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Senders are staggered across the period, so the mesh's
			// sends are spread evenly, not in waves of every sender.
			at := start.Add(time.Duration(s) * period / time.Duration(senders))
			for i := 0; i < per; i++ {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(at)):
				}
				at = at.Add(period)
				slots <- struct{}{}
				msgID := fmt.Sprintf("lat-%d-%d", s, i)
				to := rcpts[i%len(rcpts)].id
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					_, err := c.Send(ctx, meshclient.SendRequest{To: to, MessageID: msgID, Parts: []mesh.Part{{Kind: "text", Text: msgID}}})
					if err != nil {
						b.Errorf("send %s: %v", msgID, err)
						return
					}
					mu.Lock()
					acked[msgID] = time.Now()
					mu.Unlock()
				}()
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow() // a send failed: its message would never be handled
	}
	want := per * senders
	// The rate the mesh took: every message's 2xx came within this span.
	// When it falls short of rate, the sends themselves could not keep up
	// (maxInFlightPerSender of a sender's sends were still waiting).
	sentRate := float64(want) / time.Since(start).Seconds()
	deadline := time.After(2 * time.Minute)
	for n := 0; n < want; n++ {
		select {
		case <-handled:
		case <-deadline:
			b.Fatalf("%d of %d messages handled 2 min after the last send", n, want)
		}
	}
	b.StopTimer()
	// The whole machine's CPU over the measurement: MariaDB, Kafka, the
	// functions, the meshds and the senders all run on it, so near 100% the
	// rate is at this machine's limit and the latencies include waiting for
	// a core.
	busy := -1.0
	if cpu1, ok := machineCPU(); ok && cpuOK && cpu1.total > cpu0.total {
		busy = float64(cpu1.busy-cpu0.busy) / float64(cpu1.total-cpu0.total)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, r := range rcpts {
		for i := 1; i < len(r.seqs); i++ {
			if r.seqs[i] != r.seqs[i-1]+1 {
				b.Errorf("%s handled out of order: seq %d after %d", r.id, r.seqs[i], r.seqs[i-1])
				break
			}
		}
		if r.left > 0 {
			b.Errorf("the meshd of %s left mode %s %d time(s) during the measurement", r.id, r.mode, r.left)
		}
		if *latencyOut != "" {
			writeLatencies(b, *latencyOut, rate, sentRate, busy, r.mode, r.handler, r.lat, r.sent)
		}
		lat := r.lat
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		unit := r.mode + "-"
		if *latencyExec {
			unit += r.handler + "-"
		}
		b.ReportMetric(float64(q(0.50).Milliseconds()), unit+"p50-ms")
		b.ReportMetric(float64(q(0.95).Milliseconds()), unit+"p95-ms")
		b.ReportMetric(float64(q(0.99).Milliseconds()), unit+"p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), unit+"max-ms")
		b.Logf("%d msg/s for %v (sent at %.0f msg/s, machine CPU busy %s), %s mode, %s handler: %d handled in order; 2xx→handler p50 %v, p95 %v, p99 %v, max %v",
			rate, d, sentRate, percent(busy), r.mode, r.handler, len(lat), q(0.50), q(0.95), q(0.99), lat[len(lat)-1])
	}
	b.ReportMetric(sentRate, "sent-msg/s")
	if busy >= 0 {
		b.ReportMetric(100*busy, "cpu-busy-%")
	}
}

// cpuTimes are the machine's CPU times since boot, in clock ticks of all
// cores: busy (user, nice, system, irq, softirq, steal) and total (busy,
// idle and iowait).
type cpuTimes struct{ busy, total uint64 }

// machineCPU reads the machine's CPU times from /proc/stat; ok is false
// where there is none (not Linux).
func machineCPU() (cpuTimes, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, false
	}
	var v [8]uint64 // user nice system idle iowait irq softirq steal
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return cpuTimes{}, false
		}
	}
	busy := v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return cpuTimes{busy: busy, total: busy + v[3] + v[4]}, true
}

// percent formats a fraction as a percentage, or "unknown" when negative.
func percent(f float64) string {
	if f < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}

// writeLatencies appends one JSON line {rate, sent_rate, cpu_busy, mode,
// handler, us: [...], sent_ms: [...]} to path: the rate the whole mesh took
// (msg/s), the machine's CPU busy fraction over the measurement (absent when
// unknown), each message's latency and the Unix time in ms its send got its
// 2xx (so a reader can tell minute boundaries apart).
func writeLatencies(b *testing.B, path string, rate int, sentRate, busy float64, mode, handler string, lat []time.Duration, sent []time.Time) {
	us := make([]int64, len(lat))
	sentMS := make([]int64, len(lat))
	for i, l := range lat {
		us[i], sentMS[i] = l.Microseconds(), sent[i].UnixMilli()
	}
	fields := map[string]any{"rate": rate, "sent_rate": sentRate, "mode": mode, "handler": handler, "us": us, "sent_ms": sentMS}
	if busy >= 0 {
		fields["cpu_busy"] = busy
	}
	line, err := json.Marshal(fields)
	if err == nil {
		var f *os.File
		if f, err = os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, err = f.Write(append(line, '\n'))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		b.Fatalf("-latency.out: %v", err)
	}
}
