package mysql_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// A deploy can fail between a migration's statements (DDL commits one by one
// in MySQL) or after them but before its schema_migrations row: the next
// deploy runs the whole file again, so every statement of every migration
// must succeed on a schema that already has its effect.
func TestEveryMigrationRunsAgainAfterAPartialRun(t *testing.T) {
	db, _ := mysqltest.New(t) // every migration applied
	ctx := context.Background()
	migs, err := mysql.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, db)
	// Forgetting every bookkeeping row is the worst partial run: each file
	// finds all of its own effects (and those of later files) in place.
	if _, err := db.ExecContext(ctx, "DELETE FROM schema_migrations"); err != nil {
		t.Fatal(err)
	}
	applied, err := db.Migrate(ctx)
	if err != nil {
		t.Fatalf("re-running the migrations over their own effects failed: %v", err)
	}
	if len(applied) != len(migs) {
		t.Fatalf("re-run applied %v, want all %d migrations", applied, len(migs))
	}
	after := snapshot(t, db)
	delete(before, "migrations")
	delete(after, "migrations")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("the schema changed on a re-run:\nbefore %v\nafter  %v", before, after)
	}
}

func TestTheMigrationsHashFollowsTheFiles(t *testing.T) {
	base := fstest.MapFS{
		"migrations/0001_init.sql": {Data: []byte("CREATE TABLE a (id INT);\n")},
	}
	h0, err := mysql.HashMigrations(base)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(fstest.MapFS)
	}{
		{"adding a migration changes the hash", func(f fstest.MapFS) {
			f["migrations/0002_more.sql"] = &fstest.MapFile{Data: []byte("CREATE INDEX a_id ON a (id);\n")}
		}},
		{"editing a migration changes the hash", func(f fstest.MapFS) {
			f["migrations/0001_init.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE a (id BIGINT);\n")}
		}},
		{"renaming a migration changes the hash", func(f fstest.MapFS) {
			f["migrations/0002_init.sql"] = f["migrations/0001_init.sql"]
			delete(f, "migrations/0001_init.sql")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fstest.MapFS{}
			for k, v := range base {
				f[k] = v
			}
			tc.change(f)
			h, err := mysql.HashMigrations(f)
			if err != nil {
				t.Fatal(err)
			}
			if h == h0 {
				t.Fatalf("hash stayed %s", h)
			}
		})
	}
	if again, _ := mysql.HashMigrations(base); again != h0 {
		t.Fatalf("the hash is not stable: %s then %s", h0, again)
	}
}

func TestAFreshDatabaseTakesEveryMigration(t *testing.T) {
	db, _ := mysqltest.Empty(t)
	ctx := context.Background()
	migs, err := mysql.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	applied, err := db.Migrate(ctx)
	if err != nil {
		t.Fatalf("migrating a fresh database: %v", err)
	}
	var want []int
	for _, m := range migs {
		want = append(want, m.Version)
	}
	if !reflect.DeepEqual(applied, want) {
		t.Fatalf("applied %v, want %v", applied, want)
	}
	if again, err := db.Migrate(ctx); err != nil || len(again) != 0 {
		t.Fatalf("a second run applied %v (err %v), want nothing", again, err)
	}
}

