// Package mysqltest gives each test a fresh, migrated database on the real
// server named by MYSQL_DSN (default: the private MariaDB of infra/mariadb.sh).
package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// DefaultDSN reaches the private MariaDB started by infra/mariadb.sh.
const DefaultDSN = "mesh:mesh@tcp(127.0.0.1:23306)/mesh?parseTime=true"

// ServerDSN is the DSN of the server tests run against: MYSQL_DSN, else
// infra/mariadb.sh's server on MESH_MARIADB_PORT (the port the script
// starts it on; `make test` with another port must dial that one too), else
// DefaultDSN.
func ServerDSN() string {
	if d := os.Getenv("MYSQL_DSN"); d != "" {
		return d
	}
	if p := os.Getenv("MESH_MARIADB_PORT"); p != "" {
		return strings.Replace(DefaultDSN, "127.0.0.1:23306", "127.0.0.1:"+p, 1)
	}
	return DefaultDSN
}

// New creates a database mesh_test_<random>, applies the migrations and drops
// it when the test ends. It returns the pool and the database's DSN (for
// tests that start other processes against it).
func New(t testing.TB) (*mysql.DB, string) {
	t.Helper()
	db, dsn := Empty(t)
	if _, err := db.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db, dsn
}

// Empty is New without the migrations: for tests of the migration path itself.
func Empty(t testing.TB) (*mysql.DB, string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := gomysql.ParseDSN(ServerDSN())
	if err != nil {
		t.Fatalf("MYSQL_DSN: %v", err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err == nil {
		err = admin.PingContext(ctx)
	}
	if err != nil {
		testenv.Missing(t, "MySQL/MariaDB at "+cfg.Addr, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "mesh_test_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := mysql.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(func() {
		db.Close()
		_, _ = admin.ExecContext(context.Background(), "DROP DATABASE "+name)
		admin.Close()
	})
	return db, dsn
}

// PlanRow is the part of one EXPLAIN row that index tests check.
type PlanRow struct{ Table, Type, Key, Extra string }

// Explain runs EXPLAIN query with args on db and returns its plan rows, so a
// test can check a statement uses its index (no Type "ALL" or "index").
// Columns are matched by name, case-insensitively: MySQL and MariaDB name
// and order them differently.
func Explain(t testing.TB, db interface {
	Query(string, ...any) (*sql.Rows, error)
}, query string, args ...any) []PlanRow {
	t.Helper()
	rows, err := db.Query("EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []PlanRow
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		var p PlanRow
		for i, c := range cols {
			switch strings.ToLower(c) {
			case "table":
				p.Table = vals[i].String
			case "type":
				p.Type = vals[i].String
			case "key":
				p.Key = vals[i].String
			case "extra":
				p.Extra = vals[i].String
			}
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	return out
}
