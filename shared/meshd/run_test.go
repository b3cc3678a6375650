package meshd_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	"github.com/agentmesh/agentmesh/shared/testenv"
)

const partitions = 3

// fixture: a real Kafka topic, a fake HTTP API for agent "bob", a sealer
// standing in for the dispatcher, and a state dir.
type fixture struct {
	t       *testing.T
	api     *fakeAPI
	apiURL  string
	brokers []string
	topic   string
	sealer  *seal.Sealer
	prod    *kgo.Client
	dir     string
	logs    *testenv.Buffer
}

// newSealer is a sealer on a fresh random master key, standing in for the
// dispatcher's.
func newSealer(t testing.TB) *seal.Sealer {
	t.Helper()
	master := make([]byte, seal.KeySize)
	_, _ = rand.Read(master)
	s, err := seal.New(master)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newFixture(t *testing.T, withKafka bool) *fixture {
	t.Helper()
	s := newSealer(t)
	// A master key under which bob's routing id and his agent id hash to
	// different partitions: consuming the partition of the agent id (as
	// envelope v1 did) then misses every record, whatever the draw.
	for kafka.PartitionFor(s.RoutingID("bob"), partitions) == kafka.PartitionFor("bob", partitions) {
		s = newSealer(t)
	}
	f := &fixture{t: t, sealer: s, dir: t.TempDir(), logs: &testenv.Buffer{}}
	if withKafka {
		var err error
		f.brokers = kafkatest.Brokers(t)
		f.topic = kafkatest.Topic(t, f.brokers, partitions)
		f.prod, err = kafka.NewProducer(context.Background(), kafka.Options{Brokers: f.brokers}, f.topic)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.prod.Close)
	}
	api, srv := newFakeAPI(t, "bob", s, f.brokers, f.topic)
	f.api, f.apiURL = api, srv.URL
	return f
}

// record seals env like the dispatcher does (envelope v2: key = the
// recipient's routing id, the whole event sealed).
func (f *fixture) record(env mesh.Envelope) *kgo.Record {
	f.t.Helper()
	key, value, err := f.sealer.SealEvent(env)
	if err != nil {
		f.t.Fatal(err)
	}
	return &kgo.Record{Key: key, Value: value}
}

// bobsPartition is the partition bob's routing id hashes to.
func (f *fixture) bobsPartition() int32 {
	return kafka.PartitionFor(f.sealer.RoutingID("bob"), partitions)
}

// produce publishes records in order and waits for the acks.
func (f *fixture) produce(recs ...*kgo.Record) {
	f.t.Helper()
	if err := f.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		f.t.Fatal(err)
	}
}

// neighbour is another agent whose records land on bob's partition.
func (f *fixture) neighbour(t *testing.T) string {
	want := f.bobsPartition()
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("carol-%d", i)
		if kafka.PartitionFor(f.sealer.RoutingID(id), partitions) == want {
			return id
		}
	}
	t.Fatal("no agent id shares bob's partition")
	return ""
}

// recorder is a handler that records what it saw, in order.
type recorder struct {
	mu    sync.Mutex
	seqs  []int64
	texts []string
	fail  func(env mesh.Envelope, attempt int) error
	tries map[int64]int
	ch    chan struct{}
}

func newRecorder() *recorder { return &recorder{tries: map[int64]int{}, ch: make(chan struct{}, 1000)} }

func (h *recorder) Handle(ctx context.Context, env mesh.Envelope) error {
	h.mu.Lock()
	h.tries[env.Seq]++
	attempt := h.tries[env.Seq]
	fail := h.fail
	h.mu.Unlock()
	if fail != nil {
		if err := fail(env, attempt); err != nil {
			return err
		}
	}
	var body struct {
		Parts []mesh.Part `json:"parts"`
	}
	if err := json.Unmarshal(env.Body, &body); err != nil || len(body.Parts) != 1 || env.V != mesh.EnvelopeVersion {
		return fmt.Errorf("handler got a body that is not opened: %q (v%d)", env.Body, env.V)
	}
	h.mu.Lock()
	h.seqs = append(h.seqs, env.Seq)
	h.texts = append(h.texts, body.Parts[0].Text)
	h.mu.Unlock()
	h.ch <- struct{}{}
	return nil
}

