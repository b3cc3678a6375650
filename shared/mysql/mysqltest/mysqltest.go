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
	cols, vals, err := StringRows(rows)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	var out []PlanRow
	for _, row := range vals {
		var p PlanRow
		for i, c := range cols {
			switch strings.ToLower(c) {
			case "table":
				p.Table = row[i].String
			case "type":
				p.Type = row[i].String
			case "key":
				p.Key = row[i].String
			case "extra":
				p.Extra = row[i].String
			}
		}
		out = append(out, p)
	}
	return out
}

// StringRows reads every row of rows, whatever its columns, as strings
// (NULL as an invalid NullString) together with the column names, and
// closes rows: enough for EXPLAIN output, whose columns differ between
// servers.
func StringRows(rows *sql.Rows) (cols []string, out [][]sql.NullString, err error) {
	defer rows.Close()
	if cols, err = rows.Columns(); err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, nil, err
		}
		out = append(out, vals)
	}
	return cols, out, rows.Err()
}

// Strings runs query with args on db and returns its rows in order, the
// columns of each joined by sep (NULL as "NULL"): a table's content or
// output in a form tests compare and print.
func Strings(t testing.TB, db *mysql.DB, sep, query string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	_, vals, err := StringRows(rows)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	out := make([]string, 0, len(vals))
	for _, row := range vals {
		out = append(out, JoinRow(row, sep))
	}
	return out
}

// JoinRow joins the values of a row of StringRows with sep, NULL as "NULL".
func JoinRow(row []sql.NullString, sep string) string {
	vals := make([]string, len(row))
	for i, v := range row {
		vals[i] = v.String
		if !v.Valid {
			vals[i] = "NULL"
		}
	}
	return strings.Join(vals, sep)
}

// Count runs query, which selects one number (a COUNT(*), a SUM), with args
// on db and returns that number; it fails the test, naming the query, when
// the query fails.
func Count(t testing.TB, db *mysql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
