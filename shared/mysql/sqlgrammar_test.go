package mysql_test

// The SQL grammar test. No MySQL 8 server can run here, so every statement of
// the project (the embedded migrations and every SQL string literal in the
// repository's Go files, tests included) is parsed with vitess' MySQL 8.0
// grammar, and then checked for the MySQL 8 features MariaDB 10.11 rejects.
// Together with the real MariaDB that runs every statement in the tests, this
// keeps the SQL inside the intersection of the two dialects (ARCHITECTURE.md §6).

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"vitess.io/vitess/go/vt/sqlparser"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// mysqlVersion is the Aurora MySQL 3 (MySQL 8.0) grammar the SQL must parse under.
const mysqlVersion = "8.0.40"

// notParsedByVitess lists statements that are valid MySQL 8.0 and MariaDB
// 10.11 but that vitess' grammar does not cover, keyed by their exact text.
// Each entry says why it is valid. Keep it tiny: vitess has no account
// management grammar, and the migration's application user needs three
// statements of it (mysql.EnsureAppUser, with the GRANT built at run time);
// TestTheMigrationGivesTheApplicationUserDMLOnItsSchemaOnly runs them on
// MariaDB. Everything else (GET_LOCK, SHOW GLOBAL STATUS, SKIP LOCKED, ...)
// parses.
var notParsedByVitess = map[string]string{
	"CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY ?": "MySQL 8.0 CREATE USER (IF NOT EXISTS since 5.7) and MariaDB 10.11 alike; the ? are client-side interpolated string literals",
	"ALTER USER ?@'%' IDENTIFIED BY ?":                "MySQL 8.0 ALTER USER and MariaDB 10.11 (since 10.2) alike",
	"DROP USER IF EXISTS ?@'%'":                       "MySQL 8.0 DROP USER (IF EXISTS since 5.7) and MariaDB 10.11 alike (a test's cleanup)",
}

// invokerRE is a procedure's SQL SECURITY INVOKER characteristic, the one
// clause of the migrations that vitess v0.24's grammar lacks (it parses a
// CREATE PROCEDURE without characteristics, body and all). It is the same
// clause in MySQL 8.0 and MariaDB 10.11, and the migration runner requires
// it, so the check drops it and parses the rest.
var invokerRE = regexp.MustCompile(`(?i)\)\s*SQL\s+SECURITY\s+INVOKER\s+BEGIN\b`)

// dynamicPart stands for a piece of a concatenated SQL string that is only
// known at run time, such as a placeholder list built for an IN (...).
const dynamicPart = "\x00"

// substitutes are tried for each dynamic part of a statement: the shapes of
// the placeholder lists the code builds at run time ("IN (" + marks + ")",
// "VALUES " + rows, "CASE x" + whens + " END") and an identifier (a database
// name in test setup). A statement passes if one combination parses. The
// spaces stand for the ones the run-time text may begin or end with.
var substitutes = []string{" ? ", " (?) ", " WHEN ? THEN ? ", " dynamic_identifier "}

// sqlStatement is one statement found in the repository.
type sqlStatement struct {
	Pos  string // file:line, relative to the module root
	File string
	Text string // dynamic parts are dynamicPart
}

func (s sqlStatement) with(sub string) string { return strings.ReplaceAll(s.Text, dynamicPart, sub) }

