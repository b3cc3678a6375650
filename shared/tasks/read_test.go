package tasks_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

func TestRepliesArtifactsAndGetTask(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob", "eve")
	f.friends(t, "alice", "bob")
	task := f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("summarise the report"), MessageID: "ask"})

	t.Run("a reply from either party goes to the other one", func(t *testing.T) {
		if r := f.reply(t, "bob", task.TaskID, tasks.ReplyRequest{Parts: text("on it"), MessageID: "ack"}); r.Status != 202 {
			t.Fatalf("bob's reply: %d %s", r.Status, r.Body)
		}
		if r := f.reply(t, "alice", task.TaskID, tasks.ReplyRequest{Parts: text("thanks")}); r.Status != 202 {
			t.Fatalf("alice's reply: %d %s", r.Status, r.Body)
		}
		a, b := f.events(t, "alice"), f.events(t, "bob")
		if len(a) != 1 || a[0].MessageID != "ack" || a[0].From != "bob" {
			t.Fatalf("alice's events: %+v", a)
		}
		if len(b) != 2 || b[0].MessageID != "ask" || b[1].From != "alice" {
			t.Fatalf("bob's events: %+v", b)
		}
	})

	t.Run("only the recipient adds artifacts, and the initiator is told", func(t *testing.T) {
		before := f.state(t)
		r := f.artifact(t, "alice", task.TaskID, tasks.ArtifactRequest{Name: "summary.md", Parts: text("# Summary")})
		if r.Status != 403 || r.code() != "not_task_recipient" {
			t.Fatalf("initiator's artifact: %d %s", r.Status, r.Body)
		}
		f.unchanged(t, before, "a refused artifact wrote")
		r = f.artifact(t, "bob", task.TaskID, tasks.ArtifactRequest{Name: "summary.md", Parts: text("# Summary"), MessageID: "art-1"})
		if r.Status != 201 {
			t.Fatalf("recipient's artifact: %d %s", r.Status, r.Body)
		}
		var res tasks.ArtifactResult
		r.decode(t, &res)
		evs := f.events(t, "alice")
		last := evs[len(evs)-1]
		var body tasks.ArtifactBody
		_ = json.Unmarshal(last.Body, &body)
		if last.Type != mesh.EventArtifact || last.MessageID != "art-1" || body.Artifact.ArtifactID != res.ArtifactID || body.Artifact.Name != "summary.md" {
			t.Fatalf("alice's artifact event: %+v %s", last, last.Body)
		}
	})

	t.Run("a participant reads the task with its messages and artifacts in order", func(t *testing.T) {
		for _, who := range []string{"alice", "bob"} {
			r := f.getTask(t, who, task.TaskID)
			if r.Status != 200 {
				t.Fatalf("%s: %d %s", who, r.Status, r.Body)
			}
			var got tasks.TaskDetail
			r.decode(t, &got)
			var ids []string
			for _, m := range got.Messages {
				ids = append(ids, m.From+":"+partsJSON(t, m.Parts))
			}
			want := []string{`alice:[{"kind":"text","text":"summarise the report"}]`, `bob:[{"kind":"text","text":"on it"}]`, `alice:[{"kind":"text","text":"thanks"}]`}
			if fmt.Sprint(ids) != fmt.Sprint(want) || len(got.Artifacts) != 1 || got.Artifacts[0].CreatedBy != "bob" ||
				got.Initiator != "alice" || got.Recipient != "bob" || got.Status != mesh.TaskSubmitted || got.ContextID != task.ContextID {
				t.Fatalf("%s read %s", who, r.Body)
			}
		}
	})

	t.Run("anyone else gets the same 404 as for a task that does not exist", func(t *testing.T) {
		a := f.getTask(t, "eve", task.TaskID)
		b := f.getTask(t, "eve", "no-such-task")
		if a.Status != 404 || a.code() != "task_not_found" || string(a.Body) != string(b.Body) {
			t.Fatalf("existing: %d %s; missing: %d %s", a.Status, a.Body, b.Status, b.Body)
		}
		writes := []struct {
			name string
			call func(taskID string) response
		}{
			{"a reply", func(id string) response { return f.reply(t, "eve", id, tasks.ReplyRequest{Parts: text("hi")}) }},
			{"a status move", func(id string) response { return f.status(t, "eve", id, map[string]string{"status": "canceled"}) }},
			{"an artifact", func(id string) response {
				return f.artifact(t, "eve", id, tasks.ArtifactRequest{Name: "x", Parts: text("x")})
			}},
		}
		for _, w := range writes {
			a, b := w.call(task.TaskID), w.call("no-such-task")
			if a.Status != 404 || a.code() != "task_not_found" || string(a.Body) != string(b.Body) {
				t.Fatalf("eve's %s: existing %d %s; missing %d %s", w.name, a.Status, a.Body, b.Status, b.Body)
			}
		}
	})

	t.Run("every activity refreshes the idle clock", func(t *testing.T) {
		var last time.Time
		read := func() time.Time {
			var at time.Time
			_ = f.db.QueryRow("SELECT updated_at FROM tasks WHERE task_id = ?", task.TaskID).Scan(&at)
			return at
		}
		last = read()
		steps := []func() response{
			func() response { return f.reply(t, "bob", task.TaskID, tasks.ReplyRequest{Parts: text("more")}) },
			func() response {
				return f.artifact(t, "bob", task.TaskID, tasks.ArtifactRequest{Name: "b.txt", Parts: text("b")})
			},
			func() response { return f.status(t, "bob", task.TaskID, map[string]string{"status": "working"}) },
			func() response {
				return f.call(t, req{fn: "SendMessageFunction", caller: "alice", method: "POST", path: "/v1/messages",
					body: tasks.SendRequest{To: "bob", TaskID: task.TaskID, Parts: text("and?")}})
			},
		}
		for i, step := range steps {
			if r := step(); r.Status >= 300 {
				t.Fatalf("step %d: %d %s", i, r.Status, r.Body)
			}
			if at := read(); !at.After(last) {
				t.Fatalf("step %d left updated_at at %v", i, at)
			} else {
				last = at
			}
		}
	})

	t.Run("a finished task takes no replies or artifacts", func(t *testing.T) {
		if r := f.status(t, "bob", task.TaskID, map[string]string{"status": "completed"}); r.Status != 200 {
			t.Fatalf("complete: %d %s", r.Status, r.Body)
		}
		before := f.state(t)
		if r := f.reply(t, "alice", task.TaskID, tasks.ReplyRequest{Parts: text("one more thing")}); r.Status != 409 || r.code() != "task_terminal" {
			t.Fatalf("reply: %d %s", r.Status, r.Body)
		}
		if r := f.artifact(t, "bob", task.TaskID, tasks.ArtifactRequest{Name: "late.txt", Parts: text("late")}); r.Status != 409 || r.code() != "task_terminal" {
			t.Fatalf("artifact: %d %s", r.Status, r.Body)
		}
		f.unchanged(t, before, "state changed")
	})
}

