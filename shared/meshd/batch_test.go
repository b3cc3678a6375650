package meshd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// batchRecorder is a batch handler: it records each batch (its seqs) and
// each single-event run, and fails what fail says.
type batchRecorder struct {
	*recorder
	mu        sync.Mutex
	batches   [][]int64
	failBatch func(seqs []int64) error
}

func newBatchRecorder() *batchRecorder { return &batchRecorder{recorder: newRecorder()} }

func (b *batchRecorder) HandleBatch(_ context.Context, envs []mesh.Envelope) error {
	var got []int64
	for _, env := range envs {
		got = append(got, env.Seq)
	}
	b.mu.Lock()
	b.batches = append(b.batches, got)
	fail := b.failBatch
	b.mu.Unlock()
	if fail != nil {
		if err := fail(got); err != nil {
			return err
		}
	}
	b.recorder.mu.Lock()
	b.recorder.seqs = append(b.recorder.seqs, got...)
	b.recorder.mu.Unlock()
	for range envs {
		b.ch <- struct{}{}
	}
	return nil
}

func (b *batchRecorder) seenBatches() [][]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.batches)
}

// ends waits for Run to end by itself and returns its result.
func (r *running) ends(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not end within 30 s")
		return nil
	}
}

// errCrash stands for the process dying before a mark.
var errCrash = errors.New("simulated crash before the mark")

// crashOnce makes the first mark under the fixture's state dir "crash" and
// records every mark's seq.
func crashOnce(t *testing.T, dir string) func() []int64 {
	var mu sync.Mutex
	var marks []int64
	crashed := false
	meshd.CrashBeforeMark(t, dir, func(seq int64) error {
		mu.Lock()
		defer mu.Unlock()
		if !crashed {
			crashed = true
			return errCrash
		}
		marks = append(marks, seq)
		return nil
	})
	return func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(marks)
	}
}

func TestACrashBetweenHandlerAndMarkRunsTheWorkOnceMoreAtMost(t *testing.T) {
	cases := []struct {
		name  string
		batch int
		// want is what the handler saw over both runs, in order.
		want        []int64
		wantBatches [][]int64
	}{
		{"a single event handled before the crash runs once more, and nothing else does", 1,
			[]int64{1, 1, 2, 3, 4, 5}, nil},
		{"a batch handled before the crash runs once more, whole, and nothing is skipped", 10,
			[]int64{1, 2, 3, 4, 5, 1, 2, 3, 4, 5}, [][]int64{{1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			carol := f.neighbour(t)
			var recs []*kgo.Record
			for i := 1; i <= 5; i++ {
				recs = append(recs, f.record(f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i))))
				// Another agent's mail between bob's: a batch spans it.
				recs = append(recs, f.record(mesh.Envelope{EventID: fmt.Sprintf("c%d", i), Seq: int64(i), Type: mesh.EventMessage, To: carol,
					From: "alice", KeyEpoch: 1, Body: json.RawMessage(`{"parts":[{"kind":"text","text":"for carol"}]}`)}))
			}
			f.produce(recs...) // one produce: the first fetch holds all of them
			marks := crashOnce(t, f.dir)
			h := newBatchRecorder()
			batch := func(c *meshd.Config) { c.Batch = tc.batch }

			r := f.start(h, batch)
			if err := r.ends(t); !errors.Is(err, errCrash) {
				t.Fatalf("first run ended with %v, want the simulated crash", err)
			}
			if st := f.state(); st.LastSeq != 0 {
				t.Fatalf("the crashed mark left state %+v, want nothing handled", st)
			}
			r = f.start(h, batch)
			h.waitFor(t, len(tc.want), 30*time.Second)
			fence := f.fence(t, h.recorder)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if got := h.handled(); !slices.Equal(got, append(slices.Clone(tc.want), fence)) {
				t.Errorf("handled %v, want %v then the fence %d", got, tc.want, fence)
			}
			if got := h.seenBatches(); !slices.EqualFunc(got, tc.wantBatches, slices.Equal) {
				t.Errorf("batches %v, want %v", got, tc.wantBatches)
			}
			// One mark per handled event, or one per batch, at its last event.
			wantMarks := []int64{1, 2, 3, 4, 5, fence}
			if tc.batch > 1 {
				wantMarks = []int64{5, fence}
			}
			if got := marks(); !slices.Equal(got, wantMarks) {
				t.Errorf("marks at %v, want %v", got, wantMarks)
			}
			if st := f.state(); st.LastSeq != fence || st.Offset != int64(len(recs)) {
				t.Errorf("state %+v, want last_seq %d at offset %d", st, fence, len(recs))
			}
		})
	}
}

