package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/mysql"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

func memberIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return ids
}

func TestGroupFanoutOfAThousandMembersIsOneTransaction(t *testing.T) {
	f := newFixture(t)
	members := memberIDs("m", 1000)
	f.agents(t, members...)
	f.agents(t, "outsider")
	f.group(t, "big", "ctx-big", members...)
	sender := members[0]
	body := tasks.GroupSendRequest{Parts: text("all hands at noon"), MessageID: "all-hands"}

	t.Run("a failure just before the commit undoes the whole fan-out, which nobody saw meanwhile", func(t *testing.T) {
		before := f.state(t)
		var seenTasks, seenEvents int
		f.svc.Failpoint = func(ctx context.Context, name string) error {
			// Another connection, while every row is written but not committed.
			seenTasks = f.count(t, "SELECT COUNT(*) FROM tasks WHERE group_id = 'big'")
			seenEvents = f.count(t, "SELECT COUNT(*) FROM outbox_events WHERE group_id = 'big'")
			return errors.New("injected failure at " + name)
		}
		defer func() { f.svc.Failpoint = nil }()
		r := f.groupSend(t, sender, "big", body)
		if r.Status != 500 {
			t.Fatalf("got %d %s, want the injected 500", r.Status, r.Body)
		}
		if seenTasks != 0 || seenEvents != 0 {
			t.Fatalf("before the commit another connection saw %d tasks and %d events", seenTasks, seenEvents)
		}
		f.unchanged(t, before, "the failed fan-out left rows")
	})

	t.Run("the fan-out creates one two-party task and one event per other member", func(t *testing.T) {
		start := time.Now()
		r := f.groupSend(t, sender, "big", body)
		if r.Status != 202 {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		t.Logf("fan-out to 999 members took %v", time.Since(start).Round(time.Millisecond))
		var res tasks.GroupSendResult
		r.decode(t, &res)
		if res.GroupID != "big" || res.ContextID != "ctx-big" || res.MessageID != "all-hands" || len(res.Tasks) != 999 {
			t.Fatalf("answer: group %s context %s message %s, %d tasks", res.GroupID, res.ContextID, res.MessageID, len(res.Tasks))
		}
		taskOf := map[string]string{}
		for _, gt := range res.Tasks {
			taskOf[gt.To] = gt.TaskID
		}
		if _, self := taskOf[sender]; self || len(taskOf) != 999 {
			t.Fatalf("the tasks go to %d distinct members (sender included: %v)", len(taskOf), self)
		}
		f.counts(t, map[string]int{
			"SELECT COUNT(*) FROM tasks WHERE group_id = 'big' AND context_id = 'ctx-big' AND initiator = 'm0000' AND status = 'submitted'": 999,
			"SELECT COUNT(DISTINCT recipient) FROM tasks WHERE group_id = 'big'":                                                            999,
			"SELECT COUNT(*) FROM task_messages WHERE message_id = 'all-hands' AND sender = 'm0000'":                                        999,
			"SELECT COUNT(*) FROM outbox_events WHERE group_id = 'big' AND context_id = 'ctx-big' AND seq = 1 AND message_id = 'all-hands'": 999,
			"SELECT COUNT(*) FROM inbox_counters WHERE last_seq = 1":                                                                        999,
			"SELECT last_seq FROM inbox_counters WHERE recipient = 'm0000'":                                                                 0,
			"SELECT COUNT(DISTINCT occurred_at) FROM outbox_events":                                                                         1,
		})
		evs := f.events(t, "m0500")
		if len(evs) != 1 || evs[0].TaskID != taskOf["m0500"] || evs[0].GroupID != "big" || evs[0].From != sender {
			t.Fatalf("m0500's events: %+v", evs)
		}
		var mb tasks.MessageBody
		_ = json.Unmarshal(evs[0].Body, &mb)
		if mb.Task.GroupID != "big" || mb.Task.Recipient != "m0500" || mb.Message.From != sender {
			t.Fatalf("body %s", evs[0].Body)
		}
	})

	t.Run("a retry of the fan-out returns the same tasks and writes nothing", func(t *testing.T) {
		f.refill(t, sender) // the fan-out spent 999 units of the sender's budget
		before := f.state(t)
		r := f.groupSend(t, sender, "big", body)
		var res tasks.GroupSendResult
		r.decode(t, &res)
		if r.Status != 202 || len(res.Tasks) != 999 {
			t.Fatalf("got %d with %d tasks", r.Status, len(res.Tasks))
		}
		f.unchanged(t, before, "the retry wrote")
	})

	t.Run("a member's reply goes back to the sender only", func(t *testing.T) {
		var taskID string
		_ = f.db.QueryRow("SELECT task_id FROM tasks WHERE group_id = 'big' AND recipient = 'm0007'").Scan(&taskID)
		if r := f.reply(t, "m0007", taskID, tasks.ReplyRequest{Parts: text("I'll be there")}); r.Status != 202 {
			t.Fatalf("reply: %d %s", r.Status, r.Body)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM outbox_events WHERE task_id = ? AND sender = 'm0007'", taskID); n != 1 {
			t.Fatalf("%d events for the reply", n)
		}
		f.refill(t, sender)
		evs := f.events(t, sender)
		if len(evs) != 1 || evs[0].From != "m0007" || evs[0].GroupID != "big" || evs[0].ContextID != "ctx-big" {
			t.Fatalf("the sender's events: %+v", evs)
		}
	})

	t.Run("a non-member cannot tell the group exists", func(t *testing.T) {
		a := f.groupSend(t, "outsider", "big", tasks.GroupSendRequest{Parts: text("hi")})
		b := f.groupSend(t, "outsider", "no-such-group", tasks.GroupSendRequest{Parts: text("hi")})
		if a.Status != 404 || a.code() != "group_not_found" || string(a.Body) != string(b.Body) {
			t.Fatalf("existing: %d %s; missing: %d %s", a.Status, a.Body, b.Status, b.Body)
		}
	})
}

func TestGroupFanoutLimits(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "solo", "a", "b", "c")
	f.group(t, "alone", "ctx-alone", "solo")
	f.group(t, "abc", "ctx-abc", "a", "b", "c")
	t.Run("a group with no one else is a 422", func(t *testing.T) {
		if r := f.groupSend(t, "solo", "alone", tasks.GroupSendRequest{Parts: text("echo?")}); r.Status != 422 || r.code() != "no_recipients" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})
	t.Run("a fan-out over the total byte cap is a 413 that writes nothing", func(t *testing.T) {
		f.svc.MaxFanoutBytes = 1000
		defer func() { f.svc.MaxFanoutBytes = tasks.DefaultMaxFanoutBytes }()
		before := f.state(t)
		r := f.groupSend(t, "a", "abc", tasks.GroupSendRequest{Parts: text(strings.Repeat("y", 600))})
		if r.Status != 413 || r.code() != "fanout_too_large" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		f.unchanged(t, before, "state changed")
	})
}

