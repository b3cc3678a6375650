package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
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
func Migrations() ([]Migration, error) { return MigrationsIn(migrationFS) }

// MigrationsIn reads the migrations of any tree holding a migrations/
// directory, in version order (tests run their own files through MigrateFS).
func MigrationsIn(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, "migrations")
	if err != nil {
		return nil, err
	}
	return readMigrations(fsys, entries)
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
// with ';' at the end of a line, except a CREATE PROCEDURE, whose body's
// statements end so too: it ends with the line "END;". Full-line "--"
// comments are dropped.
func SplitStatements(text string) []string {
	var stmts []string
	var cur strings.Builder
	routine := false
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		if cur.Len() == 0 {
			routine = createProcedureRE.MatchString(trimmed)
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if routine && strings.EqualFold(trimmed, "END;") || !routine && strings.HasSuffix(trimmed, ";") {
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
func (db *DB) Migrate(ctx context.Context) ([]int, error) { return db.MigrateFS(ctx, migrationFS) }

// MigrateFS is Migrate with the migrations of fsys's migrations/ directory
// instead of the embedded ones (tests use it on a private database).
//
// A migration is recorded as applied only once every table, column and
// index its DDL creates is in the schema with the shape the DDL gives it
// (see checkSchema). A schema that has some of them and lacks or changes
// others fails with an error naming each difference, and nothing is recorded.
func (db *DB) MigrateFS(ctx context.Context, fsys fs.FS) ([]int, error) {
	migs, err := MigrationsIn(fsys)
	if err != nil {
		return nil, err
	}
	// Every migration must be checkable before any statement runs: a file
	// the checker cannot read fails here, not half-way through a deploy.
	wants := make([]schemaShape, len(migs))
	for i, m := range migs {
		if wants[i], err = expectedShape(m); err != nil {
			return nil, err
		}
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
	for i, m := range migs {
		if applied[m.Version] {
			continue
		}
		// DDL commits implicitly in MySQL, so a migration is not atomic: a run
		// that fails half-way (or whose bookkeeping row is lost) runs the
		// whole file again. Every statement must therefore be re-runnable:
		// data statements by construction (INSERT IGNORE, guarded UPDATEs),
		// DDL because "already exists" is what a second run of a CREATE
		// finds. That error alone proves nothing about the object's shape,
		// so checkSchema then compares what is there with what the file makes.
		for j, s := range m.Statements {
			if _, err := conn.ExecContext(ctx, s); err != nil && !alreadyApplied(err) {
				return done, fmt.Errorf("migrate %s statement %d: %w", m.Name, j+1, err)
			}
		}
		if err := checkSchema(ctx, conn, wants[i]); err != nil {
			return done, fmt.Errorf("migrate %s: %w", m.Name, err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
			m.Version, m.Name, time.Now().UTC()); err != nil {
			return done, err
		}
		done = append(done, m.Version)
	}
	return done, nil
}

// alreadyApplied reports whether a DDL error means the object a CREATE makes
// is already there: the table, the index name or the procedure exists (1050,
// 1061, 1304). Same
// numbers on MySQL 8.0 and MariaDB. Whether it has the right shape is
// checkSchema's question. (ALTER and DROP are not accepted in migrations:
// expectedShape refuses them, so their errors need no case here.)
func alreadyApplied(err error) bool {
	switch errNumber(err) {
	case 1050, 1061, 1304:
		return true
	}
	return false
}

// schemaShape is what one migration's DDL creates: its tables with their
// columns, and every index (a table's keys and CREATE INDEX alike).
type schemaShape struct {
	tables  []tableShape
	indexes []indexShape
	// routines are the procedures it creates, each with its parameters.
	routines []routineShape
}

// routineShape is a stored procedure: its name and its parameters' names in
// order. Its body is not compared (the servers keep it as written, and a
// procedure is never changed in place: a new one gets a new name).
type routineShape struct {
	name   string
	params []string
}

type tableShape struct {
	name    string
	columns []columnShape
}

type columnShape struct {
	name      string
	colType   string // normalized, as in normalizeType
	collation string // "" when the DDL leaves it to a charset default
	nullable  bool
}

type indexShape struct {
	table, name string // name is "PRIMARY" for a primary key
	columns     []string
	unique      bool
}

// The grammar the checker reads: the DDL the migrations use. Anything else
// is refused by expectedShape, so a new kind of statement is taught to the
// checker before it can ship unchecked.
const identRE = "`?([A-Za-z0-9_$]+)`?"

var (
	createTableRE        = regexp.MustCompile(`(?is)^CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?` + identRE + `\s*\((.*)\)\s*([^)]*)$`)
	createIndexRE        = regexp.MustCompile(`(?is)^CREATE\s+(UNIQUE\s+)?INDEX\s+` + identRE + `\s+ON\s+` + identRE + `\s*\((.*)\)\s*$`)
	sqlSecurityInvokerRE = regexp.MustCompile(`(?i)\bSQL\s+SECURITY\s+INVOKER\b`)
	createProcedureRE    = regexp.MustCompile(`(?is)^CREATE\s+PROCEDURE\s+` + identRE + `\s*\(`)
	procedureParamRE     = regexp.MustCompile(`(?i)^(?:IN|OUT|INOUT)\s+` + identRE + `\s+\S`)
	dataRE               = regexp.MustCompile(`(?is)^(INSERT|UPDATE|DELETE|REPLACE)\b`)
	keyRE                = regexp.MustCompile(`(?is)^(PRIMARY\s+KEY|UNIQUE(?:\s+(?:KEY|INDEX))?|KEY|INDEX)\b\s*(?:` + identRE + `)?\s*\((.*)\)$`)
	unsupportedRE        = regexp.MustCompile(`(?is)^(CONSTRAINT|FOREIGN|FULLTEXT|SPATIAL|CHECK)\b`)
	columnRE             = regexp.MustCompile(`(?is)^` + identRE + `\s+([A-Za-z]+(?:\s*\([^)]*\))?(?:\s+(?:UNSIGNED|ZEROFILL))*)(.*)$`)
	notNullRE            = regexp.MustCompile(`(?i)\bNOT\s+NULL\b`)
	collateRE            = regexp.MustCompile(`(?i)\bCOLLATE\s*=?\s*([A-Za-z0-9_]+)`)
	charsetRE            = regexp.MustCompile(`(?i)\b(CHARACTER\s+SET|CHARSET)\b`)
	inlinePKRE           = regexp.MustCompile(`(?i)\bPRIMARY\s+KEY\b`)
	inlineUniqRE         = regexp.MustCompile(`(?i)\bUNIQUE(\s+KEY)?\b`)
	intWidthRE           = regexp.MustCompile(`^(tinyint|smallint|mediumint|int|bigint)\(\d+\)`)
	textTypeRE           = regexp.MustCompile(`^(char|varchar|tinytext|text|mediumtext|longtext|enum|set)\b`)
	spacesRE             = regexp.MustCompile(`\s+`)
	indexColumnRE        = regexp.MustCompile(`^\s*` + identRE)
)

// expectedShape reads what m creates. Data statements create nothing to
// check; DDL other than CREATE TABLE and CREATE INDEX is refused, because
// the runner could not tell a partly applied run of it from a whole one.
func expectedShape(m Migration) (schemaShape, error) {
	var out schemaShape
	for i, s := range m.Statements {
		s = strings.TrimSpace(s)
		var err error
		switch {
		case dataRE.MatchString(s):
		case createTableRE.MatchString(s):
			err = out.addTable(createTableRE.FindStringSubmatch(s))
		case createProcedureRE.MatchString(s):
			var r routineShape
			if r, err = procedureShape(s); err == nil {
				out.routines = append(out.routines, r)
			}
		case createIndexRE.MatchString(s):
			g := createIndexRE.FindStringSubmatch(s)
			var cols []string
			if cols, err = indexColumns(g[4]); err == nil {
				out.indexes = append(out.indexes, indexShape{table: g[3], name: g[2], columns: cols, unique: g[1] != ""})
			}
		default:
			err = fmt.Errorf("the migration runner checks only CREATE TABLE, CREATE INDEX, CREATE PROCEDURE and data statements (teach expectedShape in migrate.go this one)")
		}
		if err != nil {
			return out, fmt.Errorf("migrate %s statement %d: %w", m.Name, i+1, err)
		}
	}
	return out, nil
}

// addTable adds a CREATE TABLE's columns and keys; g is createTableRE's match.
func (sh *schemaShape) addTable(g []string) error {
	table, body, options := g[1], g[2], g[3]
	tableCollation := ""
	if c := collateRE.FindStringSubmatch(options); c != nil {
		tableCollation = strings.ToLower(c[1])
	}
	t := tableShape{name: table}
	pk := map[string]bool{}
	for _, item := range splitTopLevel(body) {
		item = strings.TrimSpace(spacesRE.ReplaceAllString(item, " "))
		switch {
		case item == "":
			return fmt.Errorf("table %s: empty item in its definition", table)
		case unsupportedRE.MatchString(item):
			return fmt.Errorf("table %s: %q is not checked by the migration runner", table, item)
		case keyRE.MatchString(item) && !strings.HasPrefix(item, "`"):
			k := keyRE.FindStringSubmatch(item)
			cols, err := indexColumns(k[3])
			if err != nil {
				return fmt.Errorf("table %s: %w", table, err)
			}
			kind := strings.ToUpper(strings.Fields(k[1])[0])
			ix := indexShape{table: table, name: k[2], columns: cols, unique: kind != "KEY" && kind != "INDEX"}
			if kind == "PRIMARY" {
				ix.name = "PRIMARY"
				for _, c := range cols {
					pk[strings.ToLower(c)] = true
				}
			}
			if ix.name == "" {
				return fmt.Errorf("table %s: name the key %q, so that the runner can find it", table, item)
			}
			sh.indexes = append(sh.indexes, ix)
		case columnRE.MatchString(item):
			c := columnRE.FindStringSubmatch(item)
			col := columnShape{name: c[1], colType: normalizeType(c[2]), nullable: !notNullRE.MatchString(c[3])}
			if m := collateRE.FindStringSubmatch(c[3]); m != nil {
				col.collation = strings.ToLower(m[1])
			} else if textTypeRE.MatchString(col.colType) && !charsetRE.MatchString(c[3]) {
				col.collation = tableCollation
			}
			if inlinePKRE.MatchString(c[3]) {
				pk[strings.ToLower(col.name)] = true
				sh.indexes = append(sh.indexes, indexShape{table: table, name: "PRIMARY", columns: []string{col.name}, unique: true})
			} else if inlineUniqRE.MatchString(c[3]) {
				sh.indexes = append(sh.indexes, indexShape{table: table, name: col.name, columns: []string{col.name}, unique: true})
			}
			t.columns = append(t.columns, col)
		default:
			return fmt.Errorf("table %s: cannot read %q", table, item)
		}
	}
	for i := range t.columns { // primary key columns are NOT NULL whatever the DDL says
		if pk[strings.ToLower(t.columns[i].name)] {
			t.columns[i].nullable = false
		}
	}
	sh.tables = append(sh.tables, t)
	return nil
}

// splitTopLevel splits s at the commas outside parentheses and quotes.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	var quote rune
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"' || r == '`':
			quote = r
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// procedureShape reads a CREATE PROCEDURE's name and parameters. Only SQL
// SECURITY INVOKER procedures are accepted: one runs with the rights of the
// application user that calls it, never with the migration user's.
func procedureShape(s string) (routineShape, error) {
	name := createProcedureRE.FindStringSubmatch(s)[1]
	open := createProcedureRE.FindStringIndex(s)[1] - 1
	depth, end := 0, -1
	for i := open; i < len(s) && end < 0; i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				end = i
			}
		}
	}
	if end < 0 {
		return routineShape{}, fmt.Errorf("procedure %s: its parameter list does not end", name)
	}
	if !sqlSecurityInvokerRE.MatchString(s[end:]) {
		return routineShape{}, fmt.Errorf("procedure %s: declare SQL SECURITY INVOKER, so that it runs with the caller's rights", name)
	}
	r := routineShape{name: name}
	if list := strings.TrimSpace(s[open+1 : end]); list != "" {
		for _, p := range splitTopLevel(list) {
			m := procedureParamRE.FindStringSubmatch(strings.TrimSpace(p))
			if m == nil {
				return routineShape{}, fmt.Errorf("procedure %s: cannot read the parameter %q (write IN, OUT or INOUT, its name and its type)", name, strings.TrimSpace(p))
			}
			r.params = append(r.params, m[1])
		}
	}
	return r, nil
}

// checkRoutines compares the procedures of want with the current schema's:
// each must exist, run as its invoker and take the same parameters.
func checkRoutines(ctx context.Context, conn *sql.Conn, want []routineShape) error {
	var problems []string
	for _, r := range want {
		var security string
		err := conn.QueryRowContext(ctx, `SELECT SECURITY_TYPE FROM information_schema.ROUTINES
WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = ? AND ROUTINE_TYPE = 'PROCEDURE'`, r.name).Scan(&security)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			problems = append(problems, fmt.Sprintf("procedure %s is missing", r.name))
			continue
		case err != nil:
			return err
		case !strings.EqualFold(security, "INVOKER"):
			problems = append(problems, fmt.Sprintf("procedure %s runs as its %s, want INVOKER", r.name, security))
		}
		got, err := QueryStrings(ctx, conn, `SELECT PARAMETER_NAME FROM information_schema.PARAMETERS
WHERE SPECIFIC_SCHEMA = DATABASE() AND SPECIFIC_NAME = ? AND ROUTINE_TYPE = 'PROCEDURE' ORDER BY ORDINAL_POSITION`, r.name)
		if err != nil {
			return err
		}
		if !slices.EqualFunc(got, r.params, strings.EqualFold) {
			problems = append(problems, fmt.Sprintf("procedure %s takes (%s), want (%s)", r.name, strings.Join(got, ", "), strings.Join(r.params, ", ")))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// indexColumns reads "a, b(10) DESC" as [a b].
func indexColumns(list string) ([]string, error) {
	var cols []string
	for _, part := range splitTopLevel(list) {
		m := indexColumnRE.FindStringSubmatch(part)
		if m == nil {
			return nil, fmt.Errorf("cannot read the index column %q", part)
		}
		cols = append(cols, m[1])
	}
	return cols, nil
}

// normalizeType makes a DDL type and information_schema's COLUMN_TYPE
// comparable: lower case, no spaces in parentheses, and no integer display
// width (MariaDB reports int(11), MySQL 8.0 int).
func normalizeType(t string) string {
	t = strings.ToLower(strings.TrimSpace(spacesRE.ReplaceAllString(t, " ")))
	t = strings.ReplaceAll(strings.ReplaceAll(t, " (", "("), ", ", ",")
	t = strings.ReplaceAll(t, "( ", "(")
	t = strings.ReplaceAll(t, " )", ")")
	if strings.HasPrefix(t, "integer") {
		t = "int" + strings.TrimPrefix(t, "integer")
	}
	return intWidthRE.ReplaceAllString(t, "$1")
}

// checkSchema compares want with the current database's schema and returns
// an error naming every table, column or index that is missing or shaped
// differently. What the migration does not create (extra columns, indexes
// of later migrations) is not its concern.
func checkSchema(ctx context.Context, conn *sql.Conn, want schemaShape) error {
	if err := checkRoutines(ctx, conn, want.routines); err != nil {
		return err
	}
	names := map[string]bool{}
	for _, t := range want.tables {
		names[strings.ToLower(t.name)] = true
	}
	for _, ix := range want.indexes {
		names[strings.ToLower(ix.table)] = true
	}
	if len(names) == 0 {
		return nil
	}
	var schema sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&schema); err != nil {
		return err
	}
	if !schema.Valid {
		return fmt.Errorf("no database selected: the DSN must name one")
	}
	var args []any
	args = append(args, schema.String)
	for n := range names {
		args = append(args, n)
	}
	in := "TABLE_SCHEMA = ? AND LOWER(TABLE_NAME) IN (" + Placeholders(len(names)) + ")"

	type columnKey struct{ table, column string }
	have := map[columnKey]columnShape{}
	tables := map[string]bool{}
	rows, err := conn.QueryContext(ctx, "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IFNULL(COLLATION_NAME, ''), IS_NULLABLE FROM information_schema.COLUMNS WHERE "+in, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		var table, nullable string
		var c columnShape
		if err := rows.Scan(&table, &c.name, &c.colType, &c.collation, &nullable); err != nil {
			rows.Close()
			return err
		}
		c.colType, c.collation, c.nullable = normalizeType(c.colType), strings.ToLower(c.collation), nullable == "YES"
		table = strings.ToLower(table)
		tables[table] = true
		have[columnKey{table, strings.ToLower(c.name)}] = c
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}

	type indexKey struct{ table, index string }
	haveIx := map[indexKey]*indexShape{}
	rows, err = conn.QueryContext(ctx, "SELECT TABLE_NAME, INDEX_NAME, IFNULL(COLUMN_NAME, ''), NON_UNIQUE FROM information_schema.STATISTICS WHERE "+in+" ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX", args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		var table, index, column string
		var nonUnique int
		if err := rows.Scan(&table, &index, &column, &nonUnique); err != nil {
			rows.Close()
			return err
		}
		k := indexKey{strings.ToLower(table), strings.ToLower(index)}
		if haveIx[k] == nil {
			haveIx[k] = &indexShape{table: table, name: index, unique: nonUnique == 0}
		}
		haveIx[k].columns = append(haveIx[k].columns, strings.ToLower(column))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}

	var problems []string
	for _, t := range want.tables {
		tn := strings.ToLower(t.name)
		if !tables[tn] {
			problems = append(problems, "table "+t.name+" is missing")
			continue
		}
		for _, c := range t.columns {
			got, ok := have[columnKey{tn, strings.ToLower(c.name)}]
			where := "column " + t.name + "." + c.name
			switch {
			case !ok:
				problems = append(problems, where+" is missing")
				continue
			case got.colType != c.colType:
				problems = append(problems, fmt.Sprintf("%s is %s, the migration makes it %s", where, got.colType, c.colType))
			case c.collation != "" && got.collation != c.collation:
				problems = append(problems, fmt.Sprintf("%s has collation %s, the migration gives it %s", where, got.collation, c.collation))
			}
			if got.nullable != c.nullable {
				problems = append(problems, fmt.Sprintf("%s %s, the migration makes it %s", where, nullWord(got.nullable, "allows NULL", "is NOT NULL"), nullWord(c.nullable, "nullable", "NOT NULL")))
			}
		}
	}
	for _, ix := range want.indexes {
		tn := strings.ToLower(ix.table)
		what := "index " + ix.table + "." + ix.name
		if ix.name == "PRIMARY" {
			what = "the primary key of " + ix.table
		}
		if !tables[tn] {
			if !hasTable(want, tn) { // a table this migration creates is reported once, above
				problems = append(problems, what+" is missing: table "+ix.table+" is missing")
			}
			continue
		}
		got := haveIx[indexKey{tn, strings.ToLower(ix.name)}]
		wantCols := strings.ToLower(strings.Join(ix.columns, ", "))
		switch {
		case got == nil:
			problems = append(problems, fmt.Sprintf("%s (%s) is missing", what, wantCols))
		case strings.Join(got.columns, ", ") != wantCols:
			problems = append(problems, fmt.Sprintf("%s is on (%s), the migration puts it on (%s)", what, strings.Join(got.columns, ", "), wantCols))
		case got.unique != ix.unique:
			problems = append(problems, fmt.Sprintf("%s is %s, the migration makes it %s", what, nullWord(got.unique, "unique", "not unique"), nullWord(ix.unique, "unique", "not unique")))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the schema lacks or reshapes what this migration creates, so it is not recorded as applied: %s", strings.Join(problems, "; "))
	}
	return nil
}

func hasTable(sh schemaShape, lower string) bool {
	for _, t := range sh.tables {
		if strings.ToLower(t.name) == lower {
			return true
		}
	}
	return false
}

func nullWord(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}
