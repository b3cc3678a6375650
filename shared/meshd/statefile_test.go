package meshd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/statedir"
)

func sampleState(seq int64) State {
	return State{
		AgentID: "bob", LastSeq: seq, Offset: seq * 2, Topic: "inbox.events", Partition: 3,
		LastAt:    time.Date(2026, 12, 2, 15, 0, 0, 123456789, time.UTC).Add(time.Duration(seq) * time.Second),
		UpdatedAt: time.Date(2026, 12, 2, 16, 0, 0, 987654321, time.UTC),
	}
}

// saved opens a state file in a fresh dir and saves states 1..n through one
// handle, as a run does.
func saved(t *testing.T, n int64) (dir string) {
	t.Helper()
	dir = t.TempDir()
	sf, _, err := openStateFile(dir, "bob")
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= n; i++ {
		if err := sf.Save(sampleState(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sf.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func slotGen(t *testing.T, dir string, slot int) (uint64, bool) {
	t.Helper()
	data, err := os.ReadFile(StatePath(dir, "bob"))
	if err != nil {
		t.Fatal(err)
	}
	_, gen, ok := decodeSlot(data[slot*stateSlotSize:])
	return gen, ok
}

func TestStateFileRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		s    State
	}{
		{name: "every field comes back as saved", s: sampleState(7)},
		{name: "zero times and no offset come back as zero", s: State{AgentID: "bob", LastSeq: 4, Offset: -1}},
		{name: "the longest agent id and topic fit", s: State{AgentID: strings.Repeat("b", 64), Offset: 1, Topic: strings.Repeat("t", 249), Partition: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sf, _, err := openStateFile(dir, tc.s.AgentID)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 { // the first save creates; the next two use each slot
				if err := sf.Save(tc.s); err != nil {
					t.Fatal(err)
				}
			}
			_ = sf.Close()
			got, err := LoadState(dir, tc.s.AgentID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflectEqualState(got, tc.s) {
				t.Errorf("got %+v, want %+v", got, tc.s)
			}
			fi, err := os.Stat(StatePath(dir, tc.s.AgentID))
			if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != stateFileSize {
				t.Errorf("state file %v err %v, want 0600 and %d bytes", fi, err, stateFileSize)
			}
		})
	}
}

func reflectEqualState(a, b State) bool {
	return a.AgentID == b.AgentID && a.LastSeq == b.LastSeq && a.Offset == b.Offset && a.Topic == b.Topic &&
		a.Partition == b.Partition && a.LastAt.Equal(b.LastAt) && a.UpdatedAt.Equal(b.UpdatedAt)
}

func TestStateFileAlternatesSlots(t *testing.T) {
	cases := []struct {
		name     string
		saves    int64
		newest   int
		wantGens [2]uint64
	}{
		{name: "the first save creates the file with slot 0 newest", saves: 1, newest: 0, wantGens: [2]uint64{1, 0}},
		{name: "the second save lands in the other slot", saves: 2, newest: 1, wantGens: [2]uint64{1, 2}},
		{name: "the third save lands back in the first slot", saves: 3, newest: 0, wantGens: [2]uint64{3, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := saved(t, tc.saves)
			for slot := range 2 {
				gen, ok := slotGen(t, dir, slot)
				if !ok || gen != tc.wantGens[slot] {
					t.Errorf("slot %d: gen %d valid %v, want gen %d", slot, gen, ok, tc.wantGens[slot])
				}
			}
			if s, err := LoadState(dir, "bob"); err != nil || s.LastSeq != tc.saves {
				t.Errorf("state %+v err %v, want last_seq %d", s, err, tc.saves)
			}
		})
	}
	t.Run("a reopened file goes on in the slot not holding the newest record", func(t *testing.T) {
		dir := saved(t, 2) // slot 1 newest
		sf, s, err := openStateFile(dir, "bob")
		if err != nil || s.LastSeq != 2 {
			t.Fatalf("state %+v err %v", s, err)
		}
		if err := sf.Save(sampleState(3)); err != nil {
			t.Fatal(err)
		}
		_ = sf.Close()
		if gen, ok := slotGen(t, dir, 0); !ok || gen != 3 {
			t.Errorf("slot 0 gen %d valid %v, want 3", gen, ok)
		}
	})
}

func TestStateFileSurvivesATornSlot(t *testing.T) {
	// Three saves: slot 0 holds seq 3 (newest), slot 1 seq 2.
	cases := []struct {
		name    string
		damage  func(data []byte) []byte
		wantSeq int64
		wantErr string
	}{
		{name: "a flipped byte in the newest slot falls back to the previous state",
			damage: func(d []byte) []byte { d[20] ^= 0xff; return d }, wantSeq: 2},
		{name: "a newest slot written only halfway falls back to the previous state",
			damage: func(d []byte) []byte { clear(d[stateSlotSize/2 : stateSlotSize]); return d }, wantSeq: 2},
		{name: "a bad magic in the newest slot falls back to the previous state",
			damage: func(d []byte) []byte { copy(d, "XXXX"); return d }, wantSeq: 2},
		{name: "a file cut short keeps the slot that is whole",
			damage: func(d []byte) []byte { return d[:stateSlotSize+100] }, wantSeq: 3},
		{name: "a damaged older slot does not matter",
			damage: func(d []byte) []byte { d[stateSlotSize+20] ^= 0xff; return d }, wantSeq: 3},
		{name: "both slots corrupt is an error naming the file, not a reset",
			damage: func(d []byte) []byte { d[20] ^= 0xff; d[stateSlotSize+20] ^= 0xff; return d }, wantErr: "bob.state is corrupt"},
		{name: "an empty file is an error, not a reset",
			damage: func(d []byte) []byte { return nil }, wantErr: "bob.state is corrupt"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := saved(t, 3)
			path := StatePath(dir, "bob")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(data), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, load := range []func() (State, error){
				func() (State, error) { return LoadState(dir, "bob") },
				func() (State, error) {
					sf, s, err := openStateFile(dir, "bob")
					if err == nil {
						_ = sf.Close()
					}
					return s, err
				},
			} {
				s, err := load()
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("err = %v, want %q", err, tc.wantErr)
					}
					continue
				}
				if err != nil || s.LastSeq != tc.wantSeq {
					t.Fatalf("state %+v err %v, want last_seq %d", s, err, tc.wantSeq)
				}
			}
		})
	}
	t.Run("a save after a torn slot overwrites the torn slot, not the good one", func(t *testing.T) {
		dir := saved(t, 3)
		path := StatePath(dir, "bob")
		data, _ := os.ReadFile(path)
		data[20] ^= 0xff // slot 0 (seq 3) torn: slot 1 (seq 2) is the newest valid
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := SaveState(dir, sampleState(4)); err != nil {
			t.Fatal(err)
		}
		if gen, ok := slotGen(t, dir, 1); !ok || gen != 2 {
			t.Errorf("slot 1 gen %d valid %v: the save overwrote the only good slot", gen, ok)
		}
		if s, err := LoadState(dir, "bob"); err != nil || s.LastSeq != 4 {
			t.Errorf("state %+v err %v, want last_seq 4", s, err)
		}
	})
}