// A migration whose bookkeeping row is missing runs again, and the "already
// exists" errors of its CREATEs prove only that a name is taken. The runner
// must look at what the name holds: a table or key of the wrong shape is
// refused, naming what differs, and the migration is not recorded.
func TestAPartlyAppliedMigrationIsRefusedByWhatItLacks(t *testing.T) {
	tests := []struct {
		name      string
		damage    []string
		migration int    // whose schema_migrations row is lost
		file      string // the file the error names
		mention   string // what the error must name
	}{
		{"a table of the first migration without one column is refused, naming the column",
			[]string{"ALTER TABLE agents DROP COLUMN stats"}, 1, "0001_init.sql", "agents.stats is missing"},
		{"a table created IF NOT EXISTS without one column is refused, naming the column",
			[]string{"ALTER TABLE audit_log DROP COLUMN detail"}, 7, "0007_accounts.sql", "audit_log.detail is missing"},
		{"a table without one of its keys is refused, naming the key",
			[]string{"DROP INDEX agents_presence ON agents"}, 1, "0001_init.sql", "agents.agents_presence"},
		{"a table without its unique key is refused, naming the key",
			[]string{"DROP INDEX accounts_email ON accounts"}, 7, "0007_accounts.sql", "accounts.accounts_email"},
		{"a column of another type is refused",
			[]string{"ALTER TABLE api_keys MODIFY revoked_at VARCHAR(10) NULL"}, 1, "0001_init.sql", "api_keys.revoked_at is varchar(10)"},
		{"a column that lost NOT NULL is refused",
			[]string{"ALTER TABLE agents MODIFY name VARCHAR(200) NULL"}, 1, "0001_init.sql", "agents.name allows NULL"},
		{"an id column that folds case is refused",
			[]string{"ALTER TABLE friendships MODIFY friend_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci NOT NULL"},
			1, "0001_init.sql", "friendships.friend_id has collation utf8mb4_unicode_ci"},
		{"an index of the right name on other columns is refused",
			[]string{"DROP INDEX mesh_groups_context ON mesh_groups", "CREATE INDEX mesh_groups_context ON mesh_groups (name)"},
			5, "0005_group_context_index.sql", "mesh_groups.mesh_groups_context is on (name)"},
		{"a procedure of other parameters is refused, naming them",
			[]string{"DROP PROCEDURE send_new_task_v1", "CREATE PROCEDURE send_new_task_v1(IN p_from VARCHAR(64)) SQL SECURITY INVOKER BEGIN SELECT p_from; END"},
			12, "0012_send_procedure.sql", "procedure send_new_task_v1 takes (p_from), want (p_from, p_to,"},
		{"a procedure that runs with its definer's rights is refused",
			[]string{"ALTER PROCEDURE send_new_task_v1 SQL SECURITY DEFINER"}, // sqlgrammar:ignore: MySQL 8.0 and MariaDB alike; vitess has no ALTER PROCEDURE
			12, "0012_send_procedure.sql", "procedure send_new_task_v1 runs as its DEFINER, want INVOKER"},
		{"a unique key that is no longer unique is refused",
			[]string{"DROP INDEX outbox_recipient_seq ON outbox_events", "CREATE INDEX outbox_recipient_seq ON outbox_events (recipient, seq)"},
			1, "0001_init.sql", "outbox_events.outbox_recipient_seq is not unique"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db, _ := mysqltest.New(t)
			ctx := context.Background()
			for _, s := range append(tc.damage, "DELETE FROM schema_migrations WHERE version = ?") {
				var args []any
				if strings.Contains(s, "?") {
					args = append(args, tc.migration)
				}
				if _, err := db.ExecContext(ctx, s, args...); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			applied, err := db.Migrate(ctx)
			if err == nil {
				t.Fatalf("Migrate accepted the damaged schema (applied %v)", applied)
			}
			t.Logf("refused: %v", err)
			for _, want := range []string{tc.file, tc.mention} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not name %q: %v", want, err)
				}
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = ?", tc.migration).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("migration %d was recorded as applied over a schema that lacks part of it", tc.migration)
			}
		})
	}
}

