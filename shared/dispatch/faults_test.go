package dispatch_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/seal"
	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// metricSum adds up every value of metric name in the EMF lines of out,
// counting only lines that declare it as a CloudWatch metric.
func metricSum(t testing.TB, out, name string) float64 {
	t.Helper()
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("metric line is not JSON: %v: %s", err, sc.Text())
		}
		raw, ok := rec[name]
		if !ok {
			continue
		}
		var meta struct {
			CloudWatchMetrics []struct {
				Namespace string
				Metrics   []struct{ Name string }
			}
		}
		_ = json.Unmarshal(rec["_aws"], &meta)
		declared := false
		for _, cw := range meta.CloudWatchMetrics {
			for _, m := range cw.Metrics {
				declared = declared || (m.Name == name && cw.Namespace == metrics.Namespace)
			}
		}
		if !declared {
			t.Fatalf("%s is in the record but not declared as a metric: %s", name, sc.Text())
		}
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s is not a number: %s", name, raw)
		}
		sum += v
	}
	return sum
}

// holdingPublisher blocks its first Publish until released, so a test can
// keep a dispatcher's transaction (and the recipients it holds) open.
type holdingPublisher struct {
	real     dispatch.Publisher
	entered  chan struct{}
	release  chan struct{}
	once     sync.Once
	recTo    []string
	recMutex sync.Mutex
}

func (p *holdingPublisher) Publish(ctx context.Context, recs []*kgo.Record) []error {
	p.recMutex.Lock()
	for _, r := range recs {
		env, _ := decode(r)
		p.recTo = append(p.recTo, env.To)
	}
	p.recMutex.Unlock()
	p.once.Do(func() {
		close(p.entered)
		select {
		case <-p.release:
		case <-ctx.Done():
		}
	})
	return p.real.Publish(ctx, recs)
}

func TestASecondDispatcherServesOtherRecipientsWhileTheFirstHoldsOne(t *testing.T) {
	f := newDispFixture(t, 1)
	f.agents(t, "alice", "bob")
	f.send(t, "x", "alice", 1)
	f.send(t, "x", "bob", 1)

	hold := &holdingPublisher{real: dispatch.KafkaPublisher{Client: f.prod}, entered: make(chan struct{}), release: make(chan struct{})}
	first := f.dispatcher(hold, nil)
	first.Recipients = 1 // alice, the first due in key order
	firstDone := make(chan error, 1)
	go func() {
		_, err := first.RunOnce(context.Background())
		firstDone <- err
	}()
	select {
	case <-hold.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first dispatcher never reached its publish")
	}
	defer func() {
		close(hold.release)
		if err := <-firstDone; err != nil {
			t.Errorf("the first dispatcher failed: %v", err)
		}
		if dl := f.deliveries(t, "alice"); dl["sent"] != 1 {
			t.Errorf("once released, the first dispatcher must send alice's event: %v", dl)
		}
	}()
	if fmt.Sprint(hold.recTo) != "[alice]" {
		t.Fatalf("the first dispatcher holds %v, want [alice]", hold.recTo)
	}

	// alice is still pending and due, so the second dispatcher sees both; it
	// must skip the held one rather than wait for it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := f.dispatcher(nil, nil).RunOnce(ctx)
	if err != nil {
		t.Fatalf("the second dispatcher failed while the first held alice: %v", err)
	}
	if st.Sent != 1 || f.deliveries(t, "bob")["sent"] != 1 {
		t.Fatalf("the second dispatcher sent %d events, bob's deliveries %v: want bob's event sent while alice is held", st.Sent, f.deliveries(t, "bob"))
	}
	if dl := f.deliveries(t, "alice"); dl["pending"] != 1 {
		t.Fatalf("alice's event must wait for the dispatcher holding her: %v", dl)
	}
}

