package tasks_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/outbox"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

// Three senders each send 200 messages to one recipient at once, through the
// HTTP middleware, with the real clock: the per-sender limit (50/s, burst
// 100) really applies, and a sender that gets a 429 waits briefly and
// retries the same message, as meshd does. Each 429 is a rolled-back
// transaction in the middle of the run, which must leave no gap either.
func TestConcurrentSendersGetGaplessOrderedSeqs(t *testing.T) {
	f := newFixture(t)
	f.svc.Clock = mesh.SystemClock
	senders := []string{"s1", "s2", "s3"}
	const perSender = 200
	const total = perSender * 3
	f.agents(t, append(senders, "rcpt")...)
	for _, s := range senders {
		f.friends(t, s, "rcpt")
	}

	// The reader polls the inbox the whole time and checks every page
	// starts right after its cursor and has no hole.
	readerDone := make(chan error, 1)
	sendersDone := make(chan struct{})
	go func() {
		var last int64
		deadline := time.Now().Add(60 * time.Second)
		polls := 0
		for time.Now().Before(deadline) {
			r := f.inbox(t, "rcpt", map[string]string{"after": strconv.FormatInt(last, 10), "limit": "37"})
			polls++
			switch r.Status {
			case 200:
			case 429:
				time.Sleep(100 * time.Millisecond)
				continue
			default:
				readerDone <- fmt.Errorf("inbox: %d %s", r.Status, r.Body)
				return
			}
			var p inboxPage
			r.decode(t, &p)
			for _, e := range p.Events {
				if e.Seq != last+1 {
					readerDone <- fmt.Errorf("after seq %d the reader saw seq %d (poll %d)", last, e.Seq, polls)
					return
				}
				last = e.Seq
			}
			if last == total {
				t.Logf("reader: %d polls", polls)
				readerDone <- nil
				return
			}
			select {
			case <-sendersDone:
			default:
				time.Sleep(25 * time.Millisecond)
			}
		}
		readerDone <- fmt.Errorf("reader reached seq %d of %d", last, total)
	}()

	var wg sync.WaitGroup
	limited := make([]int, len(senders))
	errs := make(chan error, len(senders))
	start := time.Now()
	for si, s := range senders {
		wg.Go(func() {
			for i := range perSender {
				body := tasks.SendRequest{To: "rcpt", Parts: text(fmt.Sprintf("%s #%d", s, i)), MessageID: fmt.Sprintf("%s-%03d", s, i)}
				for {
					r := f.call(t, req{fn: "SendMessageFunction", caller: s, method: "POST", path: "/v1/messages", body: body})
					if r.Status == 202 {
						break
					}
					if r.Status != 429 {
						errs <- fmt.Errorf("%s message %d: %d %s", s, i, r.Status, r.Body)
						return
					}
					limited[si]++
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	close(sendersDone)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d messages in %v; 429s per sender: %v", total, time.Since(start).Round(time.Millisecond), limited)
	if err := <-readerDone; err != nil {
		t.Fatal(err)
	}

	evs := f.events(t, "rcpt")
	if len(evs) != total {
		t.Fatalf("%d events, want %d", len(evs), total)
	}
	next := map[string]int{}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		want := fmt.Sprintf("%s-%03d", e.From, next[e.From])
		if e.MessageID != want {
			t.Fatalf("seq %d is %s's %s, want %s: send order lost", e.Seq, e.From, e.MessageID, want)
		}
		next[e.From]++
	}
	for _, s := range senders {
		if next[s] != perSender {
			t.Fatalf("%s has %d events, want %d", s, next[s], perSender)
		}
	}
}

// While one transaction holds recipient amy's counter, a send to ben goes
// through at once: counters are per recipient, there is no global lock. A
// send to amy, meanwhile, waits, which shows the held lock is real.
func TestRecipientsAreIndependent(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "carol", "amy", "ben")
	f.friends(t, "alice", "ben")
	f.friends(t, "carol", "amy")
	ctx := context.Background()

	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	if err := outbox.Append(ctx, tx, []outbox.Event{{Type: mesh.EventMessage, To: "amy", From: "carol", TaskID: "held",
		ContextID: "held", MessageID: "held", OccurredAt: t0, Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	sendCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, err := f.svc.Send(sendCtx, "alice", tasks.SendRequest{To: "ben", Parts: text("not blocked")})
	if err != nil || r.TaskID == "" {
		t.Fatalf("send to ben while amy's counter is held: %v %+v after %v", err, r, time.Since(start))
	}
	t.Logf("send to ben took %v while amy's counter was held", time.Since(start).Round(time.Millisecond))

	blocked := make(chan error, 1)
	go func() {
		_, err := f.svc.Send(ctx, "carol", tasks.SendRequest{To: "amy", Parts: text("must wait")})
		blocked <- err
	}()
	select {
	case err := <-blocked:
		t.Fatalf("a send to amy finished (%v) while her counter was held", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-blocked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the send to amy did not finish after the lock was released")
	}
	if evs := f.events(t, "amy"); len(evs) != 1 || evs[0].Seq != 1 {
		t.Fatalf("amy's events after the rollback: %+v", evs)
	}
}

const helperEnv = "MESH_TASKS_HELPER"

// A writer process is SIGKILLed at the failpoint before its commit, holding
// the recipient's counter, its rows (outbox row included) queued to travel
// with the COMMIT: the server rolls it back, so there is no message, no
// event and no seq gap; the client's retry with the same message_id then
// succeeds, exactly once.
func TestCrashBeforeCommitLeavesNoTrace(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "alice", "bob")
	f.friends(t, "alice", "bob")
	f.send(t, "alice", tasks.SendRequest{To: "bob", Parts: text("before the crash")}) // bob's seq 1
	before := f.state(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriterProcess$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=writer", "MESH_TEST_DSN="+f.dsn, "MESH_FAILPOINT="+tasks.FailpointBeforeCommit)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reached := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "FAILPOINT "+tasks.FailpointBeforeCommit+" reached") {
				reached <- true
				return
			}
		}
		reached <- false
	}()
	select {
	case ok := <-reached:
		if !ok {
			_ = cmd.Wait()
			t.Fatal("the writer exited without reaching the failpoint")
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the writer did not reach the failpoint")
	}

	// The writer is inside its transaction: bob's counter is locked by it.
	if err := counterLocked(f, "bob"); err == nil {
		t.Fatal("bob's counter is not locked: the writer is not between its inserts and its commit")
	}
	t.Logf("writer pid %d is at the failpoint holding bob's counter; sending SIGKILL", cmd.Process.Pid)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// The server sees the connection drop and rolls the transaction back.
	deadline := time.Now().Add(15 * time.Second)
	for counterLocked(f, "bob") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the killed writer's transaction still holds bob's counter")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if after := f.state(t); after != before {
		t.Fatalf("the killed writer left something:\n before %+v\n after  %+v", before, after)
	}

	retry := tasks.SendRequest{To: "bob", Parts: text("crash me"), MessageID: "crash-1"}
	first := f.send(t, "alice", retry)
	second := f.send(t, "alice", retry)
	if first != second {
		t.Fatalf("retries answered %+v and %+v", first, second)
	}
	evs := f.events(t, "bob")
	if len(evs) != 2 || evs[0].Seq != 1 || evs[1].Seq != 2 || evs[1].MessageID != "crash-1" {
		t.Fatalf("bob's events: %+v", evs)
	}
	if n := f.count(t, "SELECT COUNT(*) FROM task_messages WHERE message_id = 'crash-1'"); n != 1 {
		t.Fatalf("%d messages crash-1, want 1", n)
	}
}

// counterLocked returns an error when recipient's counter row is locked by
// another transaction: NOWAIT fails at once (MariaDB 1205, MySQL 3572)
// instead of waiting.
func counterLocked(f *fixture, recipient string) error {
	ctx := context.Background()
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	var seq int64
	err = tx.QueryRowContext(ctx, "SELECT last_seq FROM inbox_counters WHERE recipient = ? FOR UPDATE NOWAIT", recipient).Scan(&seq)
	var me *gomysql.MySQLError
	if errors.As(err, &me) && (me.Number == 1205 || me.Number == 3572) {
		return errors.New("locked")
	}
	return err
}

// TestHelperWriterProcess is the writer process of
// TestCrashBeforeCommitLeavesNoTrace; on its own it skips.
func TestHelperWriterProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "writer" {
		t.Skip("helper process of TestCrashBeforeCommitLeavesNoTrace")
	}
	ctx := context.Background()
	db, err := mysql.Open(ctx, os.Getenv("MESH_TEST_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	svc := &tasks.Service{DB: db}
	if fp := os.Getenv("MESH_FAILPOINT"); fp != "" {
		svc.Failpoint = func(_ context.Context, name string) error {
			if name == fp {
				fmt.Printf("FAILPOINT %s reached\n", name)
				_ = os.Stdout.Sync()
				time.Sleep(time.Hour) // until SIGKILL
			}
			return nil
		}
	}
	r, err := svc.Send(ctx, "alice", tasks.SendRequest{To: "bob", Parts: text("crash me"), MessageID: "crash-1"})
	t.Logf("send returned %+v %v", r, err)
}
