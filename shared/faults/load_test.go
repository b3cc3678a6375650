package faults_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// Load and its bounds: alice sends to every recipient in turn, one send per
// sendEvery (25/s, half of an agent's rate limit).
const (
	partitions     = 3
	sendEvery      = 40 * time.Millisecond
	publishTimeout = 5 * time.Second // the dispatcher's publish bound in these tests
	drainTimeout   = 2 * time.Minute // every accepted send handled after the fault
	recoverTimeout = 2 * time.Minute // delivery resumes after a fault
)

var recipients = []string{"bob", "carol"}

// meshRun is one case's whole mesh on the cluster: a fresh database and topic,
// the API, the dispatcher and one meshd per recipient, with alice sending.
type meshRun struct {
	t       *testing.T
	c       *cluster
	stack   *localstacktest.Stack
	topic   string
	logs    map[string]*testenv.Buffer // each meshd's log
	dlog    *testenv.Buffer            // the dispatcher's log
	pub     *timedPublisher
	track   map[string]*tracker
	send    *sender
	stopped map[string]chan error // closed when a meshd's Run returns
	dir     string                // meshd's StateDir is dir/<agent>
}

// startMesh builds the mesh with the topic made by kafka.EnsureTopic, the
// code path of the migrate function (replication 3 and min.insync.replicas
// 2 on a cluster of three), and waits until every replica is in sync.
func startMesh(t *testing.T, c *cluster) *meshRun {
	t.Helper()
	t.Setenv("KAFKA_BROKERS", strings.Join(c.brokers, ","))
	m := &meshRun{t: t, c: c, logs: map[string]*testenv.Buffer{}, dlog: &testenv.Buffer{},
		track: map[string]*tracker{}, stopped: map[string]chan error{}}
	m.stack = localstacktest.Start(t, localstacktest.Options{Kafka: true, Partitions: partitions,
		Log: slog.New(slog.NewJSONHandler(m.dlog, nil))})
	m.topic = m.stack.Topic
	c.healthy(t, m.topic)
	d := m.stack.Dispatcher
	m.pub = &timedPublisher{inner: d.Publisher}
	d.Publisher, d.PublishTimeout = m.pub, publishTimeout
	d.Metrics = &metrics.Sink{W: io.Discard} // not onto the test's output

	keys := m.stack.Agents(t, append([]string{"alice"}, recipients...)...)
	for _, r := range recipients {
		m.stack.Befriend(t, "alice", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dispDone := make(chan error, 1)
	go func() { dispDone <- d.Run(ctx, time.Hour) }()
	t.Cleanup(func() { cancel(); <-dispDone })

	dir := t.TempDir()
	m.dir = dir
	for _, r := range recipients {
		tr := newTracker()
		m.track[r] = tr
		buf := &testenv.Buffer{}
		m.logs[r] = buf
		done := make(chan error, 1)
		m.stopped[r] = make(chan error)
		stopped := m.stopped[r]
		go func() {
			err := meshd.Run(ctx, meshd.Config{
				API: meshclient.New(m.stack.URL, keys[r]), StateDir: filepath.Join(dir, r), Mode: meshd.ModeKafka,
				Log: slog.New(slog.NewJSONHandler(buf, nil)), Handler: meshd.HandlerFunc(tr.handle),
			})
			done <- err
			close(stopped)
		}()
		t.Cleanup(func() { cancel(); <-done })
		buf.WaitLine(t, settleTimeout, "consuming the agent's own partition")
	}
	m.send = startSender(t, meshclient.New(m.stack.URL, keys["alice"]), m.track)
	// Delivery runs before any fault: every recipient has handled a send.
	for _, r := range recipients {
		if _, err := m.track[r].firstAfter(time.Time{}, recoverTimeout); err != nil {
			t.Fatalf("%s before any fault: %v\ndispatcher log:\n%s\nmeshd log:\n%s", r, err, m.dlog.String(), m.logs[r].String())
		}
	}
	return m
}

// partitionOf is the partition the recipient's events go to (and meshd reads).
func (m *meshRun) partitionOf(agent string) int32 { return kafka.PartitionFor(agent, partitions) }

// recovered waits until every recipient has handled a message sent after
// since, and returns the longest time that took.
func (m *meshRun) recovered(since time.Time) time.Duration {
	m.t.Helper()
	var worst time.Duration
	for _, r := range recipients {
		at, err := m.track[r].firstAfter(since, recoverTimeout)
		if err != nil {
			m.t.Fatalf("%s: %v\ndispatcher log:\n%s", r, err, tail(m.dlog.String(), 40))
		}
		worst = max(worst, at.Sub(since))
	}
	return worst
}

// finish stops the load, waits until every accepted send was handled and
// checks the case's guarantees: nothing lost, nothing reordered, seq gapless
// at the handler with no gap filled from the inbox API, at most one repeat
// per kill, no dead letter anywhere, meshd still running. It prints the counts.
func (m *meshRun) finish(name string, kills int) {
	t := m.t
	t.Helper()
	sent, failed := m.send.stop()
	if failed > 0 {
		t.Errorf("the API refused %d sends during the fault (last: %v); it must keep accepting them", failed, m.send.lastErr)
	}
	var total counts
	for _, r := range recipients {
		tr := m.track[r]
		want := sent[r]
		if err := tr.waitAll(want, drainTimeout); err != nil {
			t.Errorf("%s: %v", r, err)
		}
		c := tr.counts(want)
		total.add(c)
		if dls, err := meshd.ListDeadLetters(filepath.Join(m.dir, r), r); err == nil && len(dls) > 0 {
			c.deadLetters += len(dls)
			total.deadLetters += len(dls)
		}
		if c.gapsFilled = strings.Count(m.logs[r].String(), "gap in the"); c.gapsFilled > 0 {
			total.gapsFilled += c.gapsFilled
		}
		select {
		case <-m.stopped[r]:
			t.Errorf("%s's meshd stopped during the fault; it must keep running:\n%s", r, tail(m.logs[r].String(), 20))
		default:
		}
	}
	var failedRows int
	if err := m.stack.Env.DB.QueryRow("SELECT COUNT(*) FROM outbox_events WHERE delivery = 'failed'").Scan(&failedRows); err != nil {
		t.Fatal(err)
	}
	total.deadLetters += failedRows
	t.Logf("%s: sent=%d handled=%d lost=%d reordered=%d duplicates=%d (kills=%d) dead_letters=%d gaps_filled_from_api=%d",
		name, total.sent, total.handled, total.lost, total.reordered, total.duplicates, kills, total.deadLetters, total.gapsFilled)
	figure("- %s: sent %d, handled %d, lost %d, reordered %d, duplicates %d (kills %d), dead letters %d",
		name, total.sent, total.handled, total.lost, total.reordered, total.duplicates, kills, total.deadLetters)
	if total.lost != 0 || total.reordered != 0 || total.duplicates > kills || total.deadLetters != 0 || total.gapsFilled != 0 || total.sent == 0 {
		t.Errorf("%s broke a guarantee: %+v (kills %d)", name, total, kills)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// counts are one case's figures over its recipients.
type counts struct {
	sent, handled, lost, reordered, duplicates, deadLetters, gapsFilled int
}

func (c *counts) add(o counts) {
	c.sent += o.sent
	c.handled += o.handled
	c.lost += o.lost
	c.reordered += o.reordered
	c.duplicates += o.duplicates
	c.deadLetters += o.deadLetters
	c.gapsFilled += o.gapsFilled
}

// tracker is one recipient's handler: it records every event it is given.
type tracker struct {
	mu       sync.Mutex
	lastSeq  int64
	seen     map[int64]int        // seq -> times handled
	messages map[string]int       // message_id -> times handled
	handled  map[string]time.Time // message_id -> when first handled
	sentAt   map[string]time.Time // message_id -> when the API accepted it
	reorder  int
	changed  chan struct{} // closed and replaced on every event
}

func newTracker() *tracker {
	return &tracker{seen: map[int64]int{}, messages: map[string]int{}, handled: map[string]time.Time{},
		sentAt: map[string]time.Time{}, changed: make(chan struct{})}
}

// handle is the meshd handler: seq must go up by exactly one each time.
func (tr *tracker) handle(_ context.Context, env mesh.Envelope) error {
	now := time.Now()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.seen[env.Seq]++
	switch {
	case tr.seen[env.Seq] > 1: // a repeat: counted by duplicates
	case env.Seq != tr.lastSeq+1:
		tr.reorder++
	}
	tr.lastSeq = max(tr.lastSeq, env.Seq)
	if env.Type == mesh.EventMessage {
		tr.messages[env.MessageID]++
		if _, ok := tr.handled[env.MessageID]; !ok {
			tr.handled[env.MessageID] = now
		}
	}
	close(tr.changed)
	tr.changed = make(chan struct{})
	return nil
}

// accepted records that the API took message id at time at.
func (tr *tracker) accepted(id string, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.sentAt[id] = at
	close(tr.changed)
	tr.changed = make(chan struct{})
}

// wait blocks until cond (under the lock) holds, woken by every event,
// failing after d.
func (tr *tracker) wait(d time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		tr.mu.Lock()
		ok, ch := cond(), tr.changed
		tr.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-deadline.C:
			return fmt.Errorf("not within %v: %s", d, what)
		}
	}
}

// firstAfter waits for the first message accepted after since to be
// handled, and returns when that happened.
func (tr *tracker) firstAfter(since time.Time, d time.Duration) (time.Time, error) {
	var at time.Time
	err := tr.wait(d, "a message sent after "+since.Format(time.StampMilli)+" handled", func() bool {
		for id, h := range tr.handled {
			if s, ok := tr.sentAt[id]; ok && s.After(since) && (at.IsZero() || h.Before(at)) {
				at = h
			}
		}
		return !at.IsZero()
	})
	return at, err
}

// waitAll waits until every message of ids was handled.
func (tr *tracker) waitAll(ids []string, d time.Duration) error {
	return tr.wait(d, fmt.Sprintf("all %d accepted messages handled", len(ids)), func() bool {
		for _, id := range ids {
			if tr.messages[id] == 0 {
				return false
			}
		}
		return true
	})
}

// counts compares what was handled with the accepted sends.
func (tr *tracker) counts(ids []string) counts {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	c := counts{sent: len(ids), reordered: tr.reorder}
	for _, id := range ids {
		if tr.messages[id] == 0 {
			c.lost++
		}
	}
	for _, n := range tr.messages {
		c.handled += n
	}
	for _, n := range tr.seen {
		c.duplicates += n - 1
	}
	// Seq gapless at the handler: 1..lastSeq, each at least once.
	for s := int64(1); s <= tr.lastSeq; s++ {
		if tr.seen[s] == 0 {
			c.lost++
		}
	}
	return c
}

// sender is alice's load: one send every sendEvery, to each recipient in turn.
type sender struct {
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	ids     map[string][]string
	failed  int
	lastErr error
}

func startSender(t *testing.T, api *meshclient.Client, track map[string]*tracker) *sender {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sender{cancel: cancel, done: make(chan struct{}), ids: map[string][]string{}}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(sendEvery)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			to := recipients[i%len(recipients)]
			sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := api.Send(sctx, meshclient.SendRequest{To: to, Parts: []mesh.Part{{Kind: "text", Text: fmt.Sprintf("load %d", i)}}})
			scancel()
			if ctx.Err() != nil {
				return // stopped mid-send: the send may or may not count; it is not awaited
			}
			s.mu.Lock()
			if err != nil {
				s.failed++
				s.lastErr = err
			} else {
				s.ids[to] = append(s.ids[to], res.MessageID)
			}
			s.mu.Unlock()
			if err == nil {
				track[to].accepted(res.MessageID, time.Now())
			}
		}
	}()
	t.Cleanup(func() { s.cancel(); <-s.done })
	return s
}

