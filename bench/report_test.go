package bench

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/retention"
)

// only picks stages of TestReport by name, for running a part of make bench.
var only = flag.String("only", "", "comma-separated stages of -report to run (relays, send, consume, init, idle, latency); all when empty")

// wanted reports whether the stage name was picked by -only.
func wanted(name string) bool {
	if *only == "" {
		return true
	}
	for _, f := range strings.Split(*only, ",") {
		if f = strings.TrimSpace(f); f != "" && strings.Contains(name, f) {
			return true
		}
	}
	return false
}

// figure is one measured number.
type figure struct {
	v    float64
	unit string
}

// latRateHeld is the share of a latency run's rate the mesh must take for
// its latency to count as measured at that rate.
const latRateHeld = 0.95

// Results collects every figure of a run, for the report.
type Results struct {
	mu      sync.Mutex
	figs    map[string]figure
	lat     map[string][]time.Duration // "rate/mode/handler" -> sorted latencies
	latEdge map[string][]time.Duration // the same, of messages sent within 3 s of a minute boundary
	curves  map[string][][2]float64    // throughput vs clients: name -> (clients, per second)
	scale   []scaleRow
	notes   []string
	skipped []string
}

type scaleRow struct {
	what    string
	size    int
	took    time.Duration
	unit    string // what size counts
	work    int    // units of work done (events of a dispatcher batch), when it varies
	perUnit string
	explain string
}

func newResults() *Results {
	return &Results{figs: map[string]figure{}, lat: map[string][]time.Duration{}, latEdge: map[string][]time.Duration{}, curves: map[string][][2]float64{}}
}

func (r *Results) set(key string, v float64, unit string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.figs[key] = figure{v, unit}
	say("  %s = %.4g %s", key, v, unit)
}

func (r *Results) get(key string) (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.figs[key]
	return f.v, ok
}

func (r *Results) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// TestReport is `make bench`: every stage in one run against the same
// MariaDB and Kafka broker, then report.md and the plots. A stage that fails
// is reported as such; the others still run.
func TestReport(t *testing.T) {
	if !*report && !*scale {
		t.Skip("a report of several minutes: run it with make bench (go test -run TestReport -args -report)")
	}
	r := newResults()
	stage := func(name string, fn func(t *testing.T, r *Results)) {
		if !wanted(name) {
			return
		}
		say("== %s", name)
		begin := time.Now()
		if !t.Run(name, func(t *testing.T) { fn(t, r) }) {
			r.mu.Lock()
			r.skipped = append(r.skipped, name)
			r.mu.Unlock()
		}
		say("== %s done in %v", name, time.Since(begin).Round(time.Second))
	}
	if *report {
		stage("relays", measureRelays)
		stage("send path", measureSend)
		stage("meshd consume", measureConsume)
		stage("function init", measureInit)
		stage("push idle", measureIdle)
		stage("latency", measureLatency)
		stage("janitor", measureJanitor)
	}
	if *scale {
		stage("scale", measureScale)
	}
	name := "report.md"
	if !*report {
		name = "report-scale.md"
	}
	// The figures took minutes: a missing -out directory is made, not
	// a reason to lose them.
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.write(t, filepath.Join(*outDir, name)); err != nil {
		t.Fatal(err)
	}
	say("wrote %s in %v", filepath.Join(*outDir, name), time.Since(started).Round(time.Second))
}

