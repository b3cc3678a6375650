package push_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/push"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// fakeDirectory maps agents to fixed connections and records forgets.
type fakeDirectory struct {
	mu      sync.Mutex
	conns   map[string][]string
	err     error
	lookups int
	forgot  []string
}

func (d *fakeDirectory) Targets(_ context.Context, agents []string) (map[string][]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lookups++
	if d.err != nil {
		return nil, d.err
	}
	out := map[string][]string{}
	for _, a := range agents {
		if c, ok := d.conns[a]; ok {
			out[a] = c
		}
	}
	return out, nil
}

func (d *fakeDirectory) Forget(_ context.Context, ids []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.forgot = append(d.forgot, ids...)
	return nil
}

func (d *fakeDirectory) forgotten() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(slices.Values(d.forgot))
}

// recordingRelay records what each connection received, in order. gone
// connections answer 410; block, when set, holds every Post until closed
// (after signalling entered); fail makes Post fail; panics makes it panic.
type recordingRelay struct {
	mu      sync.Mutex
	got     map[string][][]byte
	gone    map[string]bool
	block   chan struct{}
	entered chan struct{}
	fail    error
	panics  bool
}

func (r *recordingRelay) Post(ctx context.Context, msgs []push.Message) ([]string, error) {
	if r.entered != nil {
		select {
		case r.entered <- struct{}{}:
		default:
		}
	}
	if r.block != nil {
		<-r.block
	}
	if r.panics {
		panic("injected relay panic")
	}
	if r.fail != nil {
		return nil, r.fail
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string][][]byte{}
	}
	var gone []string
	for _, m := range msgs {
		if r.gone[m.ConnectionID] {
			if !slices.Contains(gone, m.ConnectionID) {
				gone = append(gone, m.ConnectionID)
			}
			continue
		}
		r.got[m.ConnectionID] = append(r.got[m.ConnectionID], m.Data)
	}
	return gone, nil
}

func (r *recordingRelay) Close(context.Context, []string) error { return nil }

func (r *recordingRelay) received(conn string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, d := range r.got[conn] {
		out = append(out, string(d))
	}
	return out
}

// value is a record value as the dispatcher's are: a JSON object.
func value(agent string, seq int64) []byte { return fmt.Appendf(nil, `{"rec":"%s-%d"}`, agent, seq) }

// unbatch lists the records frames carried, each batch frame's records in
// place of the frame; other frames are listed as they are.
func unbatch(t *testing.T, frames []string) []string {
	t.Helper()
	var out []string
	for _, f := range frames {
		recs, ok := batchOf(t, f)
		if !ok {
			out = append(out, f)
			continue
		}
		out = append(out, recs...)
	}
	return out
}

// batchOf decodes frame as a batch frame: its records, and false when it
// is not one. A batch frame must also read as a nudge for its last
// record's seq, so a meshd that does not read batches fetches them.
func batchOf(t *testing.T, frame string) ([]string, bool) {
	t.Helper()
	var f api.PushFrame
	if json.Unmarshal([]byte(frame), &f) != nil || len(f.Records) == 0 {
		return nil, false
	}
	if len(f.Records) < 2 || f.V != 2 || !f.Fetch || f.Sealed != nil || f.Bye != "" {
		t.Fatalf("batch frame %.200q: want {v:2, seq, fetch:true, records:[2 or more]}", frame)
	}
	var last struct {
		Rec string `json:"rec"`
	}
	recs := make([]string, len(f.Records))
	for i, r := range f.Records {
		recs[i] = string(r)
	}
	if json.Unmarshal(f.Records[len(f.Records)-1], &last) == nil && last.Rec != "" {
		if _, seq, _ := strings.Cut(last.Rec, "-"); seq != fmt.Sprint(f.Seq) {
			t.Fatalf("batch frame's seq is %d, want its last record's (%s)", f.Seq, last.Rec)
		}
	}
	return recs, true
}

func values(agent string, from, to int64) []string {
	var out []string
	for s := from; s <= to; s++ {
		out = append(out, string(value(agent, s)))
	}
	return out
}

// metricSum sums one metric over the EMF lines a sink wrote.
func metricSum(t *testing.T, out, name string) float64 {
	t.Helper()
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("metric line is not JSON: %s", sc.Text())
		}
		if v, ok := rec[name].(float64); ok {
			sum += v
		}
	}
	return sum
}

