package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

// POST /v1/messages checks the token's API key inside its transaction (the
// authenticator verifies only the token): every send still meets the
// revocation, through the real identity authenticator and middleware.
func TestARevokedKeysNextSendIsRefusedWith401(t *testing.T) {
	f := newFixture(t)
	id := identitytest.Service(t, f.db, f.clock)
	apiKey, token := identitytest.NewAgent(t, id, "ann")
	f.agents(t, "bob")
	f.friends(t, "ann", "bob")
	h := httpapi.Lambda(identityhttp.Authenticator(id), quiet, taskshttp.Endpoints(f.svc).Must("SendMessageFunction"))
	post := func(t *testing.T, body tasks.SendRequest) (int, string, tasks.SendResult) {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := h(context.Background(), events.APIGatewayV2HTTPRequest{
			RouteKey: "POST /v1/messages", Body: string(b),
			Headers: map[string]string{"authorization": "Bearer " + token, "content-type": "application/json"},
		})
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Code string `json:"code"`
		}
		var res tasks.SendResult
		_ = json.Unmarshal([]byte(resp.Body), &p)
		_ = json.Unmarshal([]byte(resp.Body), &res)
		return resp.StatusCode, p.Code, res
	}
	status, _, first := post(t, tasks.SendRequest{To: "bob", MessageID: "m-1", Parts: text("while the key is live")})
	if status != 202 {
		t.Fatalf("the first send: %d", status)
	}
	if _, err := id.RevokeKey(context.Background(), "ann", apiKey[4:16]); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		body tasks.SendRequest
	}{
		{"a new task from the revoked key's token is 401 key_revoked", tasks.SendRequest{To: "bob", MessageID: "m-2", Parts: text("after the revocation")}},
		{"a retry of a message sent before the revocation is 401 too, not its stored answer", tasks.SendRequest{To: "bob", MessageID: "m-1", Parts: text("while the key is live")}},
		{"a message in the existing task is 401 key_revoked", tasks.SendRequest{To: "bob", TaskID: first.TaskID, Parts: text("in the task")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.state(t)
			if status, code, _ := post(t, c.body); status != 401 || code != "key_revoked" {
				t.Fatalf("got %d %s, want 401 key_revoked", status, code)
			}
			f.unchanged(t, before, "a refused send changed the database")
		})
	}
	t.Run("out of budget as well, the revoked key is still 401 first", func(t *testing.T) {
		f.freeze(true)
		defer f.freeze(false)
		if _, err := f.db.Exec("UPDATE rate_limits SET tat_us = ? WHERE agent_id = 'ann'", f.clock().Add(1e12).UnixMicro()); err != nil {
			t.Fatal(err)
		}
		if status, code, _ := post(t, tasks.SendRequest{To: "bob", Parts: text("spent")}); status != 401 || code != "key_revoked" {
			t.Fatalf("got %d %s, want 401 key_revoked", status, code)
		}
	})
}