func (h *recorder) handled() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seqs)
}

// waitFor waits until n events were handled.
func (h *recorder) waitFor(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for len(h.handled()) < n {
		select {
		case <-h.ch:
		case <-deadline:
			t.Fatalf("handled %v, want %d events within %v", h.handled(), n, timeout)
		}
	}
}

// waitForSeq waits until the event seq was handled.
func (h *recorder) waitForSeq(t *testing.T, seq int64, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for !slices.Contains(h.handled(), seq) {
		select {
		case <-h.ch:
		case <-deadline:
			t.Fatalf("handled %v, want seq %d within %v", h.handled(), seq, timeout)
		}
	}
}

// fence commits one more event for bob (published to Kafka too when the
// fixture has it) and waits until the handler got it. Delivery is in seq
// order from an ordered partition, so whatever meshd would still deliver
// from before the fence (a late duplicate above all) reached the handler
// first: no sleeping and hoping.
func (f *fixture) fence(t *testing.T, h *recorder) int64 {
	t.Helper()
	env := f.api.add(mesh.EventMessage, "alice", "fence")
	if f.prod != nil {
		f.produce(f.record(env))
	}
	h.waitForSeq(t, env.Seq, 30*time.Second)
	return env.Seq
}

// running is one Run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func (f *fixture) start(h meshd.Handler, mod func(*meshd.Config)) *running {
	f.t.Helper()
	cfg := meshd.Config{
		API:       meshclient.New(f.apiURL, "amk_test"),
		StateDir:  f.dir,
		Handler:   h,
		Log:       slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Mode:      meshd.ModeKafka,
		RetryBase: 10 * time.Millisecond,
		RetryMax:  50 * time.Millisecond,
		// Handler retries as fast as API retries, so attempt limits are
		// reached within the test.
		HandlerBackoff:    10 * time.Millisecond,
		HandlerBackoffMax: 50 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- meshd.Run(ctx, cfg) }()
	f.t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// stop cancels Run and returns its result.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop within 30 s")
		return nil
	}
}

func (f *fixture) state() meshd.State {
	f.t.Helper()
	s, err := meshd.LoadState(f.dir, "bob")
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func seqs(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func TestKafkaDeliveryIsInOrderAndExactlyOnce(t *testing.T) {
	f := newFixture(t, true)
	carol := f.neighbour(t)
	var recs []*kgo.Record
	for i := 1; i <= 20; i++ {
		recs = append(recs, f.record(f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i))))
		if i%4 == 0 {
			// Mail for another agent on the same partition, sealed for it,
			// whose seq is the one bob expects next.
			other := mesh.Envelope{EventID: fmt.Sprintf("c%d", i), Seq: int64(i + 1), Type: mesh.EventMessage, To: carol, From: "alice",
				KeyEpoch: 1, Body: json.RawMessage(`{"parts":[{"kind":"text","text":"for carol"}]}`)}
			recs = append(recs, f.record(other))
		}
	}
	f.produce(recs...)
	h := newRecorder()
	r := f.start(h, nil)
	h.waitFor(t, 20, 30*time.Second)
	fence := f.fence(t, h) // seq 21, at the partition's next offset
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	t.Run("every event reaches the handler once, in seq order", func(t *testing.T) {
		if got := h.handled(); !slices.Equal(got, seqs(1, fence)) {
			t.Errorf("handled %v", got)
		}
	})
	t.Run("the handler sees the opened body of each event", func(t *testing.T) {
		for i, text := range h.texts[:20] {
			if want := fmt.Sprintf("m%d", i+1); text != want {
				t.Errorf("event %d body text %q, want %q", i+1, text, want)
			}
		}
	})
	t.Run("records of another agent on the shared partition are skipped", func(t *testing.T) {
		if slices.Contains(h.texts, "for carol") {
			t.Error("the handler got carol's mail")
		}
	})
	t.Run("nothing came from the inbox API: Kafka had everything", func(t *testing.T) {
		for s := int64(1); s <= 20; s++ {
			if n := f.api.servedCount(s); n != 0 {
				t.Errorf("seq %d fetched from the inbox %d times", s, n)
			}
		}
	})
	t.Run("the state holds the last seq and the last consumed offset", func(t *testing.T) {
		st := f.state()
		if st.LastSeq != fence || st.Offset != int64(len(recs)) || st.Topic != f.topic || st.Partition != f.bobsPartition() {
			t.Errorf("state = %+v, want last_seq %d, offset %d (the fence's)", st, fence, len(recs))
		}
	})
	t.Run("stopping marks the agent offline once", func(t *testing.T) {
		f.api.mu.Lock()
		defer f.api.mu.Unlock()
		if f.api.offline != 1 || len(f.api.beats) == 0 {
			t.Errorf("offline calls %d, heartbeats %d", f.api.offline, len(f.api.beats))
		}
		if f.api.lastBeat.After(f.api.offAt) {
			t.Error("a heartbeat was sent after going offline")
		}
	})
}