// Two groups with the same 1,000 members; o0000-o0002 send in one while
// o0997-o0999 send in the other, all six at once (one sender per round, as a
// fan-out to 999 spends its sender's budget for 20 s): whole group-send
// transactions (tasks, messages, idempotency rows and ~998 shared counters
// each) overlap without a deadlock. Members are read in agent_id order, so
// both fan-outs hand Append the same order here; the lock order itself, with
// recipients fed in opposite orders, is proven by
// outbox.TestAppendInOppositeOrdersDoesNotDeadlock.
func TestOverlappingGroupFanoutsDoNotDeadlock(t *testing.T) {
	f := newFixture(t)
	members := memberIDs("o", 1000)
	f.agents(t, members...)
	f.group(t, "g-up", "ctx-up", members...)
	f.group(t, "g-down", "ctx-down", members...)
	const rounds = 3
	noDeadlocks(t, f.db, f.dsn, func() {
		var wg sync.WaitGroup
		for i := range rounds {
			for _, side := range []struct{ sender, group string }{{members[i], "g-up"}, {members[len(members)-1-i], "g-down"}} {
				wg.Go(func() {
					r := f.groupSend(t, side.sender, side.group, tasks.GroupSendRequest{Parts: text(fmt.Sprintf("round %d", i))})
					if r.Status != 202 {
						t.Errorf("%s in %s: %d %s", side.sender, side.group, r.Status, r.Body)
					}
				})
			}
		}
		wg.Wait()
	})
	// Every member that did not send got 2 × rounds events with seqs 1..6.
	if n := f.count(t, "SELECT COUNT(*) FROM inbox_counters WHERE last_seq = ?", 2*rounds); n != 1000-2*rounds {
		t.Fatalf("%d members with %d events, want %d", n, 2*rounds, 1000-2*rounds)
	}
	if n := f.count(t, "SELECT COUNT(*) FROM outbox_events WHERE recipient = 'o0500'"); n != 2*rounds {
		t.Fatalf("o0500 has %d events", n)
	}
}

// noDeadlocks runs scenario and requires the server's Innodb_deadlocks to
// stay unchanged. The counter is global and other test binaries may share
// the server: if it moved and the latest deadlock report does not mention
// this test's database, the scenario runs again (at most three times); a
// deadlock in this database fails at once.
func noDeadlocks(t *testing.T, db *mysql.DB, dsn string, scenario func()) {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		before := innodbDeadlocks(t, db)
		scenario()
		if t.Failed() {
			return
		}
		delta := innodbDeadlocks(t, db) - before
		if delta == 0 {
			return
		}
		report := latestDeadlock(t, db)
		if strings.Contains(report, cfg.DBName) {
			t.Fatalf("Innodb_deadlocks rose by %d, in this test's database:\n%s", delta, report)
		}
		t.Logf("attempt %d: Innodb_deadlocks rose by %d in another database on the server; running again", attempt, delta)
	}
	t.Fatal("could not get a run without deadlocks elsewhere on the server")
}

func innodbDeadlocks(t *testing.T, db *mysql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &n); err != nil {
		t.Fatalf("Innodb_deadlocks: %v", err)
	}
	return n
}

func latestDeadlock(t *testing.T, db *mysql.DB) string {
	t.Helper()
	var typ, name, status string
	if err := db.QueryRow("SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		t.Fatalf("SHOW ENGINE INNODB STATUS: %v", err)
	}
	i := strings.Index(status, "LATEST DETECTED DEADLOCK")
	if i < 0 {
		return ""
	}
	rest := status[i:]
	if j := strings.Index(rest, "\nTRANSACTIONS\n"); j > 0 {
		rest = rest[:j]
	}
	return rest
}
