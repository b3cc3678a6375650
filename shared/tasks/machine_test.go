package tasks_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

// allowedMoves is the move table as the issue states it, written out here
// independently of the code's table: the recipient works, asks, completes,
// fails or rejects (rejected only as a first answer); either side cancels a
// live task; the initiator answers input-required by moving back to working.
var allowedMoves = map[string]bool{
	"recipient: submitted -> working":        true,
	"recipient: submitted -> input-required": true,
	"recipient: submitted -> completed":      true,
	"recipient: submitted -> failed":         true,
	"recipient: submitted -> rejected":       true,
	"recipient: submitted -> canceled":       true,
	"recipient: working -> input-required":   true,
	"recipient: working -> completed":        true,
	"recipient: working -> failed":           true,
	"recipient: working -> canceled":         true,
	"recipient: input-required -> working":   true,
	"recipient: input-required -> completed": true,
	"recipient: input-required -> failed":    true,
	"recipient: input-required -> canceled":  true,
	"initiator: submitted -> canceled":       true,
	"initiator: working -> canceled":         true,
	"initiator: input-required -> working":   true,
	"initiator: input-required -> canceled":  true,
}

// Every (state, move, actor) triple: 7 states × 7 targets × 2 actors. An
// allowed move changes the status, refreshes the idle clock and sends one
// status event to the other party; an illegal one is a 409 that writes nothing.
func TestEveryStatusMove(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob", "carol")
	actors := map[string]string{tasks.RoleInitiator: "alice", tasks.RoleRecipient: "bob"}
	other := map[string]string{tasks.RoleInitiator: "bob", tasks.RoleRecipient: "alice"}
	n := 0
	for _, role := range []string{tasks.RoleInitiator, tasks.RoleRecipient} {
		for _, from := range tasks.States {
			for _, to := range tasks.States {
				key := fmt.Sprintf("%s: %s -> %s", role, from, to)
				allowed := allowedMoves[key]
				verdict := "is illegal"
				if allowed {
					verdict = "is allowed"
				}
				n++
				taskID := fmt.Sprintf("task-%03d", n)
				updated := t0.Add(-time.Hour)
				f.taskIn(t, taskID, "alice", "bob", from, updated)
				t.Run(fmt.Sprintf("the %s moving %s to %s %s", role, from, to, verdict), func(t *testing.T) {
					before := f.state(t)
					r := f.status(t, actors[role], taskID, map[string]string{"status": to})
					var status string
					var at time.Time
					if err := f.db.QueryRow("SELECT status, updated_at FROM tasks WHERE task_id = ?", taskID).Scan(&status, &at); err != nil {
						t.Fatal(err)
					}
					if !allowed {
						if r.Status != 409 || r.code() != "illegal_transition" {
							t.Fatalf("got %d %s, want 409 illegal_transition", r.Status, r.Body)
						}
						f.unchanged(t, before, "an illegal move wrote something")
						return
					}
					if r.Status != 200 {
						t.Fatalf("got %d %s, want 200", r.Status, r.Body)
					}
					var res tasks.StatusResult
					r.decode(t, &res)
					if res.Status != to || res.PreviousStatus != from || res.TaskID != taskID {
						t.Fatalf("answer %+v", res)
					}
					if status != to || !at.After(updated) {
						t.Fatalf("task is %s updated %v", status, at)
					}
					var body []byte
					var recipient, typ, sender string
					if err := f.db.QueryRow("SELECT recipient, type, sender, body FROM outbox_events WHERE task_id = ?", taskID).Scan(&recipient, &typ, &sender, &body); err != nil {
						t.Fatalf("status event: %v", err)
					}
					var sb tasks.StatusBody
					_ = json.Unmarshal(body, &sb)
					if recipient != other[role] || typ != mesh.EventStatus || sender != actors[role] ||
						sb.Status.State != to || sb.Status.Previous != from || sb.Status.By != actors[role] || sb.Task.Status != to {
						t.Fatalf("event to %s type %s from %s body %s", recipient, typ, sender, body)
					}
				})
			}
		}
	}
	if n != 98 {
		t.Fatalf("%d triples, want 98", n)
	}

	t.Run("someone outside the task gets a 404 whatever the move", func(t *testing.T) {
		f.taskIn(t, "task-private", "alice", "bob", mesh.TaskSubmitted, t0)
		for _, to := range tasks.States {
			r := f.status(t, "carol", "task-private", map[string]string{"status": to})
			if r.Status != 404 || r.code() != "task_not_found" {
				t.Fatalf("carol -> %s: %d %s", to, r.Status, r.Body)
			}
			if m := f.status(t, "carol", "no-such-task", map[string]string{"status": to}); m.Status != r.Status || string(m.Body) != string(r.Body) {
				t.Fatalf("carol -> %s: the real task answers %d %s, a missing one %d %s", to, r.Status, r.Body, m.Status, m.Body)
			}
		}
	})

	t.Run("a status that does not exist is a 400", func(t *testing.T) {
		if r := f.status(t, "bob", "task-private", map[string]string{"status": "done"}); r.Status != 400 || r.code() != "invalid_status" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})

	t.Run("a move may carry a note, stored in the task and sent in the event", func(t *testing.T) {
		f.taskIn(t, "task-question", "alice", "bob", mesh.TaskWorking, t0)
		r := f.status(t, "bob", "task-question", map[string]any{"status": "input-required", "message_id": "q-1",
			"message": map[string]any{"parts": text("formal or informal?")}})
		if r.Status != 200 {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		var body []byte
		_ = f.db.QueryRow("SELECT body FROM outbox_events WHERE task_id = 'task-question'").Scan(&body)
		var sb tasks.StatusBody
		_ = json.Unmarshal(body, &sb)
		if sb.Status.Message == nil || sb.Status.Message.MessageID != "q-1" || string(sb.Status.Message.Parts) != `[{"kind":"text","text":"formal or informal?"}]` {
			t.Fatalf("event body %s", body)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM task_messages WHERE task_id = 'task-question' AND message_id = 'q-1' AND sender = 'bob'"); n != 1 {
			t.Fatalf("%d stored notes", n)
		}
	})
}

func TestCanMoveMatchesTheTable(t *testing.T) {
	for _, role := range []string{tasks.RoleInitiator, tasks.RoleRecipient, "stranger"} {
		for _, from := range tasks.States {
			for _, to := range tasks.States {
				key := fmt.Sprintf("%s: %s -> %s", role, from, to)
				if got := tasks.CanMove(role, from, to); got != allowedMoves[key] {
					t.Errorf("CanMove(%s) = %v", key, got)
				}
			}
		}
	}
}
