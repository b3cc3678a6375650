package mysql_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// dropAppUserSQL removes a test's application user (grants on a dropped
// database outlive it).
const dropAppUserSQL = "DROP USER IF EXISTS ?@'%'"

// openAs connects to dsn's server and schema as user with password.
func openAs(t *testing.T, dsn, user, password string) (*mysql.DB, error) {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, password
	db, err := mysql.Open(context.Background(), cfg.FormatDSN())
	if err == nil {
		t.Cleanup(func() { db.Close() })
	}
	return db, err
}

func mysqlErrNumber(err error) uint16 {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func TestTheMigrationGivesTheApplicationUserDMLOnItsSchemaOnly(t *testing.T) {
	ctx := context.Background()
	master, dsn := mysqltest.New(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	user := "app_" + hex.EncodeToString(b)
	t.Cleanup(func() { _, _ = master.ExecContext(context.Background(), dropAppUserSQL, user) })

	// A neighbour whose name the schema's name matches if the _ of GRANT
	// were left a wildcard: mesh_test_x -> mesh_testXx.
	cfg, _ := gomysql.ParseDSN(dsn)
	schema := cfg.DBName
	neighbour := strings.Replace(schema, "_test_", "_testX", 1)
	if _, err := master.ExecContext(ctx, "CREATE DATABASE "+neighbour); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = master.ExecContext(context.Background(), "DROP DATABASE "+neighbour) })
	for _, s := range []string{"CREATE TABLE probe (id INT PRIMARY KEY, v INT NOT NULL)", "CREATE TABLE " + neighbour + ".probe (id INT PRIMARY KEY)"} {
		if _, err := master.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	if err := master.EnsureAppUser(ctx, user, "first-password"); err != nil {
		t.Fatal(err)
	}
	app, err := openAs(t, dsn, user, "first-password")
	if err != nil {
		t.Fatalf("the application user cannot connect: %v", err)
	}

	t.Run("the application user reads and writes the schema's tables", func(t *testing.T) {
		for _, s := range []string{
			"INSERT INTO probe (id, v) VALUES (1, 1)",
			"UPDATE probe SET v = 2 WHERE id = 1",
			"SELECT v FROM probe WHERE id = 1 FOR UPDATE",
			"DELETE FROM probe WHERE id = 1",
			"SELECT COUNT(*) FROM agents",
		} {
			if _, err := app.ExecContext(ctx, s); err != nil {
				t.Errorf("%s: %v", s, err)
			}
		}
	})

	t.Run("the application user runs the send procedure with its own rights", func(t *testing.T) {
		// Unknown agents: the procedure gets as far as its rate UPDATE, which
		// the application user may run, and refuses (1644, its SIGNAL); a
		// missing EXECUTE grant would be 1370.
		args := []any{"nobody-a", "nobody-b", "nobody-a", "nobody-b", false, "", int64(0), int64(1), int64(1),
			"t", "submitted", "m", "[]", "2026-01-01 00:00:00", "e", "message", "{}", nil, nil, nil, nil}
		_, err := app.ExecContext(ctx, "CALL send_new_task_v2("+mysql.Placeholders(len(args))+")", args...)
		if mysqlErrNumber(err) != 1644 {
			t.Fatalf("got %v, want error 1644 (the procedure's refusal)", err)
		}
	})

	t.Run("the application user cannot change the schema", func(t *testing.T) {
		for _, s := range []string{
			"CREATE TABLE other (id INT PRIMARY KEY)",
			"DROP TABLE probe",
			"ALTER TABLE probe ADD COLUMN w INT",
			"CREATE INDEX probe_v ON probe (v)",
			"TRUNCATE TABLE probe",
		} {
			// 1142: command denied to user for table.
			if _, err := app.ExecContext(ctx, s); mysqlErrNumber(err) != 1142 {
				t.Errorf("%s: got %v, want error 1142 (command denied)", s, err)
			}
		}
		// 1370: alter routine command denied.
		if _, err := app.ExecContext(ctx, "DROP PROCEDURE send_new_task_v1"); mysqlErrNumber(err) != 1370 {
			t.Errorf("DROP PROCEDURE: got %v, want error 1370 (command denied)", err)
		}
	})

	t.Run("the application user cannot read another schema, not even one its name's _ would match", func(t *testing.T) {
		if _, err := app.ExecContext(ctx, "SELECT COUNT(*) FROM "+neighbour+".probe"); mysqlErrNumber(err) != 1142 {
			t.Fatalf("got %v, want error 1142 (command denied)", err)
		}
	})

	t.Run("the application user cannot grant what it has", func(t *testing.T) {
		if _, err := app.ExecContext(ctx, "GRANT SELECT ON probe TO '"+user+"'@'%'"); err == nil {
			t.Fatal("the application user granted a privilege")
		}
	})

	t.Run("a second run sets the password the secret now holds", func(t *testing.T) {
		if err := master.EnsureAppUser(ctx, user, "second-password"); err != nil {
			t.Fatal(err)
		}
		if _, err := openAs(t, dsn, user, "first-password"); mysqlErrNumber(err) != 1045 {
			t.Errorf("the old password: got %v, want error 1045 (access denied)", err)
		}
		if _, err := openAs(t, dsn, user, "second-password"); err != nil {
			t.Errorf("the new password: %v", err)
		}
	})

	t.Run("a name that would need quoting or an empty password is refused", func(t *testing.T) {
		for _, tc := range []struct{ user, password string }{
			{"app'x", "p"}, {"app@x", "p"}, {"", "p"}, {strings.Repeat("a", 33), "p"}, {user, ""},
		} {
			if err := master.EnsureAppUser(ctx, tc.user, tc.password); err == nil {
				t.Errorf("EnsureAppUser(%q, %q) succeeded", tc.user, tc.password)
			}
		}
	})
}