func TestAnEventThatCannotBeServedGoesOutAsATypedPlaceholder(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		code string
	}{
		{"a body nested 10,000 levels deep", strings.Repeat("[", 10000) + strings.Repeat("]", 10000), dispatch.UndeliverableTooDeep},
		{"a body nested past jsonlimit.MaxServedDepth", strings.Repeat(`{"a":`, jsonlimit.MaxServedDepth+1) + "1" + strings.Repeat("}", jsonlimit.MaxServedDepth+1), dispatch.UndeliverableTooDeep},
		{"a body that is not JSON", `{"parts": [`, dispatch.UndeliverableUnencodable},
	} {
		t.Run(tc.name+" is replaced, keeps its seq and event_id, and the events after it flow", func(t *testing.T) {
			f := newDispFixture(t, 1)
			f.agents(t, "alice", "bob")
			f.send(t, "x", "bob", 3)
			f.send(t, "x", "alice", 1)
			// As stored by a version of the API that accepted such bodies.
			if _, err := f.db.Exec("UPDATE outbox_events SET body = ? WHERE recipient = 'bob' AND seq = 2", tc.body); err != nil {
				t.Fatal(err)
			}
			var eventID string
			if err := f.db.QueryRow("SELECT event_id FROM outbox_events WHERE recipient = 'bob' AND seq = 2").Scan(&eventID); err != nil {
				t.Fatal(err)
			}
			var sink, logs testenv.Buffer
			d := f.dispatcher(nil, &metrics.Sink{W: &sink})
			d.Log = slog.New(slog.NewJSONHandler(&logs, nil))
			f.drain(t, d)

			got := f.seqsOnKafka(t, 1, 4)
			if fmt.Sprint(got["bob"]) != "[1 2 3]" || fmt.Sprint(got["alice"]) != "[1]" {
				t.Fatalf("Kafka holds %v, want bob [1 2 3] and alice [1]", got)
			}
			var placeholder *mesh.Envelope
			for _, r := range kafkatest.ReadTopic(t, f.brokers, f.topic, 4, 10*time.Second) {
				env, err := decode(r)
				if err != nil {
					t.Fatal(err)
				}
				if env.To == "bob" && env.Seq == 2 {
					placeholder = &env
				} else if env.Type != mesh.EventMessage {
					t.Fatalf("%s seq %d went out as %q, want it untouched", env.To, env.Seq, env.Type)
				}
			}
			if placeholder == nil || placeholder.Type != mesh.EventUndeliverable || placeholder.EventID != eventID {
				t.Fatalf("bob's seq 2 went out as %+v, want type %q with event_id %s", placeholder, mesh.EventUndeliverable, eventID)
			}
			opened := placeholder.Body // opened by decode, with bob's key
			var body mesh.UndeliverableBody
			if err := json.Unmarshal(opened, &body); err != nil || body != (mesh.UndeliverableBody{Code: tc.code, OriginalType: mesh.EventMessage}) {
				t.Fatalf("placeholder body %s (%v), want code %q and original type %q", opened, err, tc.code, mesh.EventMessage)
			}
			for _, r := range []string{"alice", "bob"} {
				if dl := f.deliveries(t, r); dl["pending"] != 0 || dl["failed"] != 0 {
					t.Fatalf("%s: deliveries %v, want every event sent", r, dl)
				}
			}
			if n := metricSum(t, sink.String(), "OutboxUndeliverable"); n != 1 {
				t.Fatalf("OutboxUndeliverable summed to %v, want 1", n)
			}
			if !strings.Contains(logs.String(), `"level":"ERROR"`) || !strings.Contains(logs.String(), eventID) {
				t.Fatalf("no error log naming event %s: %s", eventID, logs.String())
			}
		})
	}
}

// stuckPublisher is a broker that takes records and never answers: it
// returns only when its context ends. It records each publish's deadline.
type stuckPublisher struct {
	calls     atomic.Int32
	mu        sync.Mutex
	deadlines []time.Time
}

func (p *stuckPublisher) Publish(ctx context.Context, recs []*kgo.Record) []error {
	p.calls.Add(1)
	dl, _ := ctx.Deadline()
	p.mu.Lock()
	p.deadlines = append(p.deadlines, dl)
	p.mu.Unlock()
	<-ctx.Done()
	errs := make([]error, len(recs))
	for i := range errs {
		errs[i] = fmt.Errorf("produce: %w", ctx.Err())
	}
	return errs
}

