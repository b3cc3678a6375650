package mysql_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

const (
	createPipeRowsSQL = `CREATE TABLE pipe_rows (k INT NOT NULL PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB`
	insertPipeRowSQL  = `INSERT INTO pipe_rows (k, v) VALUES (?, ?)`
	bumpPipeRowSQL    = `UPDATE pipe_rows SET v = v + 1 WHERE k = ?`
	pipeRowsSQL       = `SELECT k FROM pipe_rows ORDER BY k`
	// openTxSQL counts the transactions open on the asking connection.
	openTxSQL = `SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID()`
	connIDSQL = `SELECT CONNECTION_ID()`
)

// pipeDB is a fresh database with the pipe_rows table, on a pool of one
// connection, so that what a pipe leaves on its connection is what the next
// statement finds.
func pipeDB(t *testing.T) *mysql.DB {
	t.Helper()
	db, _ := mysqltest.Empty(t)
	if _, err := db.Exec(createPipeRowsSQL); err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

// keys returns the k of every committed pipe_rows row.
func keys(t *testing.T, db *mysql.DB) []int {
	t.Helper()
	rows, err := db.Query(pipeRowsSQL)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var k int
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	return out
}

// noTransactionLeft fails t when the pool's connection is inside a
// transaction: the next START TRANSACTION would commit it.
func noTransactionLeft(t *testing.T, db *mysql.DB) {
	t.Helper()
	var n int
	if err := db.QueryRow(openTxSQL).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the pooled connection is left inside %d transaction(s)", n)
	}
}