func TestAGapInKafkaIsFilledFromTheInboxInOrder(t *testing.T) {
	f := newFixture(t, true)
	var envs []mesh.Envelope
	for i := 1; i <= 5; i++ {
		envs = append(envs, f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i)))
	}
	// Seq 3 never reached Kafka (dead-lettered by the dispatcher, say).
	f.produce(f.record(envs[0]), f.record(envs[1]), f.record(envs[3]), f.record(envs[4]))
	h := newRecorder()
	r := f.start(h, nil)
	h.waitFor(t, 5, 30*time.Second)
	fence := f.fence(t, h)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, seqs(1, fence)) {
		t.Errorf("handled %v, want 1..%d in order", got, fence)
	}
	if f.api.servedCount(3) == 0 {
		t.Error("seq 3 was not read from the inbox API")
	}
	if got := h.texts[2]; got != "m3" {
		t.Errorf("seq 3 body %q", got)
	}
}

func TestADuplicateRecordRunsTheHandlerOnce(t *testing.T) {
	f := newFixture(t, true)
	e1 := f.api.add(mesh.EventMessage, "alice", "m1")
	e2 := f.api.add(mesh.EventMessage, "alice", "m2")
	e3 := f.api.add(mesh.EventStatus, "alice", "m3")
	// A dispatcher killed after publishing but before marking publishes
	// again: the same seqs appear twice, even out of place.
	f.produce(f.record(e1), f.record(e2), f.record(e2), f.record(e1), f.record(e3), f.record(e2), f.record(e3))
	h := newRecorder()
	r := f.start(h, nil)
	h.waitFor(t, 3, 30*time.Second)
	// The fence (seq 4, offset 7) comes after every duplicate.
	f.fence(t, h)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Errorf("handled %v, want [1 2 3] and the fence 4", got)
	}
	if st := f.state(); st.Offset != 7 {
		t.Errorf("consumed offset %d, want 7 (the duplicates at 5 and 6 consumed, then the fence)", st.Offset)
	}
}

