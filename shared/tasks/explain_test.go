package tasks_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

// The scanner, list and task statements must use their indexes on a table
// of many tasks of many agents: no table or full index scans.
func TestQueriesUseTheirIndexes(t *testing.T) {
	f := newFixture(t)
	agents := memberIDs("x", 50)
	f.agents(t, agents...)
	f.group(t, "grp", "ctx-grp", agents...)
	var args []any
	const n = 3000
	for i := range n {
		at := t0.Add(time.Duration(i) * time.Minute)
		args = append(args, fmt.Sprintf("task-%05d", i), "ctx", agents[i%50], agents[(i+1)%50], tasks.States[i%len(tasks.States)], at, at)
		if len(args) == 7*500 {
			if _, err := f.db.Exec(multiRow("INSERT INTO tasks (task_id, context_id, initiator, recipient, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)", 500), args...); err != nil {
				t.Fatal(err)
			}
			args = nil
		}
	}
	if _, err := f.db.Exec("ANALYZE TABLE tasks, group_members"); err != nil {
		t.Fatal(err)
	}
	cutoff := t0.Add(time.Hour)
	far := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		query string
		args  []any
		keys  []string
	}{
		{"the scanner's candidates come from tasks_idle", tasks.IdleCandidatesSQL, []any{"working", cutoff, 200}, []string{"tasks_idle"}},
		{"the scanner locks candidates by primary key", tasks.InList(tasks.LockIdleSQL, 3), []any{"task-00001", "task-00002", "task-00003", cutoff}, []string{"PRIMARY"}},
		{"the failing update goes by primary key", tasks.InList(tasks.FailTasksSQL, 2), []any{cutoff, "task-00001", "task-00002"}, []string{"PRIMARY"}},
		{"a task is read by primary key", tasks.GetTaskSQL, []any{"task-00010", "x0010", "x0010"}, []string{"PRIMARY"}},
		{"a task is locked by primary key", tasks.LockTaskSQL, []any{"task-00010"}, []string{"PRIMARY"}},
		{"listing as initiator walks tasks_initiator", tasks.ListAsInitiatorSQL, []any{"x0007", far, far, "\U0010FFFF", "", "", "", "", 51}, []string{"tasks_initiator"}},
		{"listing as recipient walks tasks_recipient", tasks.ListAsRecipientSQL, []any{"x0007", far, far, "\U0010FFFF", "working", "working", "", "", 51}, []string{"tasks_recipient"}},
		{"listing as either walks both", tasks.ListAsEitherSQL, []any{"x0007", far, far, "\U0010FFFF", "", "", "", "", 51, "x0007", far, far, "\U0010FFFF", "", "", "", "", 51, 51},
			[]string{"", "tasks_initiator", "tasks_recipient"}},
		{"group membership is a primary key lookup", tasks.MemberGroupSQL, []any{"grp", "x0001"}, []string{"PRIMARY", "PRIMARY"}},
		{"a context's group is found by mesh_groups_context", tasks.GroupOfContextSQL, []any{"ctx-grp"}, []string{"mesh_groups_context"}},
		{"group members are a primary key range", tasks.GroupOthersSQL, []any{"grp", "x0001"}, []string{"PRIMARY"}},
		{"the sender's blocks are a primary key range", tasks.BlockedBySQL, []any{"x0001"}, []string{"PRIMARY"}},
		{"the sender's blockers are an agent_blocks_blocked range", tasks.BlockersOfSQL, []any{"x0001"}, []string{"agent_blocks_blocked"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plans := mysqltest.Explain(t, f.db.DB, c.query, c.args...)
			var keys []string
			for _, p := range plans {
				if p.Type == "ALL" && p.Table != "" && !strings.HasPrefix(p.Table, "<") || p.Type == "index" {
					t.Fatalf("a scan in %+v", plans)
				}
				keys = append(keys, p.Key)
			}
			if fmt.Sprint(keys) != fmt.Sprint(c.keys) {
				t.Fatalf("keys %v, want %v (plan %+v)", keys, c.keys, plans)
			}
		})
	}
}