func TestStateFileRefusesWhatItCannotHold(t *testing.T) {
	cases := []struct {
		name    string
		s       State
		wantErr string
	}{
		{name: "a topic longer than Kafka allows is refused", s: State{AgentID: "bob", Topic: strings.Repeat("t", 250)}, wantErr: "does not fit"},
		{name: "a negative seq is refused", s: State{AgentID: "bob", LastSeq: -1}, wantErr: "impossible"},
		{name: "an offset below -1 is refused", s: State{AgentID: "bob", Offset: -2}, wantErr: "impossible"},
		{name: "an agent id longer than the mesh allows is refused", s: State{AgentID: strings.Repeat("b", 65)}, wantErr: "invalid agent id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := saved(t, 1)
			if err := SaveState(dir, tc.s); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if s, err := LoadState(dir, "bob"); err != nil || s.LastSeq != 1 {
				t.Errorf("state %+v err %v: a refused save changed the file", s, err)
			}
		})
	}
	t.Run("a state file of another agent is refused", func(t *testing.T) {
		dir := saved(t, 1)
		if err := os.Rename(StatePath(dir, "bob"), StatePath(dir, "carol")); err != nil {
			t.Fatal(err)
		}
		for _, load := range []func() error{
			func() error { _, err := LoadState(dir, "carol"); return err },
			func() error { _, _, err := openStateFile(dir, "carol"); return err },
		} {
			if err := load(); err == nil || !strings.Contains(err.Error(), `belongs to agent "bob", not "carol"`) {
				t.Errorf("err = %v", err)
			}
		}
	})
}