func drain(t *testing.T, s *push.Sender) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.Drain(ctx)
	if ctx.Err() != nil {
		t.Fatal("Drain did not finish in 10 s")
	}
}

func TestSenderPostsEachConnectionItsRecordsInOrder(t *testing.T) {
	tests := []struct {
		name  string
		batch int
	}{
		{"records sent in one round reach every connection of their agent in seq order", 1000},
		{"records spread over many small rounds keep their order per connection", 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := &fakeDirectory{conns: map[string][]string{"alice": {"a1", "a2"}, "bob": {"b1"}}}
			relay := &recordingRelay{}
			s := &push.Sender{Directory: dir, Relay: relay, Metrics: &metrics.Sink{W: &testenv.Buffer{}}, Batch: tc.batch, Parallel: 2}
			// Small records that fit a few frames, so none is nudged
			// however they fall into rounds.
			const n = 40
			for seq := int64(1); seq <= n; seq++ {
				s.Push("alice", seq, value("alice", seq))
				if seq <= 15 {
					s.Push("bob", seq, value("bob", seq))
				}
				if seq <= 5 {
					s.Push("carol", seq, value("carol", seq)) // no live connection
				}
			}
			drain(t, s)
			for conn, want := range map[string][]string{"a1": values("alice", 1, n), "a2": values("alice", 1, n), "b1": values("bob", 1, 15)} {
				if got := unbatch(t, relay.received(conn)); !slices.Equal(got, want) {
					t.Errorf("connection %s received %v, want %v", conn, got, want)
				}
			}
		})
	}
}

func TestSenderNudgesRecordsTooLargeForAMessage(t *testing.T) {
	tests := []struct {
		name      string
		size      int
		wantNudge bool
	}{
		{"a record of exactly MaxMessageBytes goes out as it is", push.MaxMessageBytes, false},
		{"a record one byte over MaxMessageBytes goes out as a nudge carrying its seq", push.MaxMessageBytes + 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := &fakeDirectory{conns: map[string][]string{"alice": {"a1"}}}
			relay := &recordingRelay{}
			var sink testenv.Buffer
			s := &push.Sender{Directory: dir, Relay: relay, Metrics: &metrics.Sink{W: &sink}}
			big := bytes.Repeat([]byte("x"), tc.size)
			s.Push("alice", 6, value("alice", 6))
			s.Push("alice", 7, big)
			s.Push("alice", 8, value("alice", 8))
			drain(t, s)
			got := relay.received("a1")
			if len(got) != 3 || got[0] != string(value("alice", 6)) || got[2] != string(value("alice", 8)) {
				t.Fatalf("a1 received %d frames around the large one, want 3 in order", len(got))
			}
			if !tc.wantNudge {
				if got[1] != string(big) {
					t.Fatalf("the record was altered (%d bytes), want it verbatim", len(got[1]))
				}
				return
			}
			var f api.PushFrame
			if err := json.Unmarshal([]byte(got[1]), &f); err != nil || f.V != 2 || f.Seq != 7 || !f.Fetch || f.Sealed != nil || f.Bye != "" {
				t.Fatalf("frame in place of seq 7: %.100q (%v), want the nudge {v:2, seq:7, fetch:true}", got[1], err)
			}
			if n := metricSum(t, sink.String(), "PushNudged"); n != 1 {
				t.Fatalf("PushNudged summed to %v, want 1", n)
			}
		})
	}
}

func TestSenderForgetsConnectionsThatAreGone(t *testing.T) {
	dir := &fakeDirectory{conns: map[string][]string{"alice": {"a1", "a2"}, "bob": {"b1"}}}
	relay := &recordingRelay{gone: map[string]bool{"a1": true, "b1": true}}
	var sink testenv.Buffer
	s := &push.Sender{Directory: dir, Relay: relay, Metrics: &metrics.Sink{W: &sink}}
	s.Push("alice", 1, value("alice", 1))
	s.Push("bob", 1, value("bob", 1))
	drain(t, s)
	if got := dir.forgotten(); !slices.Equal(got, []string{"a1", "b1"}) {
		t.Fatalf("forgot %v, want the gone connections [a1 b1]", got)
	}
	if got := relay.received("a2"); !slices.Equal(got, values("alice", 1, 1)) {
		t.Fatalf("the live connection a2 received %v", got)
	}
	if n := metricSum(t, sink.String(), "PushGone"); n != 2 {
		t.Fatalf("PushGone summed to %v, want 2", n)
	}
}