func TestARunEndsBeforeItsDeadlineWhenKafkaNeverAnswers(t *testing.T) {
	const timeout = 8 * time.Second
	// workMargin is the dispatcher's finishMargin: the work of a run ends
	// this long before the caller's deadline.
	const workMargin = 2 * time.Second
	for _, tc := range []struct {
		name           string
		publishTimeout time.Duration
		minCalls       int32
		// cut says whether the run's deadline must cut its last publish:
		// when a publish timeout fits the run, no batch may start that the
		// deadline would cut.
		cut bool
	}{
		{"publishes bounded by their timeout are retried until the run's time is up and none is cut", 2 * time.Second, 2, false},
		{"a publish timeout longer than the time left is cut at the run's deadline", 30 * time.Second, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newDispFixture(t, 1)
			f.agents(t, "bob")
			f.send(t, "x", "bob", 2)
			var sink testenv.Buffer
			stuck := &stuckPublisher{}
			d := f.dispatcher(stuck, &metrics.Sink{W: &sink})
			d.Clock = time.Now
			d.PublishTimeout = tc.publishTimeout
			// The budget outlasts the deadline: the deadline must win.
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			deadline, _ := ctx.Deadline()
			start := time.Now()
			err := d.Run(ctx, time.Minute)
			// The deadline itself is the bound: a run still going when it
			// passes has overrun, however loaded the machine.
			if ctx.Err() != nil {
				t.Fatalf("Run returned (%v) only after its deadline", err)
			}
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			stuck.mu.Lock()
			deadlines := append([]time.Time(nil), stuck.deadlines...)
			stuck.mu.Unlock()
			workEnd := deadline.Add(-workMargin)
			for i, pd := range deadlines {
				last := i == len(deadlines)-1
				switch cutByRun := pd.Equal(workEnd); {
				case cutByRun && !(tc.cut && last):
					t.Fatalf("publish %d of %d was cut by the run's deadline: a batch started that its deadline would cut", i+1, len(deadlines))
				case !cutByRun && tc.cut && last:
					t.Fatalf("the last publish ends at %v, want it cut at the run's work deadline %v", pd, workEnd)
				case pd.After(workEnd):
					t.Fatalf("publish %d ends at %v, past the run's work deadline %v", i+1, pd, workEnd)
				}
			}
			calls := stuck.calls.Load()
			if calls < tc.minCalls {
				t.Fatalf("%d publish attempts, want at least %d", calls, tc.minCalls)
			}
			if n := metricSum(t, sink.String(), "OutboxPublishFailures"); n != float64(calls) {
				t.Fatalf("OutboxPublishFailures summed to %v over %d failed attempts", n, calls)
			}
			if dl := f.deliveries(t, "bob"); dl["pending"] != 2 {
				t.Fatalf("bob's events must stay pending: %v", dl)
			}
			if calls < 2 {
				return // the one attempt was cut with the run: nothing was settled
			}
			var attempts int
			var next time.Time
			var lastErr sql.NullString
			if err := f.db.QueryRow("SELECT attempts, next_attempt_at, last_error FROM dispatch_state WHERE recipient = 'bob'").Scan(&attempts, &next, &lastErr); err != nil {
				t.Fatal(err)
			}
			if attempts != 0 || !next.After(start) || !strings.Contains(lastErr.String, "deadline") {
				t.Fatalf("bob's state: attempts %d, next attempt %v, last error %q: want backed off without counting toward dead-lettering", attempts, next, lastErr.String)
			}
		})
	}
}