func TestARestartNeverRerunsHandledEventsAndContinues(t *testing.T) {
	f := newFixture(t, true)
	// A record of bob's that does not open, at offset 0 (it stands for seq
	// 1, read from the inbox API): re-reading it after a restart would log
	// it again.
	f.produce(&kgo.Record{Key: []byte(f.sealer.RoutingID("bob")), Value: []byte("not json")})
	var envs []mesh.Envelope
	for i := 1; i <= 6; i++ {
		envs = append(envs, f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i)))
	}
	f.produce(f.record(envs[0]), f.record(envs[1]), f.record(envs[2]))

	first := newRecorder()
	r := f.start(first, nil)
	first.waitFor(t, 3, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := f.state(); st.LastSeq != 3 || st.Offset != 3 {
		t.Fatalf("state after the first run = %+v, want last_seq 3 offset 3", st)
	}
	skipsBefore := strings.Count(f.logs.String(), "cannot open a Kafka record")

	// While meshd is down: new events and a redelivery of an old one.
	f.produce(f.record(envs[3]), f.record(envs[1]), f.record(envs[4]), f.record(envs[5]))
	second := newRecorder()
	r = f.start(second, nil)
	second.waitFor(t, 3, 30*time.Second)
	fence := f.fence(t, second) // after the redelivered seq 2
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	t.Run("the second run handles only the new events, in order", func(t *testing.T) {
		if got := second.handled(); !slices.Equal(got, []int64{4, 5, 6, fence}) {
			t.Errorf("second run handled %v, want [4 5 6 %d]", got, fence)
		}
	})
	t.Run("the second run resumes after the persisted offset", func(t *testing.T) {
		if skipsBefore != 1 {
			t.Fatalf("the first run logged %d unopenable records, want 1", skipsBefore)
		}
		if n := strings.Count(f.logs.String(), "cannot open a Kafka record"); n != 1 {
			t.Errorf("offset 0 was read again after the restart (%d skips logged)", n)
		}
	})
	t.Run("each run heartbeats with its own instance id", func(t *testing.T) {
		f.api.mu.Lock()
		defer f.api.mu.Unlock()
		ids := slices.Compact(slices.Clone(f.api.beats))
		if len(ids) != 2 || ids[0] == ids[1] {
			t.Errorf("instance ids %v, want two different ones", f.api.beats)
		}
	})
}

func TestAFailingHandlerIsRetriedAndLaterEventsWait(t *testing.T) {
	f := newFixture(t, true)
	var recs []*kgo.Record
	for i := 1; i <= 4; i++ {
		recs = append(recs, f.record(f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i))))
	}
	f.produce(recs...)
	h := newRecorder()
	var order []string
	var mu sync.Mutex
	h.fail = func(env mesh.Envelope, attempt int) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, fmt.Sprintf("%d#%d", env.Seq, attempt))
		if env.Seq == 2 && attempt <= 3 {
			return errors.New("the LLM is busy")
		}
		return nil
	}
	r := f.start(h, nil)
	h.waitFor(t, 4, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	want := []string{"1#1", "2#1", "2#2", "2#3", "2#4", "3#1", "4#1"}
	if !slices.Equal(order, want) {
		t.Errorf("attempts %v, want %v", order, want)
	}
	if got := h.handled(); !slices.Equal(got, seqs(1, 4)) {
		t.Errorf("handled %v", got)
	}
}

func TestAPanickingHandlerIsRetriedNotFatal(t *testing.T) {
	f := newFixture(t, false)
	f.api.add(mesh.EventMessage, "alice", "m1")
	h := newRecorder()
	h.fail = func(env mesh.Envelope, attempt int) error {
		if attempt == 1 {
			panic("boom")
		}
		return nil
	}
	r := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
	h.waitFor(t, 1, 10*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.logs.String(), "handler panic: boom") {
		t.Error("the panic was not logged as a handler failure")
	}
}

func TestStopLetsTheCurrentHandlerFinishAndMarksIt(t *testing.T) {
	f := newFixture(t, false)
	f.api.add(mesh.EventMessage, "alice", "m1")
	f.api.add(mesh.EventMessage, "alice", "m2")
	started := make(chan struct{})
	release := make(chan struct{})
	h := newRecorder()
	h.fail = func(env mesh.Envelope, attempt int) error {
		if env.Seq == 1 {
			close(started)
			<-release
		}
		return nil
	}
	r := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
	<-started
	r.cancel()
	// Run saw the stop while the handler ran.
	f.logs.WaitLine(t, 10*time.Second, "stopping: waiting for the handler to finish its event")
	close(release)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, []int64{1}) {
		t.Errorf("handled %v, want only the event in progress", got)
	}
	if st := f.state(); st.LastSeq != 1 {
		t.Errorf("the finished event was not marked: %+v", st)
	}
}