func newParser(t testing.TB) *sqlparser.Parser {
	t.Helper()
	p, err := sqlparser.New(sqlparser.Options{MySQLServerVersion: mysqlVersion})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkSQL parses sql with the MySQL 8.0 grammar (strict DDL: a partially
// understood CREATE TABLE is an error) and rejects the MySQL 8 syntax that
// MariaDB 10.11 does not accept.
func checkSQL(p *sqlparser.Parser, sql string) error {
	sql = invokerRE.ReplaceAllString(sql, ")\nBEGIN")
	stmt, err := p.ParseStrictDDL(sql)
	if err != nil {
		return fmt.Errorf("not MySQL 8.0 grammar: %w", err)
	}
	if strings.Contains(strings.ToLower(sql), "_0900_") {
		return errors.New("uses a MySQL 8 *_0900_* collation, which MariaDB 10.11 does not have; use utf8mb4_bin or utf8mb4_unicode_ci")
	}
	// The JSON operators vanish into JSON_EXTRACT nodes in the AST, so look
	// at the tokens; inside a string literal they are not tokens.
	tok := p.NewStringTokenizer(sql)
	for i := 0; i <= len(sql); i++ {
		typ, _ := tok.Scan()
		if typ == sqlparser.JSON_EXTRACT_OP || typ == sqlparser.JSON_UNQUOTE_EXTRACT_OP {
			return errors.New("uses the -> / ->> JSON operator, which MariaDB rejects; use JSON_UNQUOTE(JSON_EXTRACT(col, path))")
		}
		if typ == 0 || typ == sqlparser.LEX_ERROR || tok.Pos >= len(sql) {
			break
		}
	}
	return sqlparser.Walk(func(node sqlparser.SQLNode) (bool, error) {
		switch n := node.(type) {
		case *sqlparser.Select:
			if err := checkLock(n.Lock); err != nil {
				return false, err
			}
		case *sqlparser.Union:
			if err := checkLock(n.Lock); err != nil {
				return false, err
			}
		case *sqlparser.Insert:
			if n.RowAlias != nil {
				return false, errors.New("uses an INSERT ... AS alias row alias, which MariaDB rejects; use VALUES(col) in ON DUPLICATE KEY UPDATE")
			}
		}
		return true, nil
	}, stmt)
}

func checkLock(l sqlparser.Lock) error {
	switch l {
	case sqlparser.ForShareLock, sqlparser.ForShareLockNoWait, sqlparser.ForShareLockSkipLocked:
		return errors.New("uses FOR SHARE, which MariaDB 10.11 rejects; use LOCK IN SHARE MODE")
	}
	return nil
}

// checkStatement checks s, trying the substitutes for its dynamic parts.
func checkStatement(p *sqlparser.Parser, s sqlStatement) error {
	if _, ok := notParsedByVitess[s.Text]; ok {
		return nil
	}
	parts := strings.Split(s.Text, dynamicPart)
	if len(parts) == 1 {
		return checkSQL(p, s.Text)
	}
	var first error
	var try func(i int, text string) bool
	try = func(i int, text string) bool {
		if i == len(parts)-1 {
			err := checkSQL(p, text+parts[i])
			if err != nil && first == nil {
				first = err
			}
			return err == nil
		}
		for _, sub := range substitutes {
			if try(i+1, text+parts[i]+sub) {
				return true
			}
		}
		return false
	}
	if len(parts) > 5 { // more than 4 dynamic parts: too many combinations; placeholders only
		return checkSQL(p, s.with("?"))
	}
	if try(0, "") {
		return nil
	}
	return first
}

func TestTheGrammarCheckTellsMySQL8FromMariaDBOnlySQL(t *testing.T) {
	p := newParser(t)
	tests := []struct {
		name   string
		sql    string
		reject string // a word of the expected error; "" means accepted
	}{
		// The rejected statements are exempt from the repository-wide scan.
		{"RETURNING on an INSERT is MariaDB-only", "INSERT INTO agents (agent_id) VALUES (?) RETURNING agent_id", "grammar"},                                                                             // sqlgrammar:ignore
		{"RETURNING on a DELETE is MariaDB-only", "DELETE FROM agents WHERE agent_id = ? RETURNING agent_id", "grammar"},                                                                                 // sqlgrammar:ignore
		{"an index IF NOT EXISTS is MariaDB-only", "CREATE INDEX IF NOT EXISTS agents_name ON agents (name)", "grammar"},                                                                                 // sqlgrammar:ignore
		{"a partially understood table definition is an error", "CREATE TABLE t (a INT) WITH SYSTEM VERSIONING", "grammar"},                                                                              // sqlgrammar:ignore
		{"FOR SHARE is MySQL-only", "SELECT last_seq FROM inbox_counters WHERE recipient = ? FOR SHARE", "FOR SHARE"},                                                                                    // sqlgrammar:ignore
		{"the ->> operator is MySQL-only", "SELECT stats->>'$.queue' FROM agents", "->>"},                                                                                                                // sqlgrammar:ignore
		{"the -> operator is MySQL-only", "SELECT stats->'$.queue' FROM agents", "->>"},                                                                                                                  // sqlgrammar:ignore
		{"a 0900 collation is MySQL-only", "CREATE TABLE t (a VARCHAR(8) COLLATE utf8mb4_0900_ai_ci)", "0900"},                                                                                           // sqlgrammar:ignore
		{"an INSERT row alias is MySQL-only", "INSERT INTO rate_limits (agent_id, tat_us) VALUES (?, ?) AS new ON DUPLICATE KEY UPDATE tat_us = new.tat_us", "row alias"},                                // sqlgrammar:ignore
		{"a procedure's body is checked as well", "CREATE PROCEDURE p(IN a INT)\n  SQL SECURITY INVOKER\nBEGIN\n  SELECT last_seq FROM inbox_counters WHERE recipient = a FOR SHARE;\nEND", "FOR SHARE"}, // sqlgrammar:ignore
		{"a procedure running with its invoker's rights is accepted", "CREATE PROCEDURE p(IN a INT)\n  SQL SECURITY INVOKER\nBEGIN\n  DECLARE v BIGINT;\n  SELECT last_seq INTO v FROM inbox_counters WHERE recipient = a LOCK IN SHARE MODE;\n  IF v IS NULL THEN\n    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'none';\n  END IF;\nEND", ""},
		{"FOR UPDATE SKIP LOCKED is accepted", "SELECT recipient FROM dispatch_state WHERE next_attempt_at <= ? ORDER BY next_attempt_at LIMIT 10 FOR UPDATE SKIP LOCKED", ""},
		{"LOCK IN SHARE MODE is accepted", "SELECT last_seq FROM inbox_counters WHERE recipient = ? LOCK IN SHARE MODE", ""},
		{"ON DUPLICATE KEY UPDATE with VALUES() is accepted", "INSERT INTO rate_limits (agent_id, tat_us) VALUES (?, ?) ON DUPLICATE KEY UPDATE tat_us = VALUES(tat_us)", ""},
		{"JSON_UNQUOTE(JSON_EXTRACT()) is accepted", "SELECT JSON_UNQUOTE(JSON_EXTRACT(stats, '$.queue')) FROM agents", ""},
		{"a string that contains ->> is accepted", "SELECT agent_id FROM agents WHERE name = 'a->>b'", ""},
		{"GET_LOCK is accepted", "SELECT GET_LOCK('agentmesh_migrate', 60)", ""},
		{"a global status query is accepted", "SHOW GLOBAL STATUS LIKE 'Threads_connected'", ""},
		{"an explicit utf8mb4_bin column is accepted", "CREATE TABLE t (a VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, PRIMARY KEY (a)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkSQL(p, tc.sql)
			switch {
			case tc.reject == "" && err != nil:
				t.Fatalf("rejected valid MySQL 8 / MariaDB SQL: %v", err)
			case tc.reject != "" && err == nil:
				t.Fatalf("accepted SQL that one of the two servers rejects")
			case tc.reject != "" && !strings.Contains(err.Error(), tc.reject):
				t.Fatalf("error %q does not mention %q", err, tc.reject)
			}
		})
	}
}

func TestTheCollectorFindsEveryShapeOfSQLInGoSource(t *testing.T) {
	stmts, err := collectGoSQL("testdata/sqlgrammar")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range stmts {
		got = append(got, s.with("?"))
	}
	want := []string{
		"SELECT agent_id, name FROM agents WHERE agent_id = ?",
		"UPDATE agents SET name = ? WHERE agent_id = ?",
		"SELECT agent_id\nFROM agents\nWHERE status = ?\nORDER BY agent_id",
		"SELECT agent_id FROM agents WHERE agent_id IN (?) FOR UPDATE",
		"DROP DATABASE ?", // sqlgrammar:ignore: the collector's rendering of "DROP DATABASE " + name
		"select count(*) from agents",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("collected\n%q\nwant\n%q", got, want)
	}
	p := newParser(t)
	for _, s := range stmts {
		if err := checkStatement(p, s); err != nil {
			t.Errorf("%s: %v", s.Pos, err)
		}
	}
}

func TestEverySQLStatementOfTheProjectParsesAsMySQL80(t *testing.T) {
	root := moduleRoot(t)
	p := newParser(t)
	perFile := map[string]int{}
	check := func(s sqlStatement) {
		perFile[s.File]++
		if err := checkStatement(p, s); err != nil {
			t.Errorf("%s: %v\n\t%s", s.Pos, err, strings.ReplaceAll(s.with("?"), "\n", "\n\t"))
		}
	}

	migs, err := mysql.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migs {
		for i, s := range m.Statements {
			check(sqlStatement{Pos: fmt.Sprintf("shared/mysql/migrations/%s statement %d", m.Name, i+1),
				File: "shared/mysql/migrations/" + m.Name, Text: s})
		}
	}
	stmts, err := collectGoSQL(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		check(s)
	}

	// The collector must see the statements it is known to contain, or a
	// broken walk would pass with nothing checked.
	if perFile["shared/mysql/migrate.go"] < 3 {
		t.Errorf("found %d statements in shared/mysql/migrate.go, want at least 3 (GET_LOCK, CREATE TABLE, INSERT)", perFile["shared/mysql/migrate.go"])
	}
	if len(migs) == 0 || perFile["shared/mysql/migrations/"+migs[0].Name] == 0 {
		t.Errorf("no migration statements were checked")
	}
	files := make([]string, 0, len(perFile))
	total := 0
	for f, n := range perFile {
		files = append(files, f)
		total += n
	}
	sort.Strings(files)
	for _, f := range files {
		t.Logf("%4d  %s", perFile[f], f)
	}
	t.Logf("%d statements in %d files parsed with the MySQL %s grammar", total, len(files), mysqlVersion)
}

// moduleRoot is the directory of the repository's go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// sqlKeywords start a statement. They are matched as written in upper case,
// the project's convention for SQL, so sentences such as a subtest named
// "Update the task" are not taken for SQL; a query in another case is still
// found when it is passed to a database/sql method.
var sqlKeywords = map[string]bool{
	"SELECT": true, "INSERT": true, "UPDATE": true, "DELETE": true, "REPLACE": true,
	"CREATE": true, "ALTER": true, "DROP": true, "WITH": true, "SHOW": true,
	"EXPLAIN": true, "SET": true, "START": true, "COMMIT": true, "ROLLBACK": true,
	"TRUNCATE": true,
}

// looksLikeSQL reports whether a Go string is an SQL statement: an upper-case
// keyword followed by more text that is not a URL path ("DELETE /v1/...").
func looksLikeSQL(s string) bool { return startsWithKeyword(s, false) }

func startsWithKeyword(s string, anyCase bool) bool {
	s = strings.TrimSpace(s)
	if anyCase {
		s = strings.ToUpper(s)
	}
	if s == "COMMIT" || s == "ROLLBACK" {
		return true
	}
	i := strings.IndexAny(s, " \t\r\n")
	if i < 0 || !sqlKeywords[s[:i]] {
		return false
	}
	rest := strings.TrimSpace(s[i:])
	return rest != "" && !strings.HasPrefix(rest, "/")
}

// ignoreMarker in a comment on a literal's line, or on the line above it,
// exempts the literal: for tests that hold deliberately invalid SQL.
const ignoreMarker = "sqlgrammar:ignore"

// messageFuncs take messages, not SQL: a string passed to them is text
// ("SHOW ENGINE INNODB STATUS: %v"). fmt.Sprintf is not among them: SQL
// built with it is checked (and fails on its verbs).
var messageFuncs = map[string]bool{
	"Fatal": true, "Fatalf": true, "Error": true, "Errorf": true, "Log": true, "Logf": true,
	"Skip": true, "Skipf": true, "Print": true, "Printf": true, "Println": true, "Fprintf": true,
	"Fprintln": true, "New": true, "Info": true, "Warn": true, "Debug": true,
}

// queryMethods are the database/sql methods and the index of their query argument.
var queryMethods = map[string]int{
	"Exec": 0, "Query": 0, "QueryRow": 0, "Prepare": 0,
	"ExecContext": 1, "QueryContext": 1, "QueryRowContext": 1, "PrepareContext": 1,
}

// skipDir reports whether a directory holds no project Go code: VCS and local
// state, build output, and testdata (fixtures, like this test's own).
func skipDir(name string) bool {
	switch name {
	case "testdata", "vendor", "node_modules", "dist":
		return true
	}
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// collectGoSQL returns the SQL statements written as Go strings in the .go
// files under root (test files included), in file and line order.
func collectGoSQL(root string) ([]sqlStatement, error) {
	dirs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []sqlStatement
	for _, paths := range dirs {
		fset := token.NewFileSet()
		files := make([]*ast.File, 0, len(paths))
		for _, path := range paths {
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution|parser.ParseComments)
			if err != nil {
				return nil, err
			}
			files = append(files, f)
		}
		c := &collector{fset: fset, root: root, consts: stringConsts(files),
			forced: map[ast.Expr]bool{}, message: map[ast.Expr]bool{}, ignored: map[string]map[int]bool{}}
		for _, f := range files {
			c.collect(f)
		}
		out = append(out, c.out...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return lineOf(out[i].Pos) < lineOf(out[j].Pos)
	})
	return out, nil
}

func lineOf(pos string) int {
	n, _ := strconv.Atoi(pos[strings.LastIndexByte(pos, ':')+1:])
	return n
}

// stringConsts maps the names of the string constants declared in one
// directory's files (package or function level) to their values, so that
// "SELECT " + columns + " FROM t" folds to its full text. Constants of a
// package's test files share the map: a name clash only blurs a fixture.
func stringConsts(files []*ast.File) map[string]string {
	consts := map[string]string{}
	var specs []*ast.ValueSpec
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					specs = append(specs, s.(*ast.ValueSpec))
				}
			}
			return true
		})
	}
	// Constants may refer to constants declared later: fold until stable.
	for changed := true; changed; {
		changed = false
		for _, s := range specs {
			for i, name := range s.Names {
				if i >= len(s.Values) {
					continue
				}
				if _, done := consts[name.Name]; done {
					continue
				}
				if v, ok := foldConst(s.Values[i], consts); ok {
					consts[name.Name] = v
					changed = true
				}
			}
		}
	}
	return consts
}

