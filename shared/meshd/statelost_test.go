package meshd_test

import (
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/meshd"
)

func TestTheStateKeepsTheLatestLoss(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	cases := []struct {
		name  string
		lost  meshd.LostEvents
		count int64
	}{
		{"a loss comes back as saved, its count from its seqs", meshd.LostEvents{FromSeq: 4, ToSeq: 6, Total: 9, At: at}, 3},
		{"a loss of one event counts one", meshd.LostEvents{FromSeq: 7, ToSeq: 7, Total: 1, At: at}, 1},
		{"no loss comes back as none", meshd.LostEvents{}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := meshd.SaveState(dir, meshd.State{AgentID: "bob", LastSeq: 9, Offset: 3, Lost: c.lost}); err != nil {
				t.Fatal(err)
			}
			s, err := meshd.LoadState(dir, "bob")
			if err != nil {
				t.Fatal(err)
			}
			if s.Lost != c.lost || s.Lost.Count() != c.count || s.LastSeq != 9 || s.Offset != 3 {
				t.Errorf("loaded %+v (count %d), want loss %+v (count %d)", s, s.Lost.Count(), c.lost, c.count)
			}
		})
	}
}