func TestAFailedBatchMarksNothingAndRunsItsEventsOneByOne(t *testing.T) {
	f := newFixture(t, false)
	for i := 1; i <= 4; i++ {
		f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i))
	}
	var mu sync.Mutex
	var marks []int64
	meshd.CrashBeforeMark(t, f.dir, func(seq int64) error {
		mu.Lock()
		defer mu.Unlock()
		marks = append(marks, seq)
		return nil
	})
	h := newBatchRecorder()
	h.failBatch = func([]int64) error { return errors.New("the batch consumer crashed") }
	h.fail = func(env mesh.Envelope, _ int) error {
		if env.Seq == 2 {
			return errors.New("seq 2 is bad")
		}
		return nil
	}
	r := f.start(h, func(c *meshd.Config) {
		c.Mode, c.Batch, c.HandlerAttempts = meshd.ModePoll, 10, 2
	})
	h.waitFor(t, 3, 10*time.Second)
	waitUntil(t, "seq 4 is marked", 10*time.Second, func() bool { return f.state().LastSeq == 4 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	t.Run("the batch ran once, with every event of the page", func(t *testing.T) {
		if got := h.seenBatches(); !slices.EqualFunc(got, [][]int64{{1, 2, 3, 4}}, slices.Equal) {
			t.Errorf("batches %v", got)
		}
	})
	t.Run("the failed batch marked nothing: each event was marked alone, in order", func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(marks, []int64{1, 2, 3, 4}) {
			t.Errorf("marks at %v, want 1, 2, 3, 4", marks)
		}
	})
	t.Run("the bad event alone was retried and parked; the others were handled", func(t *testing.T) {
		if got := h.handled(); !slices.Equal(got, []int64{1, 3, 4}) {
			t.Errorf("handled %v, want 1, 3, 4", got)
		}
		h.recorder.mu.Lock()
		tries := h.tries[2]
		h.recorder.mu.Unlock()
		if tries != 2 {
			t.Errorf("seq 2 tried %d times alone, want 2 (HandlerAttempts)", tries)
		}
		dls, err := meshd.ListDeadLetters(f.dir, "bob")
		if err != nil || len(dls) != 1 || dls[0].Seq != 2 {
			t.Errorf("dead letters %+v (%v), want seq 2 alone", dls, err)
		}
	})
}

func TestBatchSizeIsBounded(t *testing.T) {
	cases := []struct {
		name  string
		batch int
		ok    bool
	}{
		{"zero means the default of one", 0, true},
		{"one is a run per event", 1, true},
		{"the largest allowed batch is accepted", meshd.MaxBatch, true},
		{"a negative batch is refused", -1, false},
		{"a batch over the bound is refused", meshd.MaxBatch + 1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			h := newBatchRecorder()
			r := f.start(h, func(c *meshd.Config) { c.Mode, c.Batch = meshd.ModePoll, tc.batch })
			if tc.ok {
				f.fence(t, h.recorder)
			}
			err := r.stop(t)
			if tc.ok != (err == nil) || (!tc.ok && !strings.Contains(err.Error(), "batch size")) {
				t.Errorf("Run with batch %d: %v", tc.batch, err)
			}
		})
	}
}