func foldConst(e ast.Expr, consts map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			v, err := strconv.Unquote(e.Value)
			return v, err == nil
		}
	case *ast.Ident:
		v, ok := consts[e.Name]
		return v, ok
	case *ast.ParenExpr:
		return foldConst(e.X, consts)
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			l, ok1 := foldConst(e.X, consts)
			r, ok2 := foldConst(e.Y, consts)
			return l + r, ok1 && ok2
		}
	}
	return "", false
}

type collector struct {
	fset   *token.FileSet
	root   string
	consts map[string]string
	// forced marks expressions passed as the query of a database/sql
	// method: SQL whatever their case.
	forced map[ast.Expr]bool
	// message marks the arguments of messageFuncs.
	message map[ast.Expr]bool
	// ignored holds, per file, the lines an ignoreMarker exempts.
	ignored map[string]map[int]bool
	out     []sqlStatement
}

func (c *collector) collect(f *ast.File) {
	name := c.fset.Position(f.Pos()).Filename
	c.ignored[name] = map[int]bool{}
	for _, g := range f.Comments {
		for _, cm := range g.List {
			if strings.Contains(cm.Text, ignoreMarker) {
				line := c.fset.Position(cm.Pos()).Line
				c.ignored[name][line] = true
				c.ignored[name][line+1] = true
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		var fn string
		switch f := call.Fun.(type) {
		case *ast.SelectorExpr:
			fn = f.Sel.Name
		case *ast.Ident:
			fn = f.Name
		}
		if i, ok := queryMethods[fn]; ok && i < len(call.Args) {
			c.forced[call.Args[i]] = true
		}
		if messageFuncs[fn] {
			for _, a := range call.Args {
				c.message[a] = true
			}
		}
		return true
	})
	ast.Inspect(f, c.visit)
}

// visit records the string expressions that are SQL. A concatenation is
// taken whole: its literal and constant parts are folded and every other
// part becomes a dynamicPart, whose own subexpressions are visited in turn.
func (c *collector) visit(n ast.Node) bool {
	switch e := n.(type) {
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return true
		}
		var text strings.Builder
		literal := false
		var dynamic []ast.Expr
		var flatten func(ast.Expr)
		flatten = func(x ast.Expr) {
			switch x := x.(type) {
			case *ast.ParenExpr:
				flatten(x.X)
				return
			case *ast.BinaryExpr:
				if x.Op == token.ADD {
					flatten(x.X)
					flatten(x.Y)
					return
				}
			case *ast.BasicLit:
				if x.Kind == token.STRING {
					v, _ := strconv.Unquote(x.Value)
					text.WriteString(v)
					literal = true
					return
				}
			case *ast.Ident:
				if v, ok := c.consts[x.Name]; ok {
					text.WriteString(v)
					return
				}
			}
			text.WriteString(dynamicPart)
			dynamic = append(dynamic, x)
		}
		flatten(e)
		if !literal {
			return true // arithmetic, or strings built only from variables
		}
		c.add(e, text.String())
		for _, d := range dynamic {
			ast.Inspect(d, c.visit)
		}
		return false
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			v, err := strconv.Unquote(e.Value)
			if err == nil {
				c.add(e, v)
			}
		}
	case *ast.Ident:
		// A constant passed as a query: its declaration was already taken if
		// it looks like SQL, so only the other-case ones are added here.
		if v, ok := c.consts[e.Name]; ok && c.forced[e] && !looksLikeSQL(v) && startsWithKeyword(v, true) {
			c.add(e, v)
		}
	}
	return true
}

