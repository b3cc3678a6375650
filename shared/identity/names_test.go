package identity_test

import (
	"context"
	"testing"

	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// Names are shown to other agents (rosters, profiles) and to operators: a
// name that could drive a terminal or reverse text is refused, and nothing
// is stored.
func TestNamesMustBePrintable(t *testing.T) {
	db, _ := mysqltest.New(t)
	s := identitytest.Service(t, db, testenv.NewClock().Now)
	ctx := context.Background()
	if _, _, err := s.CreateAgent(ctx, "owner", "Owner"); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"a NUL byte":               "nul\x00",
		"an ANSI escape sequence":  "\x1b[2J\x1b[Hroot",
		"a bell":                   "ding\a",
		"a right-to-left override": "report\u202Etxt.exe",
	}
	for what, name := range bad {
		t.Run("an agent name with "+what+" is refused", func(t *testing.T) {
			_, _, err := s.CreateAgent(ctx, "bad-agent", name)
			if me := mesh.AsError(err); me.Kind != mesh.KindUnprocessable || me.Code != "invalid_name" {
				t.Fatalf("got %v, want 422 invalid_name", err)
			}
		})
		t.Run("a group name with "+what+" is refused", func(t *testing.T) {
			_, err := s.CreateGroup(ctx, "owner", name)
			if me := mesh.AsError(err); me.Kind != mesh.KindUnprocessable || me.Code != "invalid_name" {
				t.Fatalf("got %v, want 422 invalid_name", err)
			}
		})
	}
	t.Run("nothing was stored for a refused name", func(t *testing.T) {
		var agents, groups int
		if err := db.QueryRow("SELECT (SELECT COUNT(*) FROM agents), (SELECT COUNT(*) FROM mesh_groups)").Scan(&agents, &groups); err != nil {
			t.Fatal(err)
		}
		if agents != 1 || groups != 0 {
			t.Fatalf("%d agents and %d groups, want only the owner", agents, groups)
		}
	})
	t.Run("a name in any script, with emoji, is accepted", func(t *testing.T) {
		if _, err := s.CreateGroup(ctx, "owner", "Équipe 研究 🤖"); err != nil {
			t.Fatal(err)
		}
	})
}