func TestUnopenableRecordsAreReadFromTheInbox(t *testing.T) {
	cases := []struct {
		name   string
		mangle func(f *fixture, env mesh.Envelope) *kgo.Record
	}{
		{"a record sealed under an older key epoch", func(f *fixture, env mesh.Envelope) *kgo.Record {
			env.KeyEpoch = 0
			return f.record(env)
		}},
		{"a record whose sealed event was tampered with", func(f *fixture, env mesh.Envelope) *kgo.Record {
			rec := f.record(env)
			var v seal.Record
			_ = json.Unmarshal(rec.Value, &v)
			raw, _ := base64.StdEncoding.DecodeString(v.Sealed)
			raw[len(raw)/2] ^= 1
			v.Sealed = base64.StdEncoding.EncodeToString(raw)
			rec.Value, _ = json.Marshal(v)
			return rec
		}},
		{"a record sealed for another agent under bob's routing id", func(f *fixture, env mesh.Envelope) *kgo.Record {
			env.To = "carol"
			rec := f.record(env)
			rec.Key = []byte(f.sealer.RoutingID("bob"))
			return rec
		}},
		{"a record that is not an envelope v2", func(f *fixture, env mesh.Envelope) *kgo.Record {
			return &kgo.Record{Key: []byte(f.sealer.RoutingID("bob")), Value: []byte(`{"v":1,"to":"bob","seq":2}`)}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			e1 := f.api.add(mesh.EventMessage, "alice", "m1")
			e2 := f.api.add(mesh.EventMessage, "alice", "m2")
			e3 := f.api.add(mesh.EventMessage, "alice", "m3")
			f.produce(f.record(e1), tc.mangle(f, e2), f.record(e3))
			h := newRecorder()
			r := f.start(h, nil)
			h.waitFor(t, 3, 30*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if got := h.handled(); !slices.Equal(got, seqs(1, 3)) || h.texts[1] != "m2" {
				t.Errorf("handled %v texts %v", got, h.texts)
			}
			if f.api.servedCount(2) == 0 {
				t.Error("seq 2 was not read from the inbox API")
			}
		})
	}
}

// TestAnUnopenableRepeatIsSkipped: a record of bob's that does not open
// while the inbox API has nothing after the handled seq repeats a handled
// event; it is consumed, and the next event still comes from Kafka.
func TestAnUnopenableRepeatIsSkipped(t *testing.T) {
	f := newFixture(t, true)
	e1 := f.api.add(mesh.EventMessage, "alice", "m1")
	e2 := f.api.add(mesh.EventMessage, "alice", "m2")
	repeat := e1
	repeat.KeyEpoch = 0
	f.produce(f.record(e1), f.record(e2), f.record(repeat))
	// Signals once the inbox API answered a read after seq 2: from then
	// on, seq 3 arriving cannot change what meshd learnt for the repeat.
	readAfter2 := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.api.ServeHTTP(w, r)
		if r.URL.Path == "/v1/inbox" && r.URL.Query().Get("after") == "2" {
			once.Do(func() { close(readAfter2) })
		}
	}))
	t.Cleanup(srv.Close)
	h := newRecorder()
	r := f.start(h, func(c *meshd.Config) { c.API = meshclient.New(srv.URL, "amk_test") })
	h.waitFor(t, 2, 30*time.Second)
	f.logs.WaitLine(t, 10*time.Second, "cannot open a Kafka record")
	select {
	case <-readAfter2:
	case <-time.After(10 * time.Second):
		t.Fatalf("meshd did not ask the inbox API about the repeat\n%s", f.logs.String())
	}
	e3 := f.api.add(mesh.EventMessage, "alice", "m3")
	f.produce(f.record(e3))
	h.waitFor(t, 3, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, seqs(1, 3)) {
		t.Errorf("handled %v", got)
	}
	if n := f.api.servedCount(3); n != 0 {
		t.Errorf("seq 3 was read from the inbox %d times: the repeat was not skipped", n)
	}
	if st := f.state(); st.Offset != 3 {
		t.Errorf("state %+v, want offset 3 (the repeat consumed)", st)
	}
}