// TestARunKeepsDeliveringAcrossADatabaseOutage stops a private MariaDB in
// the middle of a run until the run has failed batch after batch against it
// (its error backoff at its 1 s cap): the run rides it out and delivers again
// within 5 s of the database's return.
func TestARunKeepsDeliveringAcrossADatabaseOutage(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	priv := privateMariaDB(t)
	ctx := context.Background()
	db, err := mysql.Open(ctx, "mesh:mesh@tcp("+priv.addr()+")/mesh?parseTime=true")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Its temporary files stay in its own state: mariadbd deletes every
	// "#sql*" file of its tmpdir at start, and in a shared /tmp that would
	// pull the shared server's temporary tables from under its queries.
	var tmpdir string
	if err := db.QueryRowContext(ctx, "SELECT @@tmpdir").Scan(&tmpdir); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tmpdir, priv.state+string(os.PathSeparator)) {
		t.Errorf("the private MariaDB's tmpdir is %s, want a directory in its state %s", tmpdir, priv.state)
	}
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f := newDispFixtureOn(t, db, brokers, 1)
	f.agents(t, "bob")
	var logs testenv.Buffer
	d := f.dispatcher(nil, nil)
	d.Clock = time.Now
	d.Log = slog.New(slog.NewTextHandler(&logs, nil))

	runCtx, stop := context.WithTimeout(ctx, 90*time.Second)
	defer stop()
	runDone := make(chan error, 1)
	go func() { runDone <- d.Run(runCtx, 60*time.Second) }()

	sent := func(seq int) func() bool {
		return func() bool {
			var n int
			_ = db.QueryRow("SELECT COUNT(*) FROM outbox_events e LEFT JOIN outbox_queue q ON q.recipient = e.recipient AND q.seq = e.seq WHERE e.recipient = 'bob' AND e.seq = ? AND "+outbox.DeliveryOfSQL+" = 'sent'", seq).Scan(&n)
			return n == 1
		}
	}
	f.send(t, "x", "bob", 1)
	if !waitUntil(5*time.Second, sent(1)) {
		t.Fatal("seq 1 was not delivered before the outage")
	}
	send := apiSender(t, db, f.sealer, "writer", "bob")
	priv.must("down")
	down := time.Now()
	// A write during the outage is told to come back later: 503 with
	// Retry-After, not a 500 that reads as a bug.
	resp := send(ctx)
	if resp.StatusCode != 503 || resp.Headers["Retry-After"] == "" || !strings.Contains(resp.Body, `"code":"unavailable"`) {
		t.Fatalf("a send during the outage answered %d %v %s, want 503 unavailable with Retry-After", resp.StatusCode, resp.Headers, resp.Body)
	}
	// The outage lasts until the run's error backoff has reached its cap
	// (50 ms doubling to 1 s) and the run has retried three times at it.
	if !waitUntil(60*time.Second, func() bool { return strings.Count(logs.String(), "retry_in=1s") >= 3 }) {
		t.Fatalf("the run did not keep retrying through the outage; log:\n%s", logs.String())
	}
	t.Logf("the database stayed down %v after its stop completed", time.Since(down).Round(time.Millisecond))
	priv.must("up")
	back := time.Now()
	f.send(t, "x", "bob", 1)
	if !waitUntil(5*time.Second, sent(2)) {
		t.Fatalf("nothing delivered within 5 s of the database's return; log:\n%s", logs.String())
	}
	select {
	case err := <-runDone:
		t.Fatalf("the run ended (%v) during the outage; delivery must resume in the same run", err)
	default:
	}
	t.Logf("delivery resumed %v after the database returned", time.Since(back).Round(time.Millisecond))
	stop()
	if err := <-runDone; err != nil {
		t.Fatalf("the run reported %v: an outage is transient, not a failure of the run", err)
	}
	if !strings.Contains(logs.String(), "retrying in this run") {
		t.Fatal("the outage left no trace in the log")
	}
	if got := f.seqsOnKafka(t, 1, 2)["bob"]; fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("Kafka holds %v, want [1 2]", got)
	}
}

