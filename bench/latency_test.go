package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// measureLatency runs the project's own BenchmarkDeliveryLatency (make
// latency) at 50, 200 and 500 msg/s with both handlers and meshd in push, Kafka
// and poll mode side by side, and reads back every latency it measured, for
// the table and the CDF.
func measureLatency(t *testing.T, r *Results) {
	root := repoRoot(t)
	out := filepath.Join(t.TempDir(), "latency.jsonl")
	rates := sized("50,200,500", "50")
	say("latency: BenchmarkDeliveryLatency at %s msg/s for %v each, push, kafka and poll mode, no-op and exec handlers", rates, *latDur)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^$", "-bench", "DeliveryLatency", "-benchtime", "1x", "-timeout", "20m",
		"./shared/localstack/", "-args", "-latency", "-latency.exec", "-latency.rates", rates,
		"-latency.duration", latDur.String(), "-latency.modes", "push,kafka,poll", "-latency.out", out)
	cmd.Dir = root
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Its summary lines are progress; meshd's per-event logs are not.
	var tail []string
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		tail = append(tail, line)
		if len(tail) > 40 {
			tail = tail[1:]
		}
		if strings.Contains(line, "latency_test.go") || strings.Contains(line, "FAIL") || strings.HasPrefix(line, "ok") {
			say("latency: %s", strings.TrimSpace(line))
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("BenchmarkDeliveryLatency: %v\n%s", err, strings.Join(tail, "\n"))
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ls := bufio.NewScanner(f)
	ls.Buffer(make([]byte, 64<<20), 64<<20)
	for ls.Scan() {
		var l struct {
			Rate     int     `json:"rate"`
			SentRate float64 `json:"sent_rate"`
			// CPUBusy is the machine's CPU busy fraction over the
			// measurement; nil where it could not be read.
			CPUBusy *float64 `json:"cpu_busy"`
			Mode    string   `json:"mode"`
			Handler string   `json:"handler"`
			US      []int64  `json:"us"`
			SentMS  []int64  `json:"sent_ms"`
		}
		if err := json.Unmarshal(ls.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		d := make([]time.Duration, len(l.US))
		var edge []time.Duration // sent within 3 s of a minute boundary
		for i, u := range l.US {
			d[i] = time.Duration(u) * time.Microsecond
			if i < len(l.SentMS) {
				if sec := time.UnixMilli(l.SentMS[i]).UTC().Second(); sec >= 57 || sec < 3 {
					edge = append(edge, d[i])
				}
			}
		}
		slices.Sort(d)
		slices.Sort(edge)
		key := fmt.Sprintf("%d/%s/%s", l.Rate, l.Mode, l.Handler)
		r.mu.Lock()
		r.figs[fmt.Sprintf("lat.sent.%d", l.Rate)] = figure{l.SentRate, "msg/s"}
		if l.CPUBusy != nil {
			r.figs[fmt.Sprintf("lat.busy.%d", l.Rate)] = figure{100 * *l.CPUBusy, "%"}
		}
		r.lat[key] = d
		r.latEdge[key] = edge
		r.mu.Unlock()
		say("  latency %d msg/s %s mode %s: p50 %v p99 %v max %v", l.Rate, l.Mode, l.Handler, quantile(d, .5), quantile(d, .99), d[len(d)-1])
	}
}
