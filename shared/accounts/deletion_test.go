package accounts_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// doomedID is the agent the deletion tests delete: an id no other value
// of the fixture (uuids, names, texts) equals or quotes.
const doomedID = "doomed-agent-7"

// world is an account's agent woven into everything an agent can be part
// of: keys, a friendship, blocks, a friend request, a group it owns, open
// and finished tasks both ways, a context, artifacts, idempotency keys and
// inbox events.
type world struct {
	f      *fixture
	owner  signedIn
	group  string
	openIn string // bob's open task to doomed
	ctx    context.Context
}

func newWorld(t *testing.T) *world {
	f := newFixture(t)
	ctx := context.Background()
	w := &world{f: f, owner: f.account("owner@example.org", false), ctx: ctx}
	s := f.s
	if _, err := s.CreateAgent(ctx, w.owner.Account, doomedID, "Doomed", ""); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"bob", "carol"} {
		if _, _, err := s.Identity.CreateAgent(ctx, id, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Identity.AdminCreateFriendship(ctx, doomedID, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := s.Identity.BlockAgent(ctx, "carol", doomedID); err != nil {
		t.Fatal(err)
	}
	g, err := s.Identity.AdminCreateGroup(ctx, identity.AdminGroupInput{Name: "crew", Owner: doomedID, Members: []string{"bob", "carol"}})
	if err != nil {
		t.Fatal(err)
	}
	w.group = g.GroupID
	if _, _, err := s.Identity.SendFriendRequest(ctx, "bob", "carol"); err != nil {
		t.Fatal(err)
	}
	text := func(s string) []mesh.Part { return []mesh.Part{{Kind: "text", Text: s}} }
	in, err := s.Tasks.Send(ctx, "bob", tasks.SendRequest{To: doomedID, MessageID: "m-bob-1", ContextID: "ctx-bob-doomed", Parts: text("hello")})
	if err != nil {
		t.Fatal(err)
	}
	w.openIn = in.TaskID
	if _, err := s.Tasks.Reply(ctx, doomedID, in.TaskID, tasks.ReplyRequest{MessageID: "m-doomed-1", Parts: text("on it")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Tasks.AddArtifact(ctx, doomedID, in.TaskID, tasks.ArtifactRequest{Name: "draft", MessageID: "m-doomed-2", Parts: text("v1")}); err != nil {
		t.Fatal(err)
	}
	out, err := s.Tasks.Send(ctx, doomedID, tasks.SendRequest{To: "bob", MessageID: "m-doomed-3", Parts: text("question")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Tasks.UpdateStatus(ctx, "bob", out.TaskID, tasks.StatusRequest{Status: mesh.TaskCompleted}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Tasks.SendToGroup(ctx, doomedID, g.GroupID, tasks.GroupSendRequest{MessageID: "m-doomed-4", Parts: text("all hands")}); err != nil {
		t.Fatal(err)
	}
	return w
}

// rowsNaming lists, for every column of every table of the schema but
// audit_log, the rows whose value equals id or holds it as a JSON string
// ("id"): what "no row names it" means.
func rowsNaming(t *testing.T, db *mysql.DB, id string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT table_name, column_name, data_type FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name <> 'audit_log' ORDER BY table_name, ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
	type col struct{ table, column, typ string }
	var cols []col
	for rows.Next() {
		var c col
		if err := rows.Scan(&c.table, &c.column, &c.typ); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	if len(cols) < 20 {
		t.Fatalf("information_schema lists %d columns: not the whole schema", len(cols))
	}
	var found []string
	for _, c := range cols {
		if !strings.Contains(c.typ, "char") && !strings.Contains(c.typ, "text") && !strings.Contains(c.typ, "binary") {
			continue
		}
		n := mysqltest.Count(t, db, fmt.Sprintf("SELECT COUNT(*) FROM `%s` WHERE `%s` = ? OR `%s` LIKE ?", c.table, c.column, c.column), id, `%"`+id+`"%`)
		if n > 0 {
			found = append(found, fmt.Sprintf("%s.%s (%d rows)", c.table, c.column, n))
		}
	}
	return found
}

func TestDeletingAnAgentLeavesNoRowThatNamesIt(t *testing.T) {
	w := newWorld(t)
	s, db := w.f.s, w.f.s.DB
	if got := rowsNaming(t, db, doomedID); len(got) < 10 {
		t.Fatalf("before the deletion only %v name the agent: the fixture does not reach every table", got)
	}
	if err := s.DeleteAgent(w.ctx, w.owner.Account, doomedID); err != nil {
		t.Fatal(err)
	}

	t.Run("no table but the audit log names the agent", func(t *testing.T) {
		if got := rowsNaming(t, db, doomedID); len(got) > 0 {
			t.Errorf("rows still name %s: %v", doomedID, got)
		}
	})
	t.Run("the other party's open task is failed and it is told with a status event", func(t *testing.T) {
		d, err := s.Tasks.GetTask(w.ctx, "bob", w.openIn)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != mesh.TaskFailed || d.Recipient != tasks.DeletedAgentID {
			t.Errorf("bob's task is %s to %s, want failed to %s", d.Status, d.Recipient, tasks.DeletedAgentID)
		}
		page, err := s.Tasks.ReadInbox(w.ctx, "bob", tasks.InboxQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		// Bob's tasks with the agent close in task id order (random ids):
		// the notice of this one is any of the events, not the last.
		told := false
		for _, e := range page.Events {
			told = told || e.Type == mesh.EventStatus && e.TaskID == w.openIn && strings.Contains(string(e.Body), tasks.ReasonPartyDeleted)
		}
		if !told {
			t.Errorf("bob's %d events hold no party_deleted status of %s", len(page.Events), w.openIn)
		}
	})
	t.Run("the group it owned passes to the longest-standing member", func(t *testing.T) {
		if n := mysqltest.Count(t, db, "SELECT COUNT(*) FROM mesh_groups WHERE group_id = ? AND owner_id = 'bob'", w.group); n != 1 {
			t.Errorf("the group is not bob's")
		}
		if n := mysqltest.Count(t, db, "SELECT COUNT(*) FROM group_members WHERE group_id = ? AND agent_id = 'bob' AND role = 'owner'", w.group); n != 1 {
			t.Errorf("bob is not the group's owner member")
		}
	})
	t.Run("the audit log records the deletion by the account", func(t *testing.T) {
		if n := auditRows(t, w.f, identity.AuditAgentDeleted, doomedID, identity.ActorAccount); n != 1 {
			t.Errorf("%d agent.deleted rows by the account, want 1", n)
		}
	})
	t.Run("deleting again is the same success", func(t *testing.T) {
		if err := s.DeleteAgent(w.ctx, w.owner.Account, doomedID); err != nil {
			t.Errorf("the account's second delete: %v", err)
		}
		if err := s.AdminDeleteAgent(w.ctx, doomedID); err != nil {
			t.Errorf("the admin's delete of the deleted agent: %v", err)
		}
	})
	t.Run("the deleted id is not registered again", func(t *testing.T) {
		_, err := s.CreateAgent(w.ctx, w.owner.Account, doomedID, "", "")
		if !isCode(err, "agent_id_retired") {
			t.Errorf("registering %s again: %v, want agent_id_retired", doomedID, err)
		}
		_, err = s.CreateAgent(w.ctx, w.owner.Account, tasks.DeletedAgentID, "", "")
		if !isCode(err, "reserved_agent_id") {
			t.Errorf("registering %s: %v, want reserved_agent_id", tasks.DeletedAgentID, err)
		}
	})
}

func TestWhoMayDeleteWhom(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	owner, other := f.account("owner@example.org", false), f.account("other@example.org", false)
	for _, id := range []string{"owned-1", "owned-2"} {
		if _, err := f.s.CreateAgent(ctx, owner.Account, id, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		del  func() error
		code string
	}{
		{"another account cannot delete the owner's agent (404, as if it did not exist)", func() error { return f.s.DeleteAgent(ctx, other.Account, "owned-1") }, "agent_not_found"},
		{"an account cannot delete an agent that never existed", func() error { return f.s.DeleteAgent(ctx, owner.Account, "never-was") }, "agent_not_found"},
		{"the admin cannot delete an agent that never existed", func() error { return f.s.AdminDeleteAgent(ctx, "never-was") }, "agent_not_found"},
		{"the owner deletes its agent", func() error { return f.s.DeleteAgent(ctx, owner.Account, "owned-1") }, ""},
		{"another account still cannot delete it, deleted", func() error { return f.s.DeleteAgent(ctx, other.Account, "owned-1") }, "agent_not_found"},
		{"the admin deletes any agent", func() error { return f.s.AdminDeleteAgent(ctx, "owned-2") }, ""},
		{"the owner's delete of the agent the admin deleted is the same success", func() error { return f.s.DeleteAgent(ctx, owner.Account, "owned-2") }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.del()
			if c.code == "" && err != nil || c.code != "" && !isCode(err, c.code) {
				t.Errorf("got %v, want %q", err, c.code)
			}
		})
	}
}

func TestDeletingAnAccount(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	acc := f.account("leaver@example.org", false)
	if _, err := f.s.CreateAgent(ctx, acc.Account, "leaver-bot", "", ""); err != nil {
		t.Fatal(err)
	}
	t.Run("an account with agents is refused without with_agents", func(t *testing.T) {
		if err := f.s.DeleteAccount(ctx, acc.Account, false); !isCode(err, "account_has_agents") {
			t.Errorf("got %v, want account_has_agents", err)
		}
	})
	t.Run("with its agents it is deleted, its sessions with it", func(t *testing.T) {
		if err := f.s.DeleteAccount(ctx, acc.Account, true); err != nil {
			t.Fatal(err)
		}
		if got := rowsNaming(t, f.s.DB, "leaver-bot"); len(got) > 0 {
			t.Errorf("rows still name the agent: %v", got)
		}
		if got := rowsNaming(t, f.s.DB, acc.AccountID); len(got) > 0 {
			t.Errorf("rows still name the account: %v", got)
		}
		if _, err := f.s.Session(ctx, acc.token, acc.csrf, true); err == nil {
			t.Errorf("the session still signs in")
		}
	})
	t.Run("the operator account cannot be deleted", func(t *testing.T) {
		err := f.s.DeleteAccount(ctx, accounts.Account{AccountID: identity.OperatorAccount}, true)
		if !isCode(err, "operator_account") {
			t.Errorf("got %v, want operator_account", err)
		}
	})
}

// A send to or from the agent racing its deletion commits before it (and
// its rows are deleted with the agent) or is refused with a 4xx; nothing
// is left behind and no send fails with anything else.
func TestASendRacingTheDeletionCompletesOrFailsCleanly(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprintf("round %d: sends both ways while the agent is deleted", round), func(t *testing.T) {
			w := newWorld(t)
			s := w.f.s
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					from, to := "bob", doomedID
					if i%2 == 1 {
						from, to = doomedID, "bob"
					}
					for j := range 4 {
						_, err := s.Tasks.Send(w.ctx, from, tasks.SendRequest{To: to, MessageID: fmt.Sprintf("race-%d-%d", i, j), Parts: []mesh.Part{{Kind: "text", Text: "hi"}}})
						errs <- err
					}
				}()
			}
			close(start)
			if err := s.DeleteAgent(w.ctx, w.owner.Account, doomedID); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if k := mesh.AsError(err).Kind; err != nil && (k == mesh.KindInternal || k == mesh.KindUnavailable) {
					t.Errorf("a racing send failed with %v", err)
				}
			}
			if got := rowsNaming(t, s.DB, doomedID); len(got) > 0 {
				t.Errorf("rows still name the agent: %v", got)
			}
		})
	}
}