func TestListTasks(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob", "carol")
	// 9 tasks of alice's with distinct activity times, 3 of them sharing one
	// updated_at to exercise the task_id tie-break, plus one of bob and carol.
	type row struct{ id, ini, rcp, status string }
	rows := []row{
		{"t1", "alice", "bob", "submitted"}, {"t2", "bob", "alice", "working"}, {"t3", "alice", "carol", "completed"},
		{"t4", "carol", "alice", "working"}, {"t5", "alice", "bob", "working"}, {"t6", "alice", "bob", "failed"},
		{"t7", "bob", "alice", "submitted"}, {"t8", "alice", "carol", "working"}, {"t9", "carol", "alice", "canceled"},
		{"tx", "bob", "carol", "working"},
	}
	for i, r := range rows {
		at := t0.Add(time.Duration(i) * time.Minute)
		if i >= 5 && i <= 7 {
			at = t0.Add(5 * time.Minute) // t6, t7, t8 tie
		}
		f.taskIn(t, r.id, r.ini, r.rcp, r.status, at)
	}
	list := func(q map[string]string) (tasks.ListResult, response) {
		r := f.call(t, req{fn: "ListTasksFunction", caller: "alice", method: "GET", path: "/v1/tasks", query: q})
		var res tasks.ListResult
		if r.Status == 200 {
			r.decode(t, &res)
		}
		return res, r
	}
	walk := func(q map[string]string) []string {
		var ids []string
		for page := 0; page < 20; page++ {
			res, r := list(q)
			if r.Status != 200 {
				t.Fatalf("list %v: %d %s", q, r.Status, r.Body)
			}
			for _, task := range res.Tasks {
				ids = append(ids, task.TaskID)
			}
			if res.NextCursor == "" {
				return ids
			}
			q["cursor"] = res.NextCursor
		}
		t.Fatal("more than 20 pages")
		return nil
	}

	cases := []struct {
		name  string
		query map[string]string
		want  string
	}{
		{"all of the caller's tasks come newest activity first, ties by task id, in pages", map[string]string{"limit": "2"}, "[t9 t8 t7 t6 t5 t4 t3 t2 t1]"},
		{"one page holds everything when the limit allows", map[string]string{}, "[t9 t8 t7 t6 t5 t4 t3 t2 t1]"},
		{"role=initiator keeps the tasks the caller started", map[string]string{"role": "initiator", "limit": "1"}, "[t8 t6 t5 t3 t1]"},
		{"role=recipient keeps the tasks sent to the caller", map[string]string{"role": "recipient", "limit": "3"}, "[t9 t7 t4 t2]"},
		{"status filters", map[string]string{"status": "working", "limit": "2"}, "[t8 t5 t4 t2]"},
		{"status and role combine", map[string]string{"status": "working", "role": "recipient"}, "[t4 t2]"},
		{"context_id filters", map[string]string{"context_id": "ctx-t5"}, "[t5]"},
		{"no match is an empty list", map[string]string{"status": "rejected"}, "[]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := fmt.Sprint(walk(c.query)); got != c.want && !(c.want == "[]" && got == "[]") {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}

	t.Run("pages are full until the last one and carry no cursor at the end", func(t *testing.T) {
		res, _ := list(map[string]string{"limit": "4"})
		if len(res.Tasks) != 4 || res.NextCursor == "" {
			t.Fatalf("first page: %d tasks, cursor %q", len(res.Tasks), res.NextCursor)
		}
		res, _ = list(map[string]string{"limit": "9"})
		if len(res.Tasks) != 9 || res.NextCursor != "" {
			t.Fatalf("exact page: %d tasks, cursor %q", len(res.Tasks), res.NextCursor)
		}
	})

	bad := []struct {
		name  string
		query map[string]string
		code  string
	}{
		{"an unknown status is a 400", map[string]string{"status": "done"}, "invalid_query"},
		{"an unknown role is a 400", map[string]string{"role": "owner"}, "invalid_query"},
		{"a limit of 0 is a 400", map[string]string{"limit": "0"}, "invalid_query"},
		{"a limit over 200 is a 400", map[string]string{"limit": "201"}, "invalid_query"},
		{"a limit that is not a number is a 400", map[string]string{"limit": "ten"}, "invalid_query"},
		{"a cursor that is not base64 is a 400", map[string]string{"cursor": "%%%"}, "invalid_cursor"},
		{"a forged cursor is a 400", map[string]string{"cursor": "djF8bm90LWEtdGltZXx0MQ"}, "invalid_cursor"},
		{"a cursor past year 9999 is a 400", map[string]string{"cursor": "djF8MjUzNDAyMzAwODAwMDAwMDAwfHQx"}, "invalid_cursor"},
		{"a cursor at the largest time is a 400", map[string]string{"cursor": "djF8OTIyMzM3MjAzNjg1NDc3NTgwN3x0MQ"}, "invalid_cursor"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if _, r := list(c.query); r.Status != 400 || r.code() != c.code {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
		})
	}

}