// A send seals its event under the recipient's key_epoch as of its commit:
// the send's share lock on the recipient's agents row makes a rotation in
// progress (its epoch bump uncommitted) hold the send back, and a send after
// it reads the new epoch.
func TestASendWaitsForARotationInProgressAndSealsUnderItsEpoch(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob")
	f.friends(t, "ann", "bob")
	ctx, cancel := context.WithTimeout(context.Background(), raceDeadline)
	defer cancel()
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE agents SET key_epoch = key_epoch + 1 WHERE agent_id = 'bob'"); err != nil {
		t.Fatal(err)
	}
	impatient := &tasks.Service{DB: impatient(t, f.dsn), Clock: f.clock}
	_, err = impatient.Send(ctx, "ann", tasks.SendRequest{To: "bob", Parts: text("racing the rotation")})
	if err == nil {
		t.Fatal("the send committed during the rotation: its event is sealed under the retired epoch")
	}
	if !mysql.IsRetryable(err) {
		t.Fatalf("the send during the rotation: %v, want a lock-wait timeout", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	f.send(t, "ann", tasks.SendRequest{To: "bob", Parts: text("after the rotation")})
	var epoch int
	if err := f.db.QueryRow("SELECT key_epoch FROM outbox_events WHERE recipient = 'bob' ORDER BY seq DESC LIMIT 1").Scan(&epoch); err != nil || epoch != 2 {
		t.Fatalf("the event is sealed under epoch %d (%v), want 2", epoch, err)
	}
}

// A new-task send reads its message_id's stored answer with a plain read
// and writes the key once, at the end: a duplicate that commits the key in
// between wins on the primary key, and the loser rolls back and answers
// from the winner's row (here a 409: the winner's content differs).
func TestASendThatLosesItsMessageIDToAConcurrentWriterAnswersFromTheWinner(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob")
	f.friends(t, "ann", "bob")
	ctx, cancel := context.WithTimeout(context.Background(), raceDeadline)
	defer cancel()
	winner, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer winner.Rollback()
	if _, err := winner.ExecContext(ctx, "INSERT INTO idempotency_keys (sender, message_id, request_hash, response, created_at) VALUES ('ann', 'm-race', ?, '{}', ?)",
		make([]byte, 32), t0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.svc.Send(ctx, "ann", tasks.SendRequest{To: "bob", MessageID: "m-race", Parts: text("the loser")})
		done <- err
	}()
	// The signal: the send waits on the winner's key (InnoDB reports it;
	// only this test's database counts).
	// The wait gives up before ctx ends, so the sessions it then lists
	// are still in whatever held the send.
	wait, stop := context.WithTimeout(ctx, raceDeadline-15*time.Second)
	defer stop()
	// InnoDB refreshes what INNODB_TRX shows only when it was last read
	// more than 100 ms ago: polled faster, it kept showing the moment
	// before the send arrived, and the wait never came.
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for waiting := 0; waiting == 0; {
		select {
		case err := <-done:
			t.Fatalf("the send ended before meeting the winner's key: %v", err)
		case <-wait.Done():
			t.Fatalf("the send never waited on the winner's key; the test database's sessions:\n%s", sessions(t, f.db))
		case <-tick.C:
		}
		if err := f.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := winner.Commit(); err != nil {
		t.Fatal(err)
	}
	var me *mesh.Error
	if err := <-done; !errors.As(err, &me) || me.Code != "message_id_conflict" {
		t.Fatalf("the loser answered %v, want 409 message_id_conflict from the winner's row", err)
	}
	f.counts(t, map[string]int{"SELECT COUNT(*) FROM tasks": 0, "SELECT COUNT(*) FROM task_messages": 0, "SELECT COUNT(*) FROM outbox_events": 0})
}

// An A2A message into an existing task needs the pair to still be able to
// talk (SendA2A's gate): once they are neither friends nor group mates, the
// task is not found to the sender, and nothing is written.
func TestAnA2AMessageIntoATaskNeedsThePairToStillBeReachable(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob")
	f.friends(t, "ann", "bob")
	task := f.send(t, "ann", tasks.SendRequest{To: "bob", Parts: text("hello")})
	for _, c := range []struct {
		name     string
		unfriend bool
		want     string
	}{
		{"while they are friends the message is added", false, ""},
		{"after the friendship ends the task is not found", true, "task_not_found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.unfriend {
				if _, err := f.db.Exec("DELETE FROM friendships"); err != nil {
					t.Fatal(err)
				}
			}
			before := f.state(t)
			_, err := f.svc.SendA2A(context.Background(), "ann", tasks.SendRequest{To: "bob", TaskID: task.TaskID, Parts: text("more")})
			var me *mesh.Error
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("the message was refused: %v", err)
			case c.want != "" && (!errors.As(err, &me) || me.Code != c.want):
				t.Fatalf("got %v, want %s", err, c.want)
			case c.want != "":
				f.unchanged(t, before, "a refused A2A message changed the database")
			}
		})
	}
}

// A new task's gate answers from friendships first and asks about shared
// groups only of two agents that are not friends: group mates may still
// talk, an unrelated agent may not, whichever of the two ids sorts first.
func TestTwoGroupMatesWhoAreNotFriendsMayStartATask(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "zed", "bob")
	f.group(t, "g-1", "ctx-g-1", "ann", "zed")
	for _, c := range []struct {
		name, from, to string
		want           int
	}{
		{"a group mate sorting after the sender is reachable", "ann", "zed", 202},
		{"a group mate sorting before the sender is reachable", "zed", "ann", 202},
		{"an agent sharing no group and no friendship is not", "ann", "bob", 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := f.call(t, req{fn: "SendMessageFunction", caller: c.from, method: "POST", path: "/v1/messages",
				body: tasks.SendRequest{To: c.to, Parts: text("hi")}})
			if r.Status != c.want {
				t.Fatalf("got %d %s, want %d", r.Status, r.Body, c.want)
			}
		})
	}
}

// sessions lists the sessions of db's database (id, command, seconds,
// state, transaction state, statement), so a wait that never came says what
// the session was doing instead. PROCESSLIST is live; the transaction state
// is INNODB_TRX's and may be up to its last refresh old.
func sessions(t *testing.T, db *mysql.DB) string {
	return strings.Join(mysqltest.Strings(t, db, " ", `SELECT p.ID, p.COMMAND, p.TIME, p.STATE, t.trx_state, LEFT(p.INFO, 160)
FROM information_schema.PROCESSLIST p LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID
WHERE p.DB = DATABASE() ORDER BY p.ID`), "\n")
}
