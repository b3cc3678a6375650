package tasks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

func TestTaskScanner(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob")
	f.friends(t, "alice", "bob")
	ctx := context.Background()

	newTask := func(status string) string {
		res := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("task in " + status)})
		if status != mesh.TaskSubmitted {
			path := map[string][]string{
				mesh.TaskWorking:       {mesh.TaskWorking},
				mesh.TaskInputRequired: {mesh.TaskInputRequired},
				mesh.TaskCompleted:     {mesh.TaskCompleted},
				mesh.TaskRejected:      {mesh.TaskRejected},
			}[status]
			for _, s := range path {
				if r := f.status(t, "bob", res.TaskID, map[string]string{"status": s}); r.Status != 200 {
					t.Fatalf("move to %s: %d %s", s, r.Status, r.Body)
				}
			}
		}
		return res.TaskID
	}
	submitted := newTask(mesh.TaskSubmitted)
	working := newTask(mesh.TaskWorking)
	asking := newTask(mesh.TaskInputRequired)
	completed := newTask(mesh.TaskCompleted)
	rejected := newTask(mesh.TaskRejected)
	active := newTask(mesh.TaskWorking)
	eventsBefore := map[string]int{"alice": len(f.events(t, "alice")), "bob": len(f.events(t, "bob"))}

	f.advance(23 * time.Hour)
	if r := f.reply(t, "alice", active, tasks.ReplyRequest{Parts: text("still there?")}); r.Status != 202 {
		t.Fatalf("reply: %d %s", r.Status, r.Body)
	}
	eventsBefore["bob"]++
	f.advance(time.Hour + time.Minute)

	if err := f.svc.ScanIdleTasks(ctx); err != nil {
		t.Fatal(err)
	}
	statusOf := func(id string) string {
		var s string
		_ = f.db.QueryRow("SELECT status FROM tasks WHERE task_id = ?", id).Scan(&s)
		return s
	}

	t.Run("submitted, working and input-required tasks idle for 24 h are failed", func(t *testing.T) {
		for _, id := range []string{submitted, working, asking} {
			if s := statusOf(id); s != mesh.TaskFailed {
				t.Errorf("task %s is %s", id, s)
			}
		}
	})

	t.Run("terminal tasks and a task with recent activity are left alone", func(t *testing.T) {
		want := map[string]string{completed: mesh.TaskCompleted, rejected: mesh.TaskRejected, active: mesh.TaskWorking}
		for id, s := range want {
			if got := statusOf(id); got != s {
				t.Errorf("task %s is %s, want %s", id, got, s)
			}
		}
	})

	t.Run("both parties get one timeout notice per failed task", func(t *testing.T) {
		previous := map[string]string{submitted: mesh.TaskSubmitted, working: mesh.TaskWorking, asking: mesh.TaskInputRequired}
		for _, who := range []string{"alice", "bob"} {
			evs := f.events(t, who)[eventsBefore[who]:]
			if len(evs) != 3 {
				t.Fatalf("%s got %d new events, want 3", who, len(evs))
			}
			for _, e := range evs {
				var b tasks.StatusBody
				if err := json.Unmarshal(e.Body, &b); err != nil {
					t.Fatal(err)
				}
				if e.Type != mesh.EventStatus || e.From != "" || b.Status.State != mesh.TaskFailed || b.Status.Reason != tasks.ReasonIdleTimeout ||
					b.Status.By != "" || b.Status.Previous != previous[e.TaskID] || b.Task.Status != mesh.TaskFailed {
					t.Fatalf("%s's notice: %+v body %s", who, e, e.Body)
				}
			}
		}
	})

	t.Run("a failed task takes no more messages", func(t *testing.T) {
		if r := f.reply(t, "bob", working, tasks.ReplyRequest{Parts: text("done now")}); r.Status != 409 || r.code() != "task_terminal" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})

	t.Run("a second scan finds nothing to do", func(t *testing.T) {
		before := f.state(t)
		if err := f.svc.ScanIdleTasks(ctx); err != nil {
			t.Fatal(err)
		}
		f.unchanged(t, before, "state changed")
	})
}

// Two scanners over 60 idle tasks with small batches, at once: every task
// is failed once and each party gets exactly one notice per task, with
// gapless seqs.
func TestTwoScannersAtOnce(t *testing.T) {
	f := newFixture(t)
	f.svc.ScanBatch = 7
	agents := []string{"a1", "a2", "a3", "b1", "b2", "b3"}
	f.agents(t, agents...)
	const n = 60
	for i := range n {
		ini, rcp := agents[i%3], agents[3+i%3]
		status := []string{mesh.TaskSubmitted, mesh.TaskWorking, mesh.TaskInputRequired}[i%3]
		f.taskIn(t, fmt.Sprintf("idle-%02d", i), ini, rcp, status, t0.Add(time.Duration(i)*time.Second))
	}
	f.taskIn(t, "fresh", "a1", "b1", mesh.TaskWorking, t0.Add(24*time.Hour))
	f.advance(24*time.Hour + time.Hour)

	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := f.svc.ScanIdleTasks(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	f.counts(t, map[string]int{
		"SELECT COUNT(*) FROM tasks WHERE task_id LIKE 'idle-%' AND status = 'failed'": n,
		"SELECT COUNT(*) FROM tasks WHERE task_id = 'fresh' AND status = 'working'":    1,
		"SELECT COUNT(*) FROM outbox_events":                                           2 * n,
		"SELECT COUNT(DISTINCT task_id, recipient) FROM outbox_events":                 2 * n,
		"SELECT COALESCE(SUM(last_seq), 0) FROM inbox_counters":                        2 * n,
		// Gapless: each recipient's seqs are exactly 1..last_seq.
		"SELECT COUNT(*) FROM inbox_counters c WHERE c.last_seq <> (SELECT COUNT(*) FROM outbox_events e WHERE e.recipient = c.recipient AND e.seq BETWEEN 1 AND c.last_seq)": 0,
	})
}