// What a cut-short run left out entirely (a table made IF NOT EXISTS, an
// index made by CREATE INDEX) is made by the next run, which then passes
// the check: completing a migration is not refusing it.
func TestAMigrationCutShortIsCompletedByTheNextRun(t *testing.T) {
	tests := []struct {
		name      string
		damage    []string
		migration int
	}{
		{"a missing table of an IF NOT EXISTS migration is created", []string{"DROP TABLE account_sessions"}, 7},
		{"a missing index of a CREATE INDEX migration is created", []string{"DROP INDEX mesh_groups_context ON mesh_groups"}, 5},
		{"a missing procedure is created", []string{"DROP PROCEDURE send_new_task_v1"}, 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db, _ := mysqltest.New(t)
			ctx := context.Background()
			before := snapshot(t, db)
			for _, s := range tc.damage {
				if _, err := db.ExecContext(ctx, s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			if _, err := db.ExecContext(ctx, "DELETE FROM schema_migrations WHERE version = ?", tc.migration); err != nil {
				t.Fatal(err)
			}
			applied, err := db.Migrate(ctx)
			if err != nil {
				t.Fatalf("the next run refused to complete the migration: %v", err)
			}
			if !reflect.DeepEqual(applied, []int{tc.migration}) {
				t.Fatalf("applied %v, want [%d]", applied, tc.migration)
			}
			after := snapshot(t, db)
			delete(before, "migrations")
			delete(after, "migrations")
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("the completed schema differs:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// The runner can only vouch for what it knows how to check: a migration with
// DDL it cannot read (ALTER, DROP, ...) is refused before any statement runs.
func TestAMigrationTheRunnerCannotCheckIsRefusedBeforeItRuns(t *testing.T) {
	db, _ := mysqltest.Empty(t)
	ctx := context.Background()
	files := fstest.MapFS{
		"migrations/0001_init.sql": {Data: []byte("CREATE TABLE a (\n  id INT NOT NULL,\n  PRIMARY KEY (id)\n);\n")},
		"migrations/0002_more.sql": {Data: []byte("ALTER TABLE a ADD COLUMN b INT NULL;\n")},
	}
	applied, err := db.MigrateFS(ctx, files)
	if err == nil {
		t.Fatalf("a migration with ALTER TABLE was accepted (applied %v)", applied)
	}
	if !strings.Contains(err.Error(), "0002_more.sql statement 1") {
		t.Errorf("the error does not name the statement: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("the first migration ran although the set was refused")
	}
}

// A procedure runs with its definer's rights unless it says otherwise, and
// the migration's definer owns the schema: the runner accepts only SQL
// SECURITY INVOKER procedures, which the application user runs with its own
// DML grant, and refuses any other before a statement runs. Its body's
// statements end with ';' too; the procedure ends at the line "END;".
func TestAProcedureRunsWithItsCallersRightsOrIsRefused(t *testing.T) {
	const body = "(IN p_a INT, IN p_b VARCHAR(8) CHARACTER SET utf8mb4)\n%sBEGIN\n  DECLARE v INT;\n  SET v = p_a;\n  IF v < 0 THEN\n    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'negative';\n  END IF;\n  SELECT v, p_b;\nEND;\n"
	tests := []struct {
		name   string
		clause string
		refuse bool
	}{
		{"a procedure declared SQL SECURITY INVOKER is created and checked", "  SQL SECURITY INVOKER\n", false},
		{"a procedure without SQL SECURITY is refused before it runs", "", true},
		{"a procedure declared SQL SECURITY DEFINER is refused before it runs", "  SQL SECURITY DEFINER\n", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db, _ := mysqltest.Empty(t)
			ctx := context.Background()
			files := fstest.MapFS{
				"migrations/0001_init.sql": {Data: []byte("CREATE TABLE a (\n  id INT NOT NULL,\n  PRIMARY KEY (id)\n);\n")},
				"migrations/0002_proc.sql": {Data: []byte("-- a procedure\nCREATE PROCEDURE p" + fmt.Sprintf(body, tc.clause) + "CREATE INDEX a_id ON a (id);\n")},
			}
			migs, err := mysql.MigrationsIn(files)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(migs[1].Statements); n != 2 {
				t.Fatalf("the procedure's file split into %d statements, want 2 (the procedure, the index): %q", n, migs[1].Statements)
			}
			applied, err := db.MigrateFS(ctx, files)
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'a'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.refuse && err == nil:
				t.Fatalf("accepted (applied %v)", applied)
			case tc.refuse && !strings.Contains(err.Error(), "0002_proc.sql statement 1: procedure p: declare SQL SECURITY INVOKER"):
				t.Fatalf("the error does not name the statement and the clause: %v", err)
			case tc.refuse && n != 0:
				t.Fatal("the first migration ran although the set was refused")
			case !tc.refuse && err != nil:
				t.Fatal(err)
			case !tc.refuse && !reflect.DeepEqual(applied, []int{1, 2}):
				t.Fatalf("applied %v, want [1 2]", applied)
			}
			if tc.refuse {
				return
			}
			if _, err := db.ExecContext(ctx, "CALL p(-1, 'x')"); !mysql.IsSignal(err, "negative") {
				t.Fatalf("the procedure's SIGNAL: got %v", err)
			}
			if _, err := db.ExecContext(ctx, "DELETE FROM schema_migrations WHERE version = 2"); err != nil {
				t.Fatal(err)
			}
			if again, err := db.MigrateFS(ctx, files); err != nil || !reflect.DeepEqual(again, []int{2}) {
				t.Fatalf("running the file again over its own procedure: applied %v, err %v", again, err)
			}
		})
	}
}