func TestARotatedKeyIsFetchedNotWorkedAround(t *testing.T) {
	f := newFixture(t, true)
	e1 := f.api.add(mesh.EventMessage, "alice", "m1")
	f.produce(f.record(e1))
	h := newRecorder()
	r := f.start(h, nil)
	h.waitFor(t, 1, 30*time.Second)
	// The operator rotates bob's inbox key: later events are sealed under
	// epoch 2, which meshd's first token does not know.
	f.api.mu.Lock()
	f.api.epoch = 2
	f.api.mu.Unlock()
	e2 := f.api.add(mesh.EventMessage, "alice", "m2")
	e3 := f.api.add(mesh.EventMessage, "alice", "m3")
	f.produce(f.record(e2), f.record(e3))
	h.waitFor(t, 3, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, seqs(1, 3)) {
		t.Errorf("handled %v", got)
	}
	for _, s := range []int64{2, 3} {
		if n := f.api.servedCount(s); n != 0 {
			t.Errorf("seq %d was read from the inbox %d times instead of opened with the new key", s, n)
		}
	}
}

// TestAnEpochTheMeshDoesNotHandOutCostsOneRefresh: records sealed under an
// epoch no token brings (a mesh misconfigured, a forged label) cost one
// token refresh in all, not one per record, and come from the inbox API.
func TestAnEpochTheMeshDoesNotHandOutCostsOneRefresh(t *testing.T) {
	f := newFixture(t, true)
	var recs []*kgo.Record
	for i := 1; i <= 4; i++ {
		e := f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i))
		e.KeyEpoch = 7
		recs = append(recs, f.record(e))
	}
	f.produce(recs...)
	h := newRecorder()
	r := f.start(h, nil)
	h.waitFor(t, 4, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	f.api.mu.Lock()
	tokens := f.api.tokens
	f.api.mu.Unlock()
	if got := h.handled(); !slices.Equal(got, seqs(1, 4)) || tokens != 2 {
		t.Errorf("handled %v with %d token exchanges, want 1..4 with 2 (the first and one refresh)", got, tokens)
	}
}

// quickStalls makes meshd heartbeat every 50 ms and call its stream stalled
// after 300 ms without records, so the catch-up through heartbeats that
// the stall tests wait for comes within a second.
func quickStalls(c *meshd.Config) {
	c.HeartbeatEvery = 50 * time.Millisecond
	c.StallAfter = 300 * time.Millisecond
}

func TestAMissingNewestEventIsCaughtUpThroughHeartbeats(t *testing.T) {
	f := newFixture(t, true)
	e1 := f.api.add(mesh.EventMessage, "alice", "m1")
	e2 := f.api.add(mesh.EventMessage, "alice", "m2")
	f.api.add(mesh.EventMessage, "alice", "m3") // committed, never on Kafka, nothing after it
	f.produce(f.record(e1), f.record(e2))
	h := newRecorder()
	r := f.start(h, quickStalls)
	h.waitFor(t, 3, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, seqs(1, 3)) {
		t.Errorf("handled %v", got)
	}
	if f.api.servedCount(3) == 0 {
		t.Error("seq 3 did not come from the inbox API")
	}
}

// fetchCounter counts what the consumer read from the broker and says when
// it read anything, and when it read more than limit.
type fetchCounter struct {
	bytes       atomic.Int64
	limit       int64
	first, over chan struct{}
	once, past  sync.Once
}

func newFetchCounter(limit int64) *fetchCounter {
	return &fetchCounter{limit: limit, first: make(chan struct{}), over: make(chan struct{})}
}

func (c *fetchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	total := c.bytes.Add(int64(m.UncompressedBytes))
	c.once.Do(func() { close(c.first) })
	if total > c.limit {
		c.past.Do(func() { close(c.over) })
	}
}

