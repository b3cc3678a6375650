package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

var testT0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}

func event(to, msg string, body string) Event {
	return Event{Type: mesh.EventMessage, To: to, From: "sender", TaskID: "task-" + msg, ContextID: "ctx", MessageID: msg,
		OccurredAt: testT0, Body: []byte(body)}
}

func appendIn(t testing.TB, db *mysql.DB, events []Event) error {
	t.Helper()
	return db.InTx(context.Background(), func(tx *sql.Tx) error { return Append(context.Background(), tx, events) })
}

// Two transactions append to the same 1,000 recipients, one listing them
// ascending and the other descending, several times in parallel. Append
// locks counters in sorted order whatever the input order, so the server's
// deadlock counter does not move.
func TestAppendInOppositeOrdersDoesNotDeadlock(t *testing.T) {
	db, dsn := mysqltest.New(t)
	// The recipients are a fifth of all agents, as in a real mesh: on a
	// table barely larger than the fan-out the optimizer scans the whole
	// counter table, locking every row in key order, which would hide the
	// lock order this test is about.
	all := ids("r", 5000)
	identitytest.Agents(t, db, all...)
	rs := all[:1000]
	up := make([]Event, len(rs))
	down := make([]Event, len(rs))
	for i, r := range rs {
		up[i] = event(r, "up", `{}`)
		down[len(rs)-1-i] = event(r, "down", `{}`)
	}
	const rounds = 4
	cfg, _ := gomysql.ParseDSN(dsn)
	var name string
	var before, after int64
	for attempt := 1; ; attempt++ {
		if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &before); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range rounds {
			for _, evs := range [][]Event{up, down} {
				wg.Go(func() {
					batch := append([]Event(nil), evs...)
					if err := appendIn(t, db, batch); err != nil {
						t.Errorf("append: %v", err)
					}
				})
			}
		}
		wg.Wait()
		if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &after); err != nil {
			t.Fatal(err)
		}
		if after == before {
			break
		}
		var typ, n, status string
		_ = db.QueryRow("SHOW ENGINE INNODB STATUS").Scan(&typ, &n, &status)
		if strings.Contains(status[strings.Index(status, "LATEST DETECTED DEADLOCK")+1:], cfg.DBName) || attempt == 3 {
			t.Fatalf("Innodb_deadlocks rose by %d", after-before)
		}
		t.Logf("a deadlock elsewhere on the server; running again")
	}
	// Every recipient got every event, with gapless seqs.
	var distinct, last, rows int
	if err := db.QueryRow("SELECT COUNT(DISTINCT last_seq), MAX(last_seq) FROM inbox_counters WHERE recipient < 'r1000'").Scan(&distinct, &last); err != nil {
		t.Fatal(err)
	}
	_ = db.QueryRow("SELECT COUNT(*) FROM outbox_events WHERE recipient = 'r0999' AND seq BETWEEN 1 AND ?", last).Scan(&rows)
	if distinct != 1 || last == 0 || last%(2*rounds) != 0 || rows != last {
		t.Fatalf("counters: %d distinct values, max %d; r0999 holds %d rows", distinct, last, rows)
	}
}

func TestAppend(t *testing.T) {
	db, _ := mysqltest.New(t)
	identitytest.Agents(t, db, "a", "b", "c")

	t.Run("events of one recipient get consecutive seqs in slice order", func(t *testing.T) {
		evs := []Event{event("b", "1", `{}`), event("a", "2", `{}`), event("b", "3", `{}`), event("b", "4", `{}`)}
		if err := appendIn(t, db, evs); err != nil {
			t.Fatal(err)
		}
		got := []int64{evs[0].Seq, evs[1].Seq, evs[2].Seq, evs[3].Seq}
		if fmt.Sprint(got) != "[1 1 2 3]" {
			t.Fatalf("seqs %v", got)
		}
	})

	t.Run("an unknown recipient fails the whole append", func(t *testing.T) {
		err := appendIn(t, db, []Event{event("a", "x", `{}`), event("ghost", "y", `{}`)})
		if !mesh.IsKind(err, mesh.KindNotFound) {
			t.Fatalf("err = %v", err)
		}
		var n int
		_ = db.QueryRow("SELECT last_seq FROM inbox_counters WHERE recipient = 'a'").Scan(&n)
		if n != 1 {
			t.Fatalf("a's counter moved to %d", n)
		}
	})

	t.Run("one append may carry more body bytes than max_allowed_packet", func(t *testing.T) {
		var maxPacket int
		if err := db.QueryRow("SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
			t.Fatal(err)
		}
		// Enough 1 MiB bodies that their sum exceeds the packet limit.
		n := maxPacket/(1<<20) + 4
		body := `"` + strings.Repeat("z", 1<<20) + `"`
		evs := make([]Event, n)
		for i := range evs {
			evs[i] = event("c", fmt.Sprintf("big-%d", i), body)
		}
		if err := appendIn(t, db, evs); err != nil {
			t.Fatalf("%d bodies of 1 MiB (max_allowed_packet %d): %v", n, maxPacket, err)
		}
		var count int
		_ = db.QueryRow("SELECT COUNT(*) FROM outbox_events WHERE recipient = 'c'").Scan(&count)
		if count != n {
			t.Fatalf("%d rows, want %d", count, n)
		}
	})
}

func TestChunkEnd(t *testing.T) {
	ev := func(n int) Event { return Event{Body: make([]byte, n)} }
	evs := []Event{ev(10), ev(10), ev(100), ev(10), ev(10)}
	cases := []struct {
		name              string
		start, rows, size int
		want              int
	}{
		{"rows cap a chunk", 0, 2, 1000, 2},
		{"bytes cap a chunk", 0, 10, 25, 2},
		{"a body larger than the cap travels alone", 2, 10, 50, 3},
		{"the last chunk ends at the slice end", 3, 10, 1000, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := chunkEnd(evs, c.start, c.rows, c.size); got != c.want {
				t.Fatalf("chunkEnd = %d, want %d", got, c.want)
			}
		})
	}
}

func TestAppendSealsUnderTheEpochCommittedLast(t *testing.T) {
	db, _ := mysqltest.New(t)
	identitytest.Agents(t, db, "bob")
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// The writer's snapshot is taken before the rotation commits...
	var epoch int
	if err := tx.QueryRowContext(ctx, "SELECT key_epoch FROM agents WHERE agent_id = 'bob'").Scan(&epoch); err != nil || epoch != 1 {
		t.Fatalf("epoch %d, %v", epoch, err)
	}
	if _, err := db.Exec("UPDATE agents SET key_epoch = key_epoch + 1 WHERE agent_id = 'bob'"); err != nil {
		t.Fatal(err)
	}
	// ...yet its event must be sealed for the rotated key, not the retired one.
	if err := Append(ctx, tx, []Event{event("bob", "m1", `{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT key_epoch FROM outbox_events WHERE recipient = 'bob' AND seq = 1").Scan(&epoch); err != nil || epoch != 2 {
		t.Fatalf("event sealed under epoch %d (%v), want 2", epoch, err)
	}
}