// fmtRate formats a per-second figure.
func fmtNum(v float64) string {
	switch {
	case v >= 100:
		return commas(int64(math.Round(v)))
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// short formats a ratio with two significant digits, without exponents.
func short(v float64) string {
	switch {
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

// quantile of sorted durations.
func quantile(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func (r *Results) write(t *testing.T, path string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := func(key string) string {
		v, ok := r.figs[key]
		if !ok {
			return "—"
		}
		return fmtNum(v.v) + " " + v.unit
	}
	ratio := func(a, b string, pct bool) string {
		x, okx := r.figs[a]
		y, oky := r.figs[b]
		if !okx || !oky || y.v == 0 {
			return "—"
		}
		if pct {
			return short(100*x.v/y.v) + "%"
		}
		return short(x.v/y.v) + "×"
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Agent Mesh benchmark report\n\n")
	w("Written by `make bench` on %s (%s, GOMAXPROCS %d). Every figure below was measured in this one run against the same MariaDB and the same Kafka broker; on a shared machine absolute figures move from run to run, the ratios are what to compare.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), hostInfo(), gomaxprocs())
	if len(r.skipped) > 0 {
		w("**Stages that failed in this run (their figures are missing):** %s\n\n", strings.Join(r.skipped, ", "))
	}

	r.targets(w)
	if *report {
		r.writeComparison(w, f, ratio)
		r.writeIdle(w, f)
	}
	if len(r.scale) > 0 {
		w("## Cost as work grows\n\n| What | Size | Time (median) | Note |\n|---|---|---|---|\n")
		for _, s := range r.scale {
			w("| %s | %s %s | %s | %s |\n", s.what, commas(int64(s.size)), s.unit, s.took.Round(time.Microsecond), s.perUnit)
		}
		w("\n### EXPLAIN\n\n")
		for _, s := range r.scale {
			if s.explain != "" {
				w("**%s at %s**\n\n```\n%s\n```\n\n", s.what, commas(int64(s.size)), s.explain)
			}
		}
	}

	plots := r.plots(t, filepath.Dir(path))
	if len(plots) > 0 {
		w("## Plots\n\n")
		for _, p := range plots {
			w("![%s](%s)\n\n", strings.TrimSuffix(p, ".png"), p)
		}
	}
	if len(r.notes) > 0 {
		w("## Notes\n\n")
		for _, n := range r.notes {
			w("- %s\n", n)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// latOrder sorts latency rows by rate, then mode (push, kafka, poll), then
// handler.
func latOrder(k string) string {
	rate, rest, _ := strings.Cut(k, "/")
	mode, h, _ := strings.Cut(rest, "/")
	return fmt.Sprintf("%08s/%d/%s", rate, max(0, slices.Index([]string{"push", "kafka", "poll"}, mode)), h)
}

// targets writes the targets, each met or not in this run.
func (r *Results) targets(w func(string, ...any)) {
	var rows [][3]string
	check := func(name string, ok, have bool, got string) {
		verdict := "not measured"
		if have {
			verdict = map[bool]string{true: "met", false: "**not met**"}[ok]
		}
		rows = append(rows, [3]string{name, got, verdict})
	}
	// Issue 18's targets first, each as its acceptance states it.
	if m, ok := r.figs["meshd.noop"]; ok {
		check("meshd, in-process no-op handler ≥ 5,000 events/s", m.v >= 5000, true, fmtNum(m.v)+" events/s")
		if fs, ok := r.figs["phys.fdatasync"]; ok {
			check("… and ≥ 60% of this machine's pwrite + fdatasync of the state record", m.v >= 0.6*fs.v, true, short(100*m.v/fs.v)+"% of "+fmtNum(fs.v)+"/s")
		}
	}
	if m, ok := r.figs["meshd.exec.batch100"]; ok {
		check("meshd, exec handler with --batch 100 ≥ 5,000 events/s", m.v >= 5000, true, fmtNum(m.v)+" events/s")
	}
	if m, ok := r.figs["meshd.exec"]; ok {
		if sp, ok := r.figs["phys.spawn"]; ok {
			check("meshd, exec handler without a batch within 20% of one process start per event", m.v >= 0.8*sp.v, true, short(100*m.v/sp.v)+"% of "+fmtNum(sp.v)+" starts/s")
		}
	}
	if wm, ok := r.figs["relay.watermill"]; ok {
		worst, worstRaw, have := math.Inf(1), math.Inf(1), false
		raw, haveRaw := r.figs["relay.raw"]
		for _, m := range []int{1, 50, 1000} {
			if d, ok := r.figs[fmt.Sprintf("relay.dispatcher.r%d", m)]; ok {
				worst, have = math.Min(worst, d.v/wm.v), true
				if haveRaw {
					worstRaw = math.Min(worstRaw, d.v/raw.v)
				}
			}
		}
		check("relay ≥ 10× watermill (worst of 1, 50, 1,000 recipients)", worst >= 10, have, short(worst)+"×")
		check("relay ≥ 20% of raw produce (worst of 1, 50, 1,000 recipients)", worstRaw >= 0.2, have && haveRaw, short(100*worstRaw)+"%")
	} else if *report {
		check("relay ≥ 10× watermill", false, false, "—")
	}
	if rt, ok := r.figs["send.roundtrips"]; ok {
		check("send path ≤ 8 database round trips", rt.v <= 8, true, fmtNum(rt.v))
	}
	for _, c := range []int{1, 32} {
		s, ok1 := r.figs[fmt.Sprintf("send.c%d", c)]
		two, ok2 := r.figs[fmt.Sprintf("two.c%d", c)]
		if ok1 && ok2 {
			check(fmt.Sprintf("send path ≥ 40%% of the two-INSERT commit, %d client(s)", c), s.v >= 0.4*two.v, true, short(100*s.v/two.v)+"%")
		}
	}
	// A latency target holds at its rate only: a run whose sends could not
	// keep the rate measured a lighter load, and says so.
	latCheck := func(name string, rate int, l []time.Duration, limit time.Duration) {
		p99 := quantile(l, .99)
		sent := r.figs[fmt.Sprintf("lat.sent.%d", rate)].v
		got, held := ms(p99), sent >= latRateHeld*float64(rate)
		if !held {
			got += fmt.Sprintf(", but the mesh took only %s msg/s", fmtNum(sent))
		}
		if b, ok := r.figs[fmt.Sprintf("lat.busy.%d", rate)]; ok && p99 > limit {
			// Whether a missed target is this machine's limit or the mesh's.
			got += fmt.Sprintf(" (machine CPU %.0f%% busy)", b.v)
		}
		check(name, p99 <= limit && held, true, got)
	}
	for _, m := range []string{"push", "kafka"} {
		for _, h := range []string{"noop", "exec"} {
			if l, ok := r.lat["500/"+m+"/"+h]; ok {
				latCheck(fmt.Sprintf("p99 ≤ 100 ms at 500 msg/s, %s mode, %s handler", m, h), 500, l, 100*time.Millisecond)
			}
		}
	}
	// Issue 20: the retention janitor deletes while sends go on, and no
	// send waits on its locks for more than 100 ms. A send's whole time
	// bounds its wait on any lock, so the slowest send during the run is
	// the strict figure.
	if m, ok := r.figs["janitor.send_max_ms"]; ok {
		check("janitor deleting while 200 sends/s go on: no send over 100 ms", m.v <= 100, true,
			fmt.Sprintf("slowest send %s ms (%s ms without the janitor)", short(m.v), short(r.figs["janitor.base_max_ms"].v)))
	}
	// Targets of earlier issues, kept so a regression shows.
	for _, c := range []int{1, 32} {
		s, ok1 := r.figs[fmt.Sprintf("send.c%d", c)]
		raw, ok2 := r.figs[fmt.Sprintf("raw.c%d", c)]
		if ok1 && ok2 {
			check(fmt.Sprintf("(earlier) send path ≥ 60%% of its statements raw, %d client(s)", c), s.v >= 0.6*raw.v, true, short(100*s.v/raw.v)+"%")
		}
	}
	for _, h := range []string{"noop", "exec"} {
		if l, ok := r.lat["200/push/"+h]; ok {
			latCheck("(earlier) push p99 ≤ 100 ms at 200 msg/s, "+h+" handler", 200, l, 100*time.Millisecond)
		}
		// The first latency target was Kafka's (meshd's mode then);
		// poll has none and is shown in the latency table only.
		if l, ok := r.lat["200/kafka/"+h]; ok {
			latCheck("(earlier) p99 ≤ 250 ms at 200 msg/s, kafka mode, "+h+" handler", 200, l, 250*time.Millisecond)
		}
	}
	if n, ok := r.figs["idle.conns"]; ok {
		inv, db, pings := r.figs["idle.invocations"], r.figs["idle.db.inbox"], r.figs["idle.ping.invocations"]
		win := r.figs["idle.window"]
		check(fmt.Sprintf("(earlier) %s idle push connections for %.0f s: 0 function invocations", commas(int64(n.v)), win.v), inv.v == 0, true, commas(int64(inv.v))+" invocations")
		check("… and 0 inbox queries", db.v == 0, true, commas(int64(r.figs["idle.db"].v))+" database commands, of them inbox queries: "+commas(int64(db.v)))
		check("(not a target of the issue) … connecting them: no handshake answered 5xx", r.figs["idle.connect.5xx"].v == 0, true,
			commas(int64(r.figs["idle.connect.5xx"].v))+" answered 5xx")
		check("… a ping on each connection invokes nothing", pings.v == 0 && r.figs["idle.ping.errors"].v == 0, true,
			fmt.Sprintf("%s pongs, %s invocations", commas(int64(r.figs["idle.pongs"].v)), commas(int64(pings.v))))
	}
	var b1k, b100k time.Duration
	for _, s := range r.scale {
		if s.what == "dispatcher batch" && s.size == 1_000 {
			b1k = s.took
		}
		if s.what == "dispatcher batch" && s.size == 100_000 {
			b100k = s.took
		}
	}
	if b1k > 0 && b100k > 0 {
		check("dispatcher batch at 100,000 recipients ≤ 2× at 1,000", b100k <= 2*b1k, true, short(float64(b100k)/float64(b1k))+"×")
		if w1k, w100k := r.work("dispatcher batch", 1_000), r.work("dispatcher batch", 100_000); w1k > 0 && w100k > 0 {
			per := (float64(b100k) / float64(w100k)) / (float64(b1k) / float64(w1k))
			check("(not a target of the issue) time per event, 100,000 recipients ÷ 1,000", per <= 2, true, short(per)+"×")
		}
	}
	if len(rows) == 0 {
		return
	}
	w("## Targets\n\n| Target | This run | Verdict |\n|---|---|---|\n")
	for _, row := range rows {
		w("| %s | %s | %s |\n", row[0], row[1], row[2])
	}
	w("\n")
}

// writeComparison writes the sections of make bench: peers, send path,
// latency, meshd and init.
func (r *Results) writeComparison(w func(string, ...any), f func(string) string, ratio func(a, b string, pct bool) string) {
	w("## Relay: outbox → Kafka\n\n| Relay | Rate | ÷ watermill | ÷ raw produce |\n|---|---|---|---|\n")
	for _, m := range []int{1, 50, 1000} {
		k := fmt.Sprintf("relay.dispatcher.r%d", m)
		w("| Project dispatcher, %d recipient(s) | %s | %s | %s |\n", m, f(k), ratio(k, "relay.watermill", false), ratio(k, "relay.raw", true))
	}
	w("| watermill-sql MySQL subscriber → franz-go (ProduceSync, Ack) | %s | 1.0× | %s |\n", f("relay.watermill"), ratio("relay.watermill", "relay.raw", true))
	w("| Original design (1 s poll, 50 rows one by one) | %s | %s | %s |\n", f("relay.seed"), ratio("relay.seed", "relay.watermill", false), ratio("relay.seed", "relay.raw", true))
	w("| Raw franz-go produce, acks=all, idempotent (the limit) | %s | %s | 100%% |\n\n", f("relay.raw"), ratio("relay.raw", "relay.watermill", false))
	w("Targets: relay ≥ 10× watermill and ≥ 20%% of raw produce, at 1, 50 and 1,000 recipients.\n\n")

	w("## Send path (`POST /v1/messages`) against the same statements issued raw\n\n| Clients | Send path | The send's statements, raw | Send ÷ raw | Two-INSERT commit | Send ÷ two-INSERT |\n|---|---|---|---|---|---|\n")
	for _, c := range sendClients() {
		s, rw, two := fmt.Sprintf("send.c%d", c), fmt.Sprintf("raw.c%d", c), fmt.Sprintf("two.c%d", c)
		w("| %d | %s | %s | %s | %s | %s |\n", c, f(s), f(rw), ratio(s, rw, true), f(two), ratio(s, two, true))
	}
	w("\nDatabase round trips per send: %s, carrying %s (listed in the notes: a round trip may carry several, START TRANSACTION with the first and COMMIT with the last). A send that opens a task without a context is one CALL of the send procedure (send_new_task_v2, migrations/0013_outbox_queue.sql), sent with START TRANSACTION and COMMIT. \"The send's statements, raw\" replays exactly those round trips, as captured from a real send with fresh ids, over one connection, each from a sender to a recipient it is friends with (the send's gate lets it through) and from full rate budgets: what is left of a send without HTTP event, JSON, JWT and Go logic. \"Two-INSERT commit\" inserts only the task and message rows that send wrote, with the two INSERTs of the send's pipe path, in a transaction: START TRANSACTION, the two INSERTs and COMMIT each in a round trip of its own (the write a send cannot do without). Targets: ≤ 8 round trips per send; send ≥ 40%% of the two-INSERT commit at 1 and 32 clients (an earlier issue asked ≥ 60%% of raw).\n\n", f("send.roundtrips"), f("send.statements"))

	w("## Latency: 2xx → handler, through the local stack (schedules as on AWS), the real broker and meshd\n\n")
	w("| Rate (whole mesh) | Taken | CPU busy | Mode | Handler | Messages | p50 | p95 | p99 | max | Sent within 3 s of :00 | their p99 | their max |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range r.latencyKeys() {
		s := r.lat[k]
		rate, rest, _ := strings.Cut(k, "/")
		mode, h, _ := strings.Cut(rest, "/")
		e := r.latEdge[k]
		ep99, emax := "—", "—"
		if len(e) > 0 {
			ep99, emax = ms(quantile(e, .99)), ms(e[len(e)-1])
		}
		busy := "—"
		if b, ok := r.figs["lat.busy."+rate]; ok {
			busy = fmt.Sprintf("%.0f%%", b.v)
		}
		w("| %s msg/s | %s msg/s | %s | %s | %s | %d | %s | %s | %s | %s | %d | %s | %s |\n", rate, fmtNum(r.figs["lat.sent."+rate].v), busy, mode, h, len(s), ms(quantile(s, .5)), ms(quantile(s, .95)), ms(quantile(s, .99)), ms(s[len(s)-1]), len(e), ep99, emax)
	}
	w("\nEach rate runs for %v (make bench's 125 s spans two dispatcher schedule periods, so minute boundaries are included), split evenly between six recipients in the same stack: for each delivery mode (push: meshd holds a WebSocket to the local WebSocket API and the dispatcher's post-commit hook posts each record to it; kafka: meshd consumes its partition; poll: meshd long-polls `GET /v1/inbox`), one whose meshd runs an in-process no-op handler and one whose meshd runs an exec handler (`true`). The rate is the whole mesh's: each recipient gets a sixth of it. The sends follow a fixed schedule (open loop: a send starts at its time whether or not the sender's earlier sends have returned, up to 8 at once per sender), so a slow send path cannot lower the load it is measured under; \"Taken\" is the rate the mesh actually took (all messages over the time from the first send to the last 2xx), and a latency target counts as met only when it is at least %d%% of the rate. \"CPU busy\" is the whole machine's over the measurement (from /proc/stat; every process of the stack runs on it: MariaDB, Kafka, the functions, the meshds, their exec handlers and the senders): near 100%% the rate is at this machine's limit, and the latencies include waiting for a core. Targets: p99 ≤ 100 ms at 500 msg/s (push and Kafka); earlier, push p99 ≤ 100 ms and Kafka p99 ≤ 250 ms at 200 msg/s. Poll mode has no target: its latency is the long poll's.\n\n", *latDur, int(100*latRateHeld))

	w("## meshd consume rate and function init\n\n| Figure | Value | Against the physical line of the same run |\n|---|---|---|\n")
	w("| meshd consume, in-process no-op handler | %s | %s of pwrite + fdatasync |\n", f("meshd.noop"), ratio("meshd.noop", "phys.fdatasync", true))
	w("| meshd consume, exec handler (`true`), one process per event | %s | %s of process starts |\n", f("meshd.exec"), ratio("meshd.exec", "phys.spawn", true))
	w("| meshd consume, exec handler (`cat >/dev/null`), `--batch 100` | %s | %s of process starts |\n", f("meshd.exec.batch100"), ratio("meshd.exec.batch100", "phys.spawn", false))
	w("| Physical line: `pwrite` + `fdatasync` of the 512-byte state record | %s | 100%% |\n", f("phys.fdatasync"))
	w("| Physical line: sequential process starts (`true`, os/exec) | %s | 100%% |\n", f("phys.spawn"))
	initKeys := []string{}
	for k := range r.figs {
		if strings.HasPrefix(k, "init.") {
			initKeys = append(initKeys, k)
		}
	}
	slices.Sort(initKeys)
	for _, k := range initKeys {
		w("| Init of the %s bootstrap under aws-lambda-rie | %s |\n", strings.TrimPrefix(k, "init."), f(k))
	}
	w("\nTargets: meshd ≥ 5,000 events/s with the in-process no-op handler and ≥ 60%% of the fdatasync line; ≥ 5,000 events/s with an exec handler and `--batch 100`; without a batch, within 20%% of one process start per event.\n\n")

	if _, ok := r.figs["janitor.send_max_ms"]; ok {
		w("## Retention janitor under sends\n\n| Figure | Without the janitor | While it deletes |\n|---|---|---|\n")
		w("| Send p99 | %s | %s |\n", f("janitor.base_p99_ms"), f("janitor.send_p99_ms"))
		w("| Slowest send | %s | %s |\n", f("janitor.base_max_ms"), f("janitor.send_max_ms"))
		w("| Janitor rate | — | %s (%s) |\n", f("janitor.tasks_per_s"), f("janitor.rows_per_s"))
		w("| Longest time between two batch ends | — | %s |\n", f("janitor.batch_interval_max_ms"))
		w("| Row lock waits the server counted (every session) | — | %s, %s in all |\n\n", f("janitor.lock_waits"), f("janitor.lock_wait_ms"))
		w("%d sends/s go on through the real send route, first alone, then while the janitor deletes old terminal tasks in batches of at most %d. Target (issue 20): no send waits on the janitor's locks for more than 100 ms; a send's whole time bounds that wait.\n\n", janitorRate, retention.DefaultBatch)
	}
}

// work is the work done by the scale row what at size (0 when unknown).
func (r *Results) work(what string, size int) int {
	for _, s := range r.scale {
		if s.what == what && s.size == size {
			return s.work
		}
	}
	return 0
}