func TestASlowHandlerGrowsLagNotMemory(t *testing.T) {
	f := newFixture(t, true)
	const n, size = 1000, 8 << 10 // 8 MB waiting on the broker
	filler := strings.Repeat("x", size)
	var recs []*kgo.Record
	for i := 1; i <= n; i++ {
		recs = append(recs, f.record(f.api.add(mesh.EventMessage, "alice", filler)))
	}
	f.produce(recs...)
	release := make(chan struct{})
	h := newRecorder()
	h.fail = func(env mesh.Envelope, attempt int) error {
		if env.Seq == 1 {
			<-release
		}
		return nil
	}
	const bound = 3 << 20
	counter := newFetchCounter(bound)
	r := f.start(h, func(c *meshd.Config) { c.KafkaOpts = []kgo.Opt{kgo.WithHooks(counter)} })
	select {
	case <-counter.first:
	case <-time.After(30 * time.Second):
		t.Fatalf("the consumer read nothing within 30 s\n%s", f.logs.String())
	}
	// The handler is stuck on seq 1. An unbounded consumer reads the 8 MB
	// waiting within a fraction of this window and fails at once; "nothing
	// more is read" has no event to wait for, so a bounded one passes when
	// the window ends.
	select {
	case <-counter.over:
	case <-time.After(3 * time.Second):
	}
	read := counter.bytes.Load()
	close(release)
	h.waitFor(t, n, 60*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if read == 0 || read > bound {
		t.Errorf("with the handler stuck, the consumer read %d bytes of the %d waiting; want a bounded buffer (≤ 3 MiB)", read, n*size)
	}
	if total := counter.bytes.Load(); total < int64(n*size) {
		t.Errorf("after release the consumer read only %d bytes", total)
	}
}

func TestPollModeDeliversThroughTheInboxAPI(t *testing.T) {
	cases := []struct {
		name string
		mode string
	}{
		{"poll mode long-polls the inbox", meshd.ModePoll},
		{"auto mode falls back to the inbox when Kafka does not answer", meshd.ModeAuto},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			f.api.brokers, f.api.topic = []string{"127.0.0.1:1"}, "inbox.events"
			f.api.add(mesh.EventMessage, "alice", "m1")
			f.api.add(mesh.EventMessage, "alice", "m2")
			h := newRecorder()
			r := f.start(h, func(c *meshd.Config) {
				c.Mode = tc.mode
				c.ProbeTimeout = 500 * time.Millisecond
				c.PollWait = 5 * time.Second
			})
			h.waitFor(t, 2, 20*time.Second)
			// Arrivals while a long-poll is waiting wake it up.
			f.api.add(mesh.EventStatus, "alice", "m3")
			f.api.add(mesh.EventMessage, "alice", "m4")
			h.waitFor(t, 4, 10*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if got := h.handled(); !slices.Equal(got, seqs(1, 4)) {
				t.Errorf("handled %v", got)
			}
			if tc.mode == meshd.ModeAuto && !strings.Contains(f.logs.String(), "poll mode") {
				t.Error("auto mode did not log that it chose poll mode")
			}
			if st := f.state(); st.LastSeq != 4 || st.Offset != -1 {
				t.Errorf("state %+v", st)
			}
		})
	}
}

func TestExpiredEventsAreReportedAndSkippedOnlyPastRetention(t *testing.T) {
	f := newFixture(t, false)
	for i := 1; i <= 5; i++ {
		f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i))
	}
	f.api.oldest = 4 // seqs 1..3 were deleted by the janitor before meshd ever ran
	h := newRecorder()
	r := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
	h.waitFor(t, 2, 10*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, []int64{4, 5}) {
		t.Errorf("handled %v", got)
	}
	if !strings.Contains(f.logs.String(), "expired before they were handled") {
		t.Error("the loss was not logged")
	}
}

