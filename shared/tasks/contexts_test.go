package tasks_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

func TestASendNamingAContextItsPartiesDoNotShareIsRefused(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob", "cid", "dan", "eve")
	for _, p := range [][2]string{{"ann", "bob"}, {"ann", "cid"}, {"bob", "cid"}} {
		f.friends(t, p[0], p[1])
	}
	f.group(t, "g", "ctx-g", "ann", "bob", "dan") // cid is not in g
	f.group(t, "h", "ctx-h", "dan", "eve")        // neither ann nor bob is in h
	minted := f.send(t, "ann", tasks.SendRequest{To: "bob", Parts: text("a context the server mints")}).ContextID
	f.send(t, "ann", tasks.SendRequest{To: "bob", Parts: text("a context ann names"), ContextID: "conv-ann-bob"})

	for _, c := range []struct {
		name     string
		from, to string
		context  string
		want     int
		group    string // the new task's group, for accepted sends
	}{
		{"two members may start a task in their group's context", "ann", "bob", "ctx-g", 202, "g"},
		{"a member may not pull a non-member into the group's context", "ann", "cid", "ctx-g", 422, ""},
		{"a non-member may not write into the group's context", "cid", "ann", "ctx-g", 422, ""},
		{"neither party being in the group is refused", "ann", "bob", "ctx-h", 422, ""},
		{"a pair may go on in a context it named", "bob", "ann", "conv-ann-bob", 202, ""},
		{"another pair may not use a context named by others", "ann", "cid", "conv-ann-bob", 422, ""},
		{"a third agent may not use it with either party", "cid", "bob", "conv-ann-bob", 422, ""},
		{"a context the server minted belongs to its pair too", "cid", "ann", minted, 422, ""},
		{"a pair may go on in the context the server minted for it", "bob", "ann", minted, 202, ""},
		{"an id nobody uses starts a new conversation", "cid", "bob", "conv-new", 202, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.state(t)
			r := f.call(t, req{fn: "SendMessageFunction", caller: c.from, method: "POST", path: "/v1/messages",
				body: tasks.SendRequest{To: c.to, Parts: text("x"), ContextID: c.context}})
			if r.Status != c.want {
				t.Fatalf("got %d %s, want %d", r.Status, r.Body, c.want)
			}
			if c.want == 422 {
				if r.code() != "context_mismatch" {
					t.Fatalf("code %s", r.Body)
				}
				f.unchanged(t, before, "a refused send changed the database")
				return
			}
			var res tasks.SendResult
			r.decode(t, &res)
			var group string
			_ = f.db.QueryRow("SELECT COALESCE(group_id, '') FROM tasks WHERE task_id = ?", res.TaskID).Scan(&group)
			if res.ContextID != c.context || group != c.group {
				t.Fatalf("task in context %q of group %q, want %q of %q", res.ContextID, group, c.context, c.group)
			}
		})
	}

	t.Run("of two pairs claiming one new id at once, exactly one gets it", func(t *testing.T) {
		for round := range 5 {
			id := fmt.Sprintf("race-%d", round)
			var wg sync.WaitGroup
			got := make([]int, 2)
			for i, p := range [][2]string{{"ann", "bob"}, {"cid", "ann"}} {
				wg.Go(func() {
					got[i] = f.call(t, req{fn: "SendMessageFunction", caller: p[0], method: "POST", path: "/v1/messages",
						body: tasks.SendRequest{To: p[1], Parts: text("mine"), ContextID: id}}).Status
				})
			}
			wg.Wait()
			if !(got[0] == 202 && got[1] == 422 || got[0] == 422 && got[1] == 202) {
				t.Fatalf("round %d: %v, want one 202 and one 422", round, got)
			}
			if n := f.count(t, "SELECT COUNT(DISTINCT CONCAT(initiator, '>', recipient)) FROM tasks WHERE context_id = ?", id); n != 1 {
				t.Fatalf("round %d: %d pairs hold tasks in %s", round, n, id)
			}
		}
	})
}