func TestSenderNeverBlocksPush(t *testing.T) {
	t.Run("a relay that blocks holds neither Push nor Drain, and a full queue drops and counts", func(t *testing.T) {
		dir := &fakeDirectory{conns: map[string][]string{"alice": {"a1"}}}
		relay := &recordingRelay{block: make(chan struct{}), entered: make(chan struct{}, 1)}
		var sink testenv.Buffer
		s := &push.Sender{Directory: dir, Relay: relay, Metrics: &metrics.Sink{W: &sink}, Queue: 10}
		s.Push("alice", 1, value("alice", 1))
		<-relay.entered // the worker is stuck in the relay with seq 1
		pushed := make(chan struct{})
		go func() {
			defer close(pushed)
			for seq := int64(2); seq <= 16; seq++ { // 10 fit the queue, 5 do not
				s.Push("alice", seq, value("alice", seq))
			}
		}()
		select {
		case <-pushed:
		case <-time.After(10 * time.Second):
			t.Fatal("Push blocked behind a stuck relay")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s.Drain(ctx) // must return: its context has ended
		if n := metricSum(t, sink.String(), "PushDropped"); n != 5 {
			t.Fatalf("PushDropped summed to %v, want the 5 records the full queue refused", n)
		}
		close(relay.block)
		drain(t, s)
		if got, want := unbatch(t, relay.received("a1")), values("alice", 1, 11); !slices.Equal(got, want) {
			t.Fatalf("after the relay recovered a1 received %v, want %v (the dropped ones are for the inbox)", got, want)
		}
	})

	t.Run("a relay or directory that fails or panics drops that round only and the next one goes out", func(t *testing.T) {
		for _, fault := range []string{"relay error", "relay panic", "directory error"} {
			dir := &fakeDirectory{conns: map[string][]string{"alice": {"a1"}}}
			relay := &recordingRelay{}
			switch fault {
			case "relay error":
				relay.fail = errors.New("injected relay failure")
			case "relay panic":
				relay.panics = true
			case "directory error":
				dir.err = errors.New("injected lookup failure")
			}
			var sink testenv.Buffer
			s := &push.Sender{Directory: dir, Relay: relay, Metrics: &metrics.Sink{W: &sink}}
			s.Push("alice", 1, value("alice", 1))
			drain(t, s)
			if n := metricSum(t, sink.String(), "PushDropped"); n != 1 {
				t.Fatalf("%s: PushDropped summed to %v, want 1", fault, n)
			}
			relay.fail, relay.panics = nil, false
			dir.mu.Lock()
			dir.err = nil
			dir.mu.Unlock()
			s.Push("alice", 2, value("alice", 2))
			drain(t, s)
			if got := relay.received("a1"); !slices.Equal(got, values("alice", 2, 2)) {
				t.Fatalf("%s: after the fault a1 received %v, want seq 2", fault, got)
			}
		}
	})
}

func TestSenderLooksUpTargetsOncePerRound(t *testing.T) {
	dir := &fakeDirectory{conns: map[string][]string{"alice": {"a1"}, "bob": {"b1"}}}
	relay := &recordingRelay{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	s := &push.Sender{Directory: dir, Relay: relay, Metrics: &metrics.Sink{W: &testenv.Buffer{}}}
	s.Push("alice", 1, value("alice", 1))
	<-relay.entered
	// Queued while the first round is out: they go together in the second.
	for seq := int64(2); seq <= 30; seq++ {
		s.Push("alice", seq, value("alice", seq))
		s.Push("bob", seq, value("bob", seq))
	}
	close(relay.block)
	drain(t, s)
	dir.mu.Lock()
	lookups := dir.lookups
	dir.mu.Unlock()
	if lookups != 2 {
		t.Fatalf("%d Targets lookups for 2 rounds, want 2", lookups)
	}
}

// nudgeOf decodes a frame that must be a nudge and returns its seq.
func nudgeOf(t *testing.T, frame string) int64 {
	t.Helper()
	var f api.PushFrame
	if err := json.Unmarshal([]byte(frame), &f); err != nil || f.V != 2 || !f.Fetch || f.Sealed != nil || f.Bye != "" {
		t.Fatalf("frame %.100q (%v), want a nudge {v:2, seq:N, fetch:true}", frame, err)
	}
	return f.Seq
}

// TestSenderQueueIsBoundedByBytes: the queue holds at most QueueBytes of
// record values, and a record too large for a message waits as its nudge,
// so a burst of large records cannot take the dispatcher's memory.
func TestSenderQueueIsBoundedByBytes(t *testing.T) {
	// rec is a JSON record value of 100 bytes.
	rec := func(seq int64) []byte {
		return fmt.Appendf(nil, `{"seq":"%04d","pad":"%s"}`, seq, strings.Repeat("x", 100-len(`{"seq":"0000","pad":""}`)))
	}
	t.Run("past QueueBytes of waiting records, Push drops and counts", func(t *testing.T) {
		dir := &fakeDirectory{conns: map[string][]string{"alice": {"a1"}}}
		relay := &recordingRelay{block: make(chan struct{}), entered: make(chan struct{}, 1)}
		var sink testenv.Buffer
		s := &push.Sender{Directory: dir, Relay: relay, Metrics: &metrics.Sink{W: &sink}, QueueBytes: 10 * 100}
		s.Push("alice", 1, rec(1))
		<-relay.entered                         // seq 1 is out of the queue, in the relay
		for seq := int64(2); seq <= 16; seq++ { // 10 fit in 1000 bytes, 5 do not
			s.Push("alice", seq, rec(seq))
		}
		close(relay.block)
		drain(t, s)
		if n := metricSum(t, sink.String(), "PushDropped"); n != 5 {
			t.Fatalf("PushDropped summed to %v, want the 5 records over the byte bound", n)
		}
		if got := unbatch(t, relay.received("a1")); len(got) != 11 || !strings.Contains(got[10], `"0011"`) {
			t.Fatalf("a1 received %d records, want seq 1 to 11", len(got))
		}
	})
	t.Run("a record over MaxMessageBytes waits as its nudge, taking no more room than that", func(t *testing.T) {
		dir := &fakeDirectory{conns: map[string][]string{"alice": {"a1"}}}
		relay := &recordingRelay{block: make(chan struct{}), entered: make(chan struct{}, 1)}
		var sink testenv.Buffer
		s := &push.Sender{Directory: dir, Relay: relay, Metrics: &metrics.Sink{W: &sink}, QueueBytes: 1 << 10}
		s.Push("alice", 1, rec(1))
		<-relay.entered
		s.Push("alice", 2, bytes.Repeat([]byte("y"), push.MaxMessageBytes+1))
		close(relay.block)
		drain(t, s)
		if n := metricSum(t, sink.String(), "PushDropped"); n != 0 {
			t.Fatalf("PushDropped summed to %v, want the large record queued as a nudge", n)
		}
		got := relay.received("a1")
		if len(got) != 2 || nudgeOf(t, got[1]) != 2 {
			t.Fatalf("a1 received %d frames, want seq 1 then the nudge for seq 2", len(got))
		}
	})
}

// TestSenderPacksABurstIntoBatchFrames: an agent's records of one round go
// out in batch frames of at most MaxMessageBytes, not one post per record;
// past MaxFramesPerConn frames the rest is one nudge for the highest seq
// (meshd reads it from the inbox); a lone record goes as itself.
func TestSenderPacksABurstIntoBatchFrames(t *testing.T) {
	// sized is a JSON record value of exactly size bytes.
	sized := func(agent string, seq int64, size int) []byte {
		v := value(agent, seq)
		pad := size - len(v) - len(`,"pad":""`)
		return append(v[:len(v)-1], fmt.Appendf(nil, `,"pad":"%s"}`, strings.Repeat("p", pad))...)
	}
	tests := []struct {
		name       string
		records    int
		size       int
		wantFrames int // frames per connection
		wantNudge  int64
	}{
		{"three hundred small records go in the few frames they fill, in seq order", 300, 1000, 3, 0},
		{"records that would need more than MaxFramesPerConn frames end in one nudge for the last seq", 30, 40 << 10, push.MaxFramesPerConn, 30},
		{"records that fill a frame to its last byte stay within MaxMessageBytes", 6, (push.MaxMessageBytes-64)/2 - 1, 3, 0},
		{"two records that would overflow a frame only by its envelope go in two", 2, (push.MaxMessageBytes-10)/2 - 1, 2, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := &fakeDirectory{conns: map[string][]string{"alice": {"a1", "a2"}, "bob": {"b1"}}}
			relay := &recordingRelay{block: make(chan struct{}), entered: make(chan struct{}, 1)}
			var sink testenv.Buffer
			s := &push.Sender{Directory: dir, Relay: relay, Metrics: &metrics.Sink{W: &sink}}
			s.Push("bob", 1, value("bob", 1))
			<-relay.entered // the first round holds bob's seq 1; the burst waits for the next
			var want []string
			for seq := int64(1); seq <= int64(tc.records); seq++ {
				v := sized("alice", seq, tc.size)
				s.Push("alice", seq, v)
				want = append(want, string(v))
			}
			close(relay.block)
			drain(t, s)
			for _, conn := range []string{"a1", "a2"} {
				got := relay.received(conn)
				if len(got) != tc.wantFrames {
					t.Fatalf("%s received %d frames, want %d", conn, len(got), tc.wantFrames)
				}
				for i, f := range got {
					if len(f) > push.MaxMessageBytes {
						t.Fatalf("%s frame %d is %d bytes, over MaxMessageBytes", conn, i, len(f))
					}
				}
				recs := got
				if tc.wantNudge != 0 {
					if seq := nudgeOf(t, got[len(got)-1]); seq != tc.wantNudge {
						t.Fatalf("%s's last frame nudges seq %d, want %d", conn, seq, tc.wantNudge)
					}
					recs = got[:len(got)-1]
				}
				carried := unbatch(t, recs)
				if !slices.Equal(carried, want[:len(carried)]) {
					t.Fatalf("%s's frames carry %d records, not alice's first ones in seq order", conn, len(carried))
				}
				if tc.wantNudge == 0 && len(carried) != tc.records {
					t.Fatalf("%s's frames carry %d records, want all %d", conn, len(carried), tc.records)
				}
			}
			if got := relay.received("b1"); !slices.Equal(got, values("bob", 1, 1)) {
				t.Fatalf("b1 received %v, want its lone record as it is", got)
			}
			if n := metricSum(t, sink.String(), "PushNudged"); n != float64(min(tc.wantNudge, 1)) {
				t.Fatalf("PushNudged summed to %v, want %d", n, min(tc.wantNudge, 1))
			}
		})
	}
}

// forgetCtxDirectory is a fakeDirectory that records whether the context
// Forget got had already ended.
type forgetCtxDirectory struct {
	fakeDirectory
	forgetErr []error
}

func (d *forgetCtxDirectory) Forget(ctx context.Context, ids []string) error {
	d.mu.Lock()
	d.forgetErr = append(d.forgetErr, ctx.Err())
	d.mu.Unlock()
	return d.fakeDirectory.Forget(ctx, ids)
}

// expiringRelay holds each Post until its context ends, then reports every
// connection gone: a round whose posts used up their time.
type expiringRelay struct{}

func (expiringRelay) Post(ctx context.Context, msgs []push.Message) ([]string, error) {
	<-ctx.Done()
	return []string{msgs[0].ConnectionID}, ctx.Err()
}

func (expiringRelay) Close(context.Context, []string) error { return nil }

// TestSenderForgetsWithAContextOfItsOwn: the gone connections of a round
// whose posts ran out of time are still forgotten: Forget does not run on
// the posts' ended context.
func TestSenderForgetsWithAContextOfItsOwn(t *testing.T) {
	dir := &forgetCtxDirectory{fakeDirectory: fakeDirectory{conns: map[string][]string{"alice": {"a1"}}}}
	s := &push.Sender{Directory: dir, Relay: expiringRelay{}, Metrics: &metrics.Sink{W: &testenv.Buffer{}}, Timeout: time.Millisecond}
	s.Push("alice", 1, value("alice", 1))
	drain(t, s)
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if !slices.Equal(dir.forgot, []string{"a1"}) || len(dir.forgetErr) != 1 || dir.forgetErr[0] != nil {
		t.Fatalf("forgot %v with context errors %v, want a1 forgotten with a live context", dir.forgot, dir.forgetErr)
	}
}