func TestACommandHandlerBatchGetsOneEnvelopePerLine(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "stdin")
	env := filepath.Join(dir, "env")
	h := meshd.CommandHandler{Command: []string{"sh", "-c", `cat > "$OUT"; env > "$ENVOUT"`},
		Env: []string{"OUT=" + out, "ENVOUT=" + env, "MESH_BATCH=99"}}
	envs := []mesh.Envelope{
		{V: mesh.EnvelopeVersion, EventID: "e1", Seq: 7, Type: mesh.EventMessage, To: "bob", From: "alice", TaskID: "t1", Body: json.RawMessage(`{"a":1}`)},
		{V: mesh.EnvelopeVersion, EventID: "e2", Seq: 8, Type: mesh.EventMessage, To: "bob", From: "alice", TaskID: "t2", Body: json.RawMessage(`{"a":2}`)},
	}
	if err := h.HandleBatch(context.Background(), envs); err != nil {
		t.Fatal(err)
	}
	stdin, _ := os.ReadFile(out)
	environ, _ := os.ReadFile(env)
	t.Run("stdin is each envelope's JSON on its own line, in order", func(t *testing.T) {
		lines := strings.Split(strings.TrimSuffix(string(stdin), "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("stdin %q, want two lines", stdin)
		}
		for i, l := range lines {
			var got mesh.Envelope
			if err := json.Unmarshal([]byte(l), &got); err != nil || got.Seq != envs[i].Seq || got.EventID != envs[i].EventID {
				t.Errorf("line %d = %q (%v)", i, l, err)
			}
		}
	})
	t.Run("the environment says MESH_BATCH and no single event's fields", func(t *testing.T) {
		m := envMap(string(environ))
		if m["MESH_BATCH"] != "2" {
			t.Errorf("MESH_BATCH = %q, want 2 (an inherited one is dropped)", m["MESH_BATCH"])
		}
		if _, ok := m["MESH_SEQ"]; ok {
			t.Error("a batch run got MESH_SEQ")
		}
	})
	t.Run("a single-event run never inherits MESH_BATCH", func(t *testing.T) {
		if err := h.Handle(context.Background(), envs[0]); err != nil {
			t.Fatal(err)
		}
		environ, _ := os.ReadFile(env)
		if m := envMap(string(environ)); m["MESH_BATCH"] != "" || m["MESH_SEQ"] != "7" {
			t.Errorf("single run env MESH_BATCH=%q MESH_SEQ=%q", m["MESH_BATCH"], m["MESH_SEQ"])
		}
	})
	t.Run("a failing batch is an error", func(t *testing.T) {
		bad := meshd.CommandHandler{Command: []string{"sh", "-c", "cat >/dev/null; exit 3"}}
		if err := bad.HandleBatch(context.Background(), envs); err == nil || !strings.Contains(err.Error(), "status 3") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestABatchStopsBeforeItsStdinPassesTheBound(t *testing.T) {
	f := newFixture(t, false)
	big := strings.Repeat("x", 3<<20) // three of these pass MaxBatchBytes, two do not
	for range 3 {
		f.api.add(mesh.EventMessage, "alice", big)
	}
	f.api.add(mesh.EventMessage, "alice", "small")
	h := newBatchRecorder()
	r := f.start(h, func(c *meshd.Config) { c.Mode, c.Batch = meshd.ModePoll, 10 })
	h.waitFor(t, 4, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.seenBatches(); !slices.EqualFunc(got, [][]int64{{1, 2}, {3, 4}}, slices.Equal) {
		t.Errorf("batches %v, want 1-2 then 3-4: each stops before the event that would pass %d bytes", got, meshd.MaxBatchBytes)
	}
	if got := h.handled(); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Errorf("handled %v", got)
	}
}

// A handled event's mark is durable before the next event's handler
// starts, so a crash of the machine, not only of meshd, reruns at most the
// event whose handler had not been marked: between the starts of two
// handlers at least one state fdatasync has completed.
func TestAMarkIsSyncedBeforeTheNextHandlerStarts(t *testing.T) {
	f := newFixture(t, true)
	var recs []*kgo.Record
	for i := 1; i <= 6; i++ {
		recs = append(recs, f.record(f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i))))
	}
	f.produce(recs...)
	var syncs atomic.Int64
	meshd.OnStateSync(t, func() { syncs.Add(1) })
	h := newRecorder()
	var mu sync.Mutex
	atStart := map[int64]int64{} // seq -> syncs completed when its handler started
	h.fail = func(env mesh.Envelope, _ int) error {
		mu.Lock()
		atStart[env.Seq] = syncs.Load()
		mu.Unlock()
		return nil
	}
	r := f.start(h, nil)
	h.waitFor(t, 6, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The first mark creates the file (its own fsyncs); from the second on
	// every mark is one Save.
	for seq := int64(3); seq <= 6; seq++ {
		if atStart[seq] <= atStart[seq-1] {
			t.Errorf("the handler of seq %d started with %d syncs done, as many as when seq %d's started: the mark of seq %d was not durable yet",
				seq, atStart[seq], seq-1, seq-1)
		}
	}
}