func TestRunRefusesWhatRetryingCannotFix(t *testing.T) {
	t.Run("a state file of another agent is an error", func(t *testing.T) {
		f := newFixture(t, false)
		data, _ := json.Marshal(meshd.State{AgentID: "alice", LastSeq: 3})
		if err := os.WriteFile(filepath.Join(f.dir, "bob.state.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		h := newRecorder()
		r := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
		select {
		case err := <-r.done:
			r.done <- err
			if err == nil || !strings.Contains(err.Error(), `belongs to agent "alice"`) {
				t.Errorf("err = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not refuse the state file")
		}
	})
	t.Run("a state ahead of the mesh's inbox is refused, not trusted", func(t *testing.T) {
		f := newFixture(t, false)
		f.api.add(mesh.EventMessage, "alice", "m1")
		if err := meshd.SaveState(f.dir, meshd.State{AgentID: "bob", LastSeq: 7, Offset: -1}); err != nil {
			t.Fatal(err)
		}
		h := newRecorder()
		r := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
		select {
		case err := <-r.done:
			r.done <- err
			if err == nil || !strings.Contains(err.Error(), "belongs to another mesh") {
				t.Errorf("err = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run trusted a state from another mesh")
		}
		if len(h.handled()) != 0 {
			t.Errorf("handled %v", h.handled())
		}
	})
	t.Run("a second meshd on the same state dir is refused", func(t *testing.T) {
		f := newFixture(t, false)
		h := newRecorder()
		first := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
		// Let the first one take the lock.
		f.logs.WaitLine(t, 10*time.Second, "meshd started")
		second := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
		select {
		case err := <-second.done:
			second.done <- err
			if err == nil || !strings.Contains(err.Error(), "already running") {
				t.Errorf("err = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the second meshd did not refuse to run")
		}
		if err := first.stop(t); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a rejected API key is an error, not a retry loop", func(t *testing.T) {
		f := newFixture(t, false)
		done := make(chan error, 1)
		go func() {
			done <- meshd.Run(context.Background(), meshd.Config{
				API: meshclient.New(f.apiURL, "amk_revoked"), StateDir: f.dir, Handler: newRecorder(),
				Log: slog.New(slog.NewTextHandler(f.logs, nil)),
			})
		}()
		select {
		case err := <-done:
			if !meshclient.IsStatus(err, 401) {
				t.Errorf("err = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run kept retrying a client error")
		}
	})
	t.Run("a missing handler is a configuration error", func(t *testing.T) {
		err := meshd.Run(context.Background(), meshd.Config{API: meshclient.New("http://127.0.0.1:1", "k"), StateDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "Handler") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestLogsCarryNoSecrets(t *testing.T) {
	f := newFixture(t, false)
	f.api.add(mesh.EventMessage, "alice", "m1")
	h := newRecorder()
	r := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
	h.waitFor(t, 1, 10*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	tok, _ := meshclient.New(f.apiURL, "amk_test").Token(context.Background())
	for _, secret := range []string{"amk_test", tok.InboxKeys[0].Key, `"tok"`} {
		if strings.Contains(f.logs.String(), secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
}

// TestAnUnopenableRecordPastRetentionIsSkippedNotRetriedForever covers a
// Kafka record that does not open (here: sealed under a retired key epoch)
// whose event the inbox no longer holds: Kafka kept it longer than the
// outbox retention. It is reported as expired and the stream goes on, as
// for expired events found through the inbox.
func TestAnUnopenableRecordPastRetentionIsSkippedNotRetriedForever(t *testing.T) {
	f := newFixture(t, true)
	e1 := f.api.add(mesh.EventMessage, "alice", "m1")
	e2 := f.api.add(mesh.EventMessage, "alice", "m2")
	e3 := f.api.add(mesh.EventMessage, "alice", "m3")
	f.api.mu.Lock()
	f.api.oldest = 3 // seqs 1 and 2 are gone from MySQL, still on Kafka
	f.api.mu.Unlock()
	old := e1
	old.KeyEpoch = 0
	f.produce(f.record(old), f.record(e2), f.record(e3))
	h := newRecorder()
	r := f.start(h, nil)
	h.waitFor(t, 2, 10*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.handled(); !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("handled %v, want [2 3]", got)
	}
	if !strings.Contains(f.logs.String(), "expired before they were handled") {
		t.Error("the loss was not logged")
	}
}