func TestStateFileConvertsTheOldFormat(t *testing.T) {
	old := sampleState(9)
	oldJSON, _ := json.Marshal(old)
	cases := []struct {
		name       string
		newToo     bool // a crash after the new file was made, before the old one was removed
		wantSeq    int64
		wantOldGon bool
	}{
		{name: "an old JSON state is converted and removed", wantSeq: 9},
		{name: "a conversion that crashed before removing the old file keeps the new one", newToo: true, wantSeq: 9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(legacyStatePath(dir, "bob"), oldJSON, 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.newToo {
				sf, _, err := openStateFile(dir, "bob")
				if err != nil {
					t.Fatal(err)
				}
				_ = sf.Close()
				if err := os.WriteFile(legacyStatePath(dir, "bob"), oldJSON, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// Status reads the old file as it is while a run may hold the lock.
			if s, err := LoadState(dir, "bob"); err != nil || s.LastSeq != tc.wantSeq {
				t.Fatalf("LoadState %+v err %v", s, err)
			}
			sf, s, err := openStateFile(dir, "bob")
			if err != nil {
				t.Fatal(err)
			}
			defer sf.Close()
			if !reflectEqualState(s, old) {
				t.Errorf("converted %+v, want %+v", s, old)
			}
			if _, err := os.Stat(legacyStatePath(dir, "bob")); !os.IsNotExist(err) {
				t.Errorf("old state file still there (err %v)", err)
			}
			if got, err := LoadState(dir, "bob"); err != nil || !reflectEqualState(got, old) {
				t.Errorf("new file holds %+v err %v", got, err)
			}
			if err := sf.Save(sampleState(10)); err != nil {
				t.Fatal(err)
			}
			if got, err := LoadState(dir, "bob"); err != nil || got.LastSeq != 10 {
				t.Errorf("after a save %+v err %v", got, err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 || entries[0].Name() != "bob.state" {
				t.Errorf("state dir holds %v, want bob.state alone", entries)
			}
		})
	}
	t.Run("a run that handles nothing leaves no state file", func(t *testing.T) {
		dir := t.TempDir()
		sf, s, err := openStateFile(dir, "bob")
		if err != nil || s.LastSeq != 0 || s.Offset != -1 {
			t.Fatalf("fresh state %+v err %v", s, err)
		}
		_ = sf.Close()
		if ok, err := StateExists(dir, "bob"); ok || err != nil {
			t.Errorf("StateExists = %v, %v", ok, err)
		}
	})
}

// BenchmarkStateSave compares one mark of a handled event: the slotted
// file's WriteAt + fdatasync against the JSON file through statedir.Put
// (temp file, fsync, rename, directory fsync).
func BenchmarkStateSave(b *testing.B) {
	b.Run("slotted file", func(b *testing.B) {
		dir := b.TempDir()
		sf, _, err := openStateFile(dir, "bob")
		if err != nil {
			b.Fatal(err)
		}
		defer sf.Close()
		s := sampleState(1)
		if err := sf.Save(s); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			s.LastSeq++
			if err := sf.Save(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json through statedir.Put", func(b *testing.B) {
		dir := b.TempDir()
		s := sampleState(1)
		for i := 0; i < b.N; i++ {
			s.LastSeq++
			data, err := json.Marshal(s)
			if err != nil {
				b.Fatal(err)
			}
			if err := statedir.Put(dir, filepath.Base(legacyStatePath(dir, "bob")), data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestStateFileSaveIsDurableWhenItReturns checks that a save has synced
// when it returns, and that a failed sync refuses every later save (the
// page cache can no longer be trusted).
func TestStateFileSaveIsDurableWhenItReturns(t *testing.T) {
	open := func(t *testing.T) (string, *stateFile) {
		dir := saved(t, 1) // created: slot 0 holds gen 1
		sf, _, err := openStateFile(dir, "bob")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sf.Close() })
		return dir, sf
	}
	watch := func(t *testing.T, fail error) *int {
		old := syncState
		n := 0
		syncState = func(f *os.File) error {
			if fail != nil {
				return fail
			}
			err := old(f)
			n++
			return err
		}
		t.Cleanup(func() { syncState = old })
		return &n
	}
	t.Run("each save has synced the file when it returns", func(t *testing.T) {
		dir, sf := open(t)
		synced := watch(t, nil)
		for seq := int64(2); seq <= 4; seq++ {
			if err := sf.Save(sampleState(seq)); err != nil {
				t.Fatal(err)
			}
			if want := int(seq - 1); *synced != want {
				t.Fatalf("after the save of seq %d: %d syncs done, want %d", seq, *synced, want)
			}
		}
		if s, err := LoadState(dir, "bob"); err != nil || s.LastSeq != 4 {
			t.Errorf("state %+v err %v, want last_seq 4", s, err)
		}
	})
	t.Run("a failed sync refuses this save and every later one", func(t *testing.T) {
		_, sf := open(t)
		watch(t, os.ErrInvalid)
		if err := sf.Save(sampleState(2)); err == nil || !strings.Contains(err.Error(), "sync state") {
			t.Errorf("save whose sync failed: %v, want the sync's failure", err)
		}
		syncState = datasync
		if err := sf.Save(sampleState(3)); err == nil || !strings.Contains(err.Error(), "sync state") {
			t.Errorf("save after a failed sync: %v, want the sync's failure", err)
		}
	})
}