// stop ends the load and returns the accepted message ids by recipient
// and how many sends failed.
func (s *sender) stop() (map[string][]string, int) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids, s.failed
}

// count is how many sends were accepted so far.
func (s *sender) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ids := range s.ids {
		n += len(ids)
	}
	return n
}

// timedPublisher is the dispatcher's real KafkaPublisher, timed: each
// publish's duration and whether it failed.
type timedPublisher struct {
	inner dispatch.Publisher
	mu    sync.Mutex
	calls []publishCall
	ch    chan struct{}
}

type publishCall struct {
	at, end time.Time
	err     error
}

func (p *timedPublisher) Publish(ctx context.Context, recs []*kgo.Record) []error {
	start := time.Now()
	errs := p.inner.Publish(ctx, recs)
	var first error
	for _, e := range errs {
		if e != nil {
			first = e
			break
		}
	}
	p.mu.Lock()
	p.calls = append(p.calls, publishCall{at: start, end: time.Now(), err: first})
	if p.ch != nil {
		close(p.ch)
	}
	p.ch = make(chan struct{})
	p.mu.Unlock()
	return errs
}

// failedSince waits for a publish started after since to fail, and returns
// the longest publish since then.
func (p *timedPublisher) failedSince(t *testing.T, since time.Time, d time.Duration) time.Duration {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		var failed bool
		var longest time.Duration
		for _, c := range p.calls {
			if c.at.After(since) {
				longest = max(longest, c.end.Sub(c.at))
				failed = failed || c.err != nil
			}
		}
		if p.ch == nil {
			p.ch = make(chan struct{})
		}
		ch := p.ch
		p.mu.Unlock()
		if failed {
			return longest
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no publish failed within %v of losing the quorum", d)
		}
	}
}

// longestPause is the longest time between two consecutive handled messages
// of any recipient since since, while the load kept sending.
func (m *meshRun) longestPause(since time.Time) time.Duration {
	var worst time.Duration
	for _, r := range recipients {
		tr := m.track[r]
		tr.mu.Lock()
		var ts []time.Time
		for _, h := range tr.handled {
			if h.After(since) {
				ts = append(ts, h)
			}
		}
		tr.mu.Unlock()
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		prev := since
		for _, h := range ts {
			worst = max(worst, h.Sub(prev))
			prev = h
		}
	}
	return worst
}