func (c *collector) add(e ast.Expr, text string) {
	if c.message[e] || !looksLikeSQL(text) && !(c.forced[e] && startsWithKeyword(text, true)) {
		return
	}
	pos := c.fset.Position(e.Pos())
	if c.ignored[pos.Filename][pos.Line] {
		return
	}
	rel, err := filepath.Rel(c.root, pos.Filename)
	if err != nil {
		rel = pos.Filename
	}
	rel = filepath.ToSlash(rel)
	c.out = append(c.out, sqlStatement{Pos: fmt.Sprintf("%s:%d", rel, pos.Line), File: rel, Text: strings.TrimSpace(text)})
}

func TestMigrationsOnMariaDB(t *testing.T) {
	db, _ := mysqltest.New(t) // applies every migration to a fresh database
	ctx := context.Background()
	migs, err := mysql.Migrations()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("re-running the migrations applies nothing and changes nothing", func(t *testing.T) {
		before := snapshot(t, db)
		applied, err := db.Migrate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(applied) != 0 {
			t.Fatalf("second Migrate applied %v, want nothing", applied)
		}
		after := snapshot(t, db)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("schema or schema_migrations changed on re-run:\nbefore %v\nafter  %v", before, after)
		}
		if got := before["migrations"]; len(got) != len(migs) {
			t.Fatalf("schema_migrations has %d rows %v, want one per embedded migration (%d)", len(got), got, len(migs))
		}
	})

	t.Run("identifier columns compare bytes, not letters", func(t *testing.T) {
		rows, err := db.QueryContext(ctx, `SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND COLLATION_NAME IS NOT NULL
ORDER BY TABLE_NAME, COLUMN_NAME`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		// Columns that hold an agent, task, message, group or context id.
		mustBeUTF8Bin := map[string]bool{
			"agent_id": true, "message_id": true, "recipient": true, "task_id": true, "sender": true,
			"group_id": true, "context_id": true, "friend_id": true, "from_agent": true, "to_agent": true,
			"owner_id": true, "initiator": true, "created_by": true, "artifact_id": true,
		}
		seen := map[string]bool{}
		for rows.Next() {
			var table, column, collation string
			if err := rows.Scan(&table, &column, &collation); err != nil {
				t.Fatal(err)
			}
			switch {
			case strings.Contains(collation, "_0900_"):
				t.Errorf("%s.%s uses %s, which MariaDB lacks", table, column, collation)
			case mustBeUTF8Bin[column]:
				seen[column] = true
				if collation != "utf8mb4_bin" {
					t.Errorf("%s.%s has collation %s, want utf8mb4_bin", table, column, collation)
				}
			case strings.HasSuffix(column, "_id") && !strings.HasSuffix(collation, "_bin"):
				// Other ids (key_id, event_id, ...) may be ascii_bin, never case-folding.
				t.Errorf("%s.%s has collation %s, want a binary one (utf8mb4_bin or ascii_bin)", table, column, collation)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{"agent_id", "message_id", "recipient", "task_id", "sender", "group_id", "context_id", "friend_id"} {
			if !seen[c] {
				t.Errorf("no column named %s in the schema: the check above saw nothing", c)
			}
		}
	})

	insertAgent := func(id string) error {
		_, err := db.ExecContext(ctx, "INSERT INTO agents (agent_id, name, created_at) VALUES (?, ?, UTC_TIMESTAMP(6))", id, "test agent")
		return err
	}
	countAgents := func(id string) int {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM agents WHERE agent_id = ?", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("ALICE and alice are two agents", func(t *testing.T) {
		for _, id := range []string{"ALICE", "alice"} {
			if err := insertAgent(id); err != nil {
				t.Fatalf("insert %q: %v", id, err)
			}
		}
		if n := countAgents("alice"); n != 1 {
			t.Fatalf("agent_id = 'alice' matches %d rows, want 1", n)
		}
	})

	t.Run("an id with a trailing space never aliases another agent", func(t *testing.T) {
		if err := insertAgent("bob"); err != nil {
			t.Fatal(err)
		}
		err := insertAgent("bob ")
		switch {
		case err == nil:
			// A NO PAD collation: two distinct rows.
			if n := countAgents("bob"); n != 1 {
				t.Fatalf("agent_id = 'bob' matches %d rows, want 1", n)
			}
		case mysql.IsDuplicate(err):
			// utf8mb4_bin is a PAD SPACE collation on MariaDB 10.11 and on
			// MySQL 8.0 alike (only MySQL's utf8mb4_0900_bin is NO PAD, and
			// MariaDB lacks it), so 'bob ' = 'bob' in the database. Then the
			// API must never let such an id in.
			if mesh.ValidAgentID("bob ") {
				t.Fatal("the database treats 'bob ' as 'bob' and mesh.ValidAgentID accepts 'bob '")
			}
		default:
			t.Fatal(err)
		}
	})
}

// snapshot returns the schema's columns and the schema_migrations rows.
func snapshot(t *testing.T, db *mysql.DB) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for key, q := range map[string]string{
		"columns": `SELECT CONCAT_WS(' ', TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IFNULL(COLLATION_NAME, '-'), IS_NULLABLE)
FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME, ORDINAL_POSITION`,
		"indexes": `SELECT CONCAT_WS(' ', TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME)
FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX`,
		"migrations": "SELECT CONCAT_WS(' ', version, name, applied_at) FROM schema_migrations ORDER BY version",
		"routines": `SELECT CONCAT_WS(' ', ROUTINE_NAME, SECURITY_TYPE, ROUTINE_DEFINITION)
FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() ORDER BY ROUTINE_NAME`,
	} {
		rows, err := db.QueryContext(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out[key] = append(out[key], s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