// TestKafkaFaults runs the dispatcher against a private broker that is
// frozen, then killed under load, then restarted.
func TestKafkaFaults(t *testing.T) {
	priv := privateKafka(t)
	brokers := []string{priv.addr()}

	t.Run("a publish to a frozen broker ends at its timeout, counts as a failure and backs its recipient off", func(t *testing.T) {
		db, _ := mysqltest.New(t)
		f := newDispFixtureOn(t, db, brokers, 1)
		f.agents(t, "bob")
		var sink testenv.Buffer
		d := f.dispatcher(nil, &metrics.Sink{W: &sink})
		d.Clock = time.Now
		d.PublishTimeout = 2 * time.Second
		f.send(t, "x", "bob", 1)
		f.drain(t, d) // the producer is connected and has its producer id

		priv.signal("kafka/kafka.pid", syscall.SIGSTOP)
		var thawOnce sync.Once
		var thawed atomic.Bool
		thaw := func() {
			thawOnce.Do(func() {
				thawed.Store(true)
				priv.signal("kafka/kafka.pid", syscall.SIGCONT)
			})
		}
		defer thaw()
		// A publish that ignores its timeout would wait for the broker for
		// ever: thaw it after a while so such a failure ends, and fails
		// (thawed tells that it ended only then).
		timer := time.AfterFunc(30*time.Second, thaw)
		defer timer.Stop()
		// The producer itself gives up on in-flight records at their context's
		// deadline (AllowIdempotentProduceCancellation): without that it keeps
		// them until the broker answers, however long that takes.
		pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
		pstart := time.Now()
		perr := f.prod.ProduceSync(pctx, &kgo.Record{Topic: f.topic, Value: []byte("probe")}).FirstErr()
		ptook := time.Since(pstart)
		pcancel()
		if perr == nil || thawed.Load() {
			t.Fatalf("the producer's own produce to a frozen broker returned %v after %v (context 2 s), thawed %v: want it failed at its deadline, while the broker is still frozen", perr, ptook, thawed.Load())
		}
		// A dispatcher's publish ends at PublishTimeout whatever the producer
		// does (after a cancellation it must get a new producer epoch from the
		// frozen broker first, which no record's context bounds).
		f.send(t, "x", "bob", 1)
		// The batch's context outlasts the publish timeout (2 s) and ends
		// before the thaw: a publish that waits past its timeout runs into
		// it, one that waits for the broker runs into the thaw.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		st, err := d.RunOnce(ctx)
		took := time.Since(start)
		ended, wasThawed := ctx.Err(), thawed.Load()
		thaw()
		if err != nil {
			t.Fatalf("RunOnce = %v after %v", err, took)
		}
		if ended != nil || wasThawed || st.Failed != 1 || st.Sent != 0 {
			t.Fatalf("a publish to a frozen broker ended after %v (timeout 2 s) with %+v, its batch's context ended: %v, thawed: %v: want it to fail at its own timeout", took, st, ended, wasThawed)
		}
		t.Logf("the producer's produce failed after %v, the dispatcher's publish after %v", ptook.Round(time.Millisecond), took.Round(time.Millisecond))
		var next time.Time
		if err := f.db.QueryRow("SELECT next_attempt_at FROM dispatch_state WHERE recipient = 'bob'").Scan(&next); err != nil || !next.After(start) {
			t.Fatalf("bob not backed off (next attempt %v, %v)", next, err)
		}
		// Thawed, the broker takes the event again.
		if !waitUntil(15*time.Second, func() bool {
			_, _ = d.RunOnce(context.Background())
			return f.deliveries(t, "bob")["sent"] == 2
		}) {
			t.Fatalf("after the thaw bob's event was not delivered: %v", f.deliveries(t, "bob"))
		}
	})

	t.Run("with the broker killed for three scheduled runs under load, every run ends within its timeout and delivery resumes within 10 s of its return", func(t *testing.T) {
		db, _ := mysqltest.New(t)
		f := newDispFixtureOn(t, db, brokers, 3)
		recipients := []string{"ann", "ben", "cat", "dan"}
		f.agents(t, recipients...)
		var sink testenv.Buffer
		d := f.dispatcher(nil, &metrics.Sink{W: &sink})
		d.Clock = time.Now
		d.PublishTimeout = 3 * time.Second

		// The schedule, scaled down: a run every 7 s with a 14 s timeout
		// (so runs overlap) and an 8 s budget.
		const period, fnTimeout, budget = 7 * time.Second, 14 * time.Second, 8 * time.Second
		var mu sync.Mutex
		var durations []time.Duration
		var overran []int // runs still going at their function timeout
		// down is set while the broker is dead; each run that starts and ends
		// within the outage sends on outageRuns.
		var down atomic.Bool
		outageRuns := make(chan struct{}, 64)
		schedCtx, stopSchedule := context.WithCancel(context.Background())
		var runs sync.WaitGroup
		runs.Add(1)
		go func() {
			defer runs.Done()
			tick := time.NewTicker(period)
			defer tick.Stop()
			for {
				runs.Add(1)
				go func() {
					defer runs.Done()
					ctx, cancel := context.WithTimeout(context.Background(), fnTimeout)
					defer cancel()
					start, startedDown := time.Now(), down.Load()
					_ = d.Run(ctx, budget)
					late := ctx.Err() != nil // the function timeout is the bound
					mu.Lock()
					durations = append(durations, time.Since(start))
					if late {
						overran = append(overran, len(durations))
					}
					mu.Unlock()
					if startedDown && down.Load() {
						select {
						case outageRuns <- struct{}{}:
						default:
						}
					}
				}()
				select {
				case <-schedCtx.Done():
					return
				case <-tick.C:
				}
			}
		}()
		stopped := false
		stopRuns := func() {
			if !stopped {
				stopped = true
				stopSchedule()
				runs.Wait()
			}
		}
		defer stopRuns()

		// Load: 20 events a second over four recipients until told to stop.
		var written atomic.Int64
		loadCtx, stopLoad := context.WithCancel(context.Background())
		loadDone := make(chan struct{})
		go func() {
			defer close(loadDone)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for i := 0; loadCtx.Err() == nil; i++ {
				f.sendQuiet(recipients[i%len(recipients)])
				written.Add(1)
				select {
				case <-loadCtx.Done():
				case <-tick.C:
				}
			}
		}()
		defer func() { stopLoad(); <-loadDone }()

		sentCount := func() int {
			var n int
			_ = f.db.QueryRow("SELECT COUNT(*) FROM outbox_events e LEFT JOIN outbox_queue q ON q.recipient = e.recipient AND q.seq = e.seq WHERE " + outbox.DeliveryOfSQL + " = 'sent'").Scan(&n)
			return n
		}
		if !waitUntil(10*time.Second, func() bool { return sentCount() >= 20 }) {
			t.Fatal("no delivery before the broker was killed")
		}
		priv.kill("kafka/kafka.pid")
		down.Store(true)
		// The outage lasts until three runs have started and ended in it.
		outage := time.NewTimer(90 * time.Second)
		defer outage.Stop()
		for n := 0; n < 3; n++ {
			select {
			case <-outageRuns:
			case <-outage.C:
				t.Fatalf("%d runs started and ended within 90 s of the broker's death, want 3", n)
			}
		}
		down.Store(false)
		priv.must("up")
		back, before := time.Now(), sentCount()
		if !waitUntil(10*time.Second, func() bool { return sentCount() > before }) {
			t.Fatalf("no delivery within 10 s of the broker's return (%d sent before)", before)
		}
		t.Logf("delivery resumed %v after the broker returned", time.Since(back).Round(time.Millisecond))
		stopLoad()
		<-loadDone
		total := int(written.Load())
		if !waitUntil(30*time.Second, func() bool { return sentCount() == total }) {
			t.Fatalf("%d of %d events sent 30 s after the load stopped", sentCount(), total)
		}
		stopRuns()

		mu.Lock()
		defer mu.Unlock()
		for _, i := range overran {
			t.Errorf("run %d took %v, past its %v timeout", i, durations[i-1], fnTimeout)
		}
		if n := metricSum(t, sink.String(), "OutboxPublishFailures"); n < 1 {
			t.Error("the outage counted no publish failure in OutboxPublishFailures")
		}
		if dead := metricSum(t, sink.String(), "OutboxDeadLetters"); dead != 0 {
			t.Errorf("the outage dead-lettered %v events", dead)
		}
		// On Kafka each recipient's events appear in seq order: a repeat of
		// an earlier seq is allowed (a publish that timed out may have landed),
		// a jump ahead is not.
		perRecipient := map[string]int64{}
		for _, r := range recipients {
			var n int64
			_ = f.db.QueryRow("SELECT COUNT(*) FROM outbox_events WHERE recipient = ?", r).Scan(&n)
			perRecipient[r] = n
		}
		maxSeen := map[string]int64{}
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(f.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		complete := func() bool {
			for r, n := range perRecipient {
				if maxSeen[r] < n {
					return false
				}
			}
			return true
		}
		for !complete() && rctx.Err() == nil {
			cl.PollFetches(rctx).EachRecord(func(rec *kgo.Record) {
				env, err := decode(rec)
				if err != nil {
					t.Errorf("record does not open: %v", err)
				}
				if env.Seq > maxSeen[env.To]+1 {
					t.Errorf("%s: seq %d follows seq %d on Kafka", env.To, env.Seq, maxSeen[env.To])
				}
				maxSeen[env.To] = max(maxSeen[env.To], env.Seq)
			})
		}
		if !complete() {
			t.Fatalf("Kafka holds up to %v, want %v", maxSeen, perRecipient)
		}
		t.Logf("%d events through %d runs (longest %v): %v", total, len(durations), longest(durations), durations)
	})
}

func longest(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m.Round(time.Millisecond)
}

// apiSender gives "from" an API key and a friendship with "to" on db, and
// returns a POST /v1/messages from it through the same middleware and
// handler as the Lambda function.
func apiSender(t *testing.T, db *mysql.DB, sealer *seal.Sealer, from, to string) func(context.Context) events.APIGatewayV2HTTPResponse {
	t.Helper()
	ctx := context.Background()
	ids := &identity.Service{DB: db, Clock: time.Now, TokenTTL: time.Hour, Sealer: sealer,
		JWTKeys: []config.JWTKey{{ID: "k1", Secret: []byte("dispatch-test-jwt-secret-0123456789")}}}
	_, key, err := ids.CreateAgent(ctx, from, from)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ids.AdminCreateFriendship(ctx, from, to); err != nil {
		t.Fatal(err)
	}
	tok, err := ids.IssueToken(ctx, key, "")
	if err != nil {
		t.Fatal(err)
	}
	h := httpapi.Lambda(identityhttp.Authenticator(ids), slog.New(slog.NewTextHandler(io.Discard, nil)), taskshttp.Endpoints(&tasks.Service{DB: db}).Must("SendMessageFunction"))
	return func(ctx context.Context) events.APIGatewayV2HTTPResponse {
		resp, _ := h(ctx, events.APIGatewayV2HTTPRequest{
			RouteKey: "POST /v1/messages", RawPath: "/v1/messages",
			Headers: map[string]string{"authorization": "Bearer " + tok.Token, "content-type": "application/json"},
			Body:    `{"to":"` + to + `","parts":[{"kind":"text","text":"during the outage"}]}`,
			RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "outage-write",
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/v1/messages", SourceIP: "192.0.2.1"}},
		})
		return resp
	}
}

// DispatcherNotRunningAlarm fires on a minute without an OutboxSent
// datapoint: every run, even one with nothing to send, must emit it.
func TestEveryRunReportsOutboxSentEvenWhenIdle(t *testing.T) {
	f := newDispFixture(t, 1)
	var out testenv.Buffer
	d := f.dispatcher(nil, &metrics.Sink{W: &out})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Run(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"OutboxSent":0`) || metricSum(t, out.String(), "OutboxSent") != 0 {
		t.Fatalf("an idle run emitted no OutboxSent datapoint of 0; metrics:\n%s", out.String())
	}
}
