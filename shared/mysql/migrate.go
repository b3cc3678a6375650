package mysql

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one versioned schema file.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	return readMigrations(migrationFS, entries)
}

// MigrationsHash is the SHA-256 of the embedded migration files (names and
// contents, in name order), as "sha256:<hex>". template.yaml passes it to the
// SchemaMigration custom resource, so that a deploy that ships a new or
// changed migration changes the resource's properties and CloudFormation runs
// the migrations (a test keeps the two equal).
func MigrationsHash() (string, error) { return HashMigrations(migrationFS) }

// HashMigrations is MigrationsHash over any tree holding a migrations/
// directory (tests add a file to see the hash move).
func HashMigrations(fsys fs.FS) (string, error) {
	entries, err := fs.ReadDir(fsys, "migrations")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, e := range entries { // ReadDir sorts by name
		text, err := fs.ReadFile(fsys, "migrations/"+e.Name())
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(text))
		h.Write(text)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func readMigrations(migrationFS fs.FS, entries []fs.DirEntry) ([]Migration, error) {
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNNN_what.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		text, err := fs.ReadFile(migrationFS, "migrations/"+name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, Statements: SplitStatements(string(text))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// SplitStatements splits a migration file into statements: a statement ends
// with ';' at the end of a line. Full-line "--" comments are dropped.
func SplitStatements(text string) []string {
	var stmts []string
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if strings.HasSuffix(trimmed, ";") {
			s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			stmts = append(stmts, s)
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		stmts = append(stmts, s)
	}
	return stmts
}

// Migrate applies every migration not yet recorded in schema_migrations.
// Concurrent callers serialize on a named lock; re-running is a no-op.
// It returns the versions it applied.
func (db *DB) Migrate(ctx context.Context) ([]int, error) {
	migs, err := Migrations()
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var got int
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK('agentmesh_migrate', 60)").Scan(&got); err != nil || got != 1 {
		return nil, fmt.Errorf("migrate: could not take the migration lock (got %d): %v", got, err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK('agentmesh_migrate')")

	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
  version INT NOT NULL,
  name VARCHAR(200) NOT NULL,
  applied_at DATETIME(6) NOT NULL,
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci`); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	applied := map[int]bool{}
	rows, err := conn.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		applied[v] = true
	}
	rows.Close()
	var done []int
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		// DDL commits implicitly in MySQL, so a migration is not atomic: a run
		// that fails half-way (or whose bookkeeping row is lost) runs the
		// whole file again. Every statement must therefore be re-runnable:
		// data statements by construction (INSERT IGNORE, guarded UPDATEs),
		// DDL because "already exists" / "already gone" is what a second run
		// of a CREATE or DROP finds, and counts as done.
		for i, s := range m.Statements {
			if _, err := conn.ExecContext(ctx, s); err != nil && !alreadyApplied(err) {
				return done, fmt.Errorf("migrate %s statement %d: %w", m.Name, i+1, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
			m.Version, m.Name, time.Now().UTC()); err != nil {
			return done, err
		}
		done = append(done, m.Version)
	}
	return done, nil
}

// alreadyApplied reports whether a DDL error means the statement's effect is
// already there: the table, column or index exists (1050, 1060, 1061), or the
// thing it drops is gone (1091). Same numbers on MySQL 8.0 and MariaDB.
func alreadyApplied(err error) bool {
	switch errNumber(err) {
	case 1050, 1060, 1061, 1091:
		return true
	}
	return false
}