func TestAPipeSendsQueuedStatementsWithTheNextOne(t *testing.T) {
	db := pipeDB(t)
	db.SetMaxOpenConns(2) // the pipe's connection and the observer's
	ctx := context.Background()
	// A dirty read sees a statement as soon as the server has run it.
	observer, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close()
	if _, err := observer.ExecContext(ctx, `SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED`); err != nil {
		t.Fatal(err)
	}
	seen := func() int {
		var n int
		if err := observer.QueryRowContext(ctx, `SELECT COUNT(*) FROM pipe_rows`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var afterQueue, afterExec, afterSecondQueue int
	err = db.InPipe(ctx, func(p *mysql.Pipe) error {
		p.Queue(insertPipeRowSQL, 1, 0)
		afterQueue = seen()
		if _, err := p.ExecContext(ctx, insertPipeRowSQL, 2, 0); err != nil {
			return err
		}
		afterExec = seen()
		if _, err := p.Queued().ExecContext(ctx, insertPipeRowSQL, 3, 0); err != nil {
			return err
		}
		afterSecondQueue = seen()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if afterQueue != 0 || afterExec != 2 || afterSecondQueue != 2 {
		t.Fatalf("rows the server had run: %d after Queue, %d after the next ExecContext, %d after a Queued ExecContext; want 0, 2, 2",
			afterQueue, afterExec, afterSecondQueue)
	}
	if got := keys(t, db); len(got) != 3 {
		t.Fatalf("committed rows %v, want the three (the last one sent with the COMMIT)", got)
	}
}

func TestAPipeThatFailsCommitsNothing(t *testing.T) {
	ctx := context.Background()
	errOwn := errors.New("fn's own error")
	cases := []struct {
		name string
		fn   func(p *mysql.Pipe) error
		want func(error) bool
	}{
		{"a queued statement that fails at the commit rolls back the statements sent before it and the ones after it never run",
			func(p *mysql.Pipe) error {
				if _, err := p.ExecContext(ctx, insertPipeRowSQL, 1, 0); err != nil {
					return err
				}
				p.Queue(insertPipeRowSQL, 1, 0) // duplicate key
				p.Queue(insertPipeRowSQL, 3, 0)
				return nil
			}, mysql.IsDuplicate},
		{"a queued statement's failure is the transaction's even when fn ignores it",
			func(p *mysql.Pipe) error {
				if _, err := p.ExecContext(ctx, insertPipeRowSQL, 1, 0); err != nil {
					return err
				}
				p.Queue(insertPipeRowSQL, 1, 0)
				_, _ = p.ExecContext(ctx, insertPipeRowSQL, 2, 0) // carries the duplicate
				return nil
			}, mysql.IsDuplicate},
		{"a queued statement's failure before a query is the transaction's, not the query's",
			func(p *mysql.Pipe) error {
				if _, err := p.ExecContext(ctx, insertPipeRowSQL, 1, 0); err != nil {
					return err
				}
				p.Queue(insertPipeRowSQL, 1, 0)
				var k int
				return p.QueryRowContext(ctx, pipeRowsSQL).Scan(&k)
			}, mysql.IsDuplicate},
		{"fn's error rolls back what was sent and drops what was queued",
			func(p *mysql.Pipe) error {
				if _, err := p.ExecContext(ctx, insertPipeRowSQL, 1, 0); err != nil {
					return err
				}
				p.Queue(insertPipeRowSQL, 2, 0)
				return errOwn
			}, func(err error) bool { return errors.Is(err, errOwn) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := pipeDB(t)
			err := db.InPipe(ctx, c.fn)
			if !c.want(err) {
				t.Fatalf("InPipe returned %v", err)
			}
			if got := keys(t, db); len(got) != 0 {
				t.Fatalf("rows %v were committed", got)
			}
			noTransactionLeft(t, db)
		})
	}
}

func TestAPipeWhoseContextEndsRollsBackOnItsConnection(t *testing.T) {
	db := pipeDB(t)
	var before int64
	if err := db.QueryRow(connIDSQL).Scan(&before); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err := db.InPipe(ctx, func(p *mysql.Pipe) error {
		if _, err := p.ExecContext(ctx, insertPipeRowSQL, 1, 0); err != nil {
			return err
		}
		cancel() // the caller gives up between two statements
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("InPipe returned %v", err)
	}
	// The ROLLBACK ran on the connection, which went back to the pool
	// clean: the same connection, no transaction, no row.
	var after int64
	if err := db.QueryRow(connIDSQL).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("the pool's connection changed (%d, then %d): the pipe did not roll back on it", before, after)
	}
	noTransactionLeft(t, db)
	if got := keys(t, db); len(got) != 0 {
		t.Fatalf("rows %v were committed", got)
	}
}

// Two pipes take two rows in opposite orders, the second row of one of
// them queued to travel with its COMMIT: InnoDB kills one of them with a
// deadlock, which InPipe runs again, so both commit.
func TestAPipeRunsAgainAfterADeadlock(t *testing.T) {
	db := pipeDB(t)
	db.SetMaxOpenConns(2)
	ctx := context.Background()
	for k := range 2 {
		if _, err := db.Exec(insertPipeRowSQL, k, 0); err != nil {
			t.Fatal(err)
		}
	}
	var both sync.WaitGroup
	both.Add(2)
	var runs atomic.Int32
	// pipe bumps first then second, the second bump queued or sent at once.
	pipe := func(first, second int, queued bool) error {
		var once sync.Once
		return db.InPipe(ctx, func(p *mysql.Pipe) error {
			runs.Add(1)
			if _, err := p.ExecContext(ctx, bumpPipeRowSQL, first); err != nil {
				return err
			}
			once.Do(func() { both.Done(); both.Wait() }) // both hold their first row
			if queued {
				p.Queue(bumpPipeRowSQL, second)
				return nil
			}
			_, err := p.ExecContext(ctx, bumpPipeRowSQL, second)
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- pipe(0, 1, true) }()
	go func() { errs <- pipe(1, 0, false) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a pipe failed: %v", err)
		}
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("the pipes ran %d times, want 3 (one of them twice, after its deadlock)", n)
	}
	var v0, v1 int
	if err := db.QueryRow(`SELECT (SELECT v FROM pipe_rows WHERE k = 0), (SELECT v FROM pipe_rows WHERE k = 1)`).Scan(&v0, &v1); err != nil {
		t.Fatal(err)
	}
	if v0 != 2 || v1 != 2 {
		t.Fatalf("rows hold %d and %d, want 2 and 2 (each pipe's bumps once)", v0, v1)
	}
}
