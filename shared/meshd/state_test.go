package meshd_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentmesh/agentmesh/shared/meshd"
)

func TestStateIsWrittenAtomically(t *testing.T) {
	dir := t.TempDir()
	const writes = 300
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var torn []string
	var regress []int64
	wg.Add(1)
	// A reader racing the writer must only ever see a complete state, and
	// never go back in time: a truncate-and-write would show empty or
	// partial files here.
	go func() {
		defer wg.Done()
		var seen int64
		for {
			select {
			case <-stop:
				return
			default:
			}
			s, err := meshd.LoadState(dir, "bob")
			if err != nil {
				torn = append(torn, err.Error())
				continue
			}
			if s.LastSeq < seen {
				regress = append(regress, s.LastSeq)
			}
			seen = s.LastSeq
		}
	}()
	for i := int64(1); i <= writes; i++ {
		// The longest topic fills the record, so a torn write would show.
		if err := meshd.SaveState(dir, meshd.State{AgentID: "bob", LastSeq: i, Offset: i * 2, Topic: strings.Repeat("t", 249)}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()

	t.Run("a concurrent reader never sees a torn file", func(t *testing.T) {
		if len(torn) > 0 {
			t.Errorf("%d torn reads, e.g. %.80q", len(torn), torn[0])
		}
	})
	t.Run("a concurrent reader never sees the state go back", func(t *testing.T) {
		if len(regress) > 0 {
			t.Errorf("state went back to %v", regress)
		}
	})
	t.Run("the last write wins", func(t *testing.T) {
		s, err := meshd.LoadState(dir, "bob")
		if err != nil || s.LastSeq != writes || s.Offset != writes*2 {
			t.Errorf("state %+v err %v", s, err)
		}
	})
	t.Run("no temp files are left behind and the file is private", func(t *testing.T) {
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("state dir holds %v", names)
		}
		fi, err := os.Stat(meshd.StatePath(dir, "bob"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("state file mode %v err %v", fi.Mode(), err)
		}
	})
}

func TestLoadState(t *testing.T) {
	cases := []struct {
		name    string
		content string // "" = no file
		want    meshd.State
		wantErr string
	}{
		{name: "no file is a fresh state with no offset", want: meshd.State{AgentID: "bob", Offset: -1}},
		{name: "a saved state is read back", content: `{"agent_id":"bob","last_seq":7,"offset":12,"topic":"inbox.events","partition":2}`,
			want: meshd.State{AgentID: "bob", LastSeq: 7, Offset: 12, Topic: "inbox.events", Partition: 2}},
		{name: "a state of another agent is refused", content: `{"agent_id":"alice","last_seq":7,"offset":12}`, wantErr: `belongs to agent "alice"`},
		{name: "a corrupt state is refused, not reset", content: `{"agent_id":"bob","last_se`, wantErr: "corrupt"},
		{name: "an impossible state is refused", content: `{"agent_id":"bob","last_seq":-2,"offset":1}`, wantErr: "impossible"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != "" {
				if err := os.WriteFile(filepath.Join(dir, "bob.state.json"), []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// A temp file left by a crash mid-write must not matter.
			_ = os.WriteFile(filepath.Join(dir, ".bob.state.123.tmp"), []byte(`{"agent_id":"bob","last_seq":99`), 0o600)
			got, err := meshd.LoadState(dir, "bob")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestStateRefusesPathLikeAgentIDs(t *testing.T) {
	for _, id := range []string{"../etc/passwd", "", "a/b"} {
		if _, err := meshd.LoadState(t.TempDir(), id); err == nil {
			t.Errorf("LoadState accepted agent id %q", id)
		}
		if err := meshd.SaveState(t.TempDir(), meshd.State{AgentID: id}); err == nil {
			t.Errorf("SaveState accepted agent id %q", id)
		}
	}
}

func TestAStateWrittenOverAWorldReadableFileIsPrivate(t *testing.T) {
	dir := t.TempDir()
	// The old JSON file, world-readable: its conversion must not lend the
	// new file its mode.
	old := filepath.Join(dir, "bob.state.json")
	path := meshd.StatePath(dir, "bob")
	if err := os.WriteFile(old, []byte(`{"agent_id":"bob","last_seq":1,"offset":-1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := meshd.SaveState(dir, meshd.State{AgentID: "bob", LastSeq: 2, Offset: -1}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v err %v, want 0600", fi.Mode(), err)
	}
	if s, err := meshd.LoadState(dir, "bob"); err != nil || s.LastSeq != 2 {
		t.Errorf("state %+v err %v", s, err)
	}
}
