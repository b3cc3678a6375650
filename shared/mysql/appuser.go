package mysql

import (
	"context"
	"fmt"
	"regexp"
	"strings"
)

// AppUserHost is the host part of the application user: any, because its
// connections come from RDS Proxy, whose addresses are not fixed.
const AppUserHost = "%"

// namePattern bounds the application user's and the schema's names to what
// needs no quoting: they are written into account statements, which take no
// placeholders for identifiers.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_]{1,32}$`)

// Account management statements, run by the migration as the master user.
// The user and password are client-side interpolated string literals (the
// DSN's interpolateParams): these statements cannot be prepared.
const (
	createAppUserSQL = "CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY ?"
	// Every run sets the password from the secret: a rotated secret is
	// followed by the next migration run.
	alterAppUserSQL = "ALTER USER ?@'%' IDENTIFIED BY ?"
)

// EnsureAppUser creates the application user the functions connect as (or
// updates its password) and grants it SELECT, INSERT, UPDATE and DELETE on
// the current schema's tables and EXECUTE of its procedures, nothing more:
// no DDL, no other schema, no GRANT OPTION. The same statements run on Aurora MySQL 8.0 and MariaDB
// 10.11. The connection must be the master's (CREATE USER and GRANT OPTION).
// The password comes from the secret RDS Proxy logs in with; the functions
// themselves present IAM tokens to the proxy and never hold it.
func (db *DB) EnsureAppUser(ctx context.Context, user, password string) error {
	if !namePattern.MatchString(user) {
		return fmt.Errorf("mysql: application user name %q is not 1-32 letters, digits or _", user)
	}
	if password == "" {
		return fmt.Errorf("mysql: application user %s has an empty password", user)
	}
	var schema string
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&schema); err != nil {
		return fmt.Errorf("mysql: current schema: %w", err)
	}
	if !namePattern.MatchString(schema) {
		return fmt.Errorf("mysql: schema name %q is not 1-32 letters, digits or _", schema)
	}
	if _, err := db.ExecContext(ctx, createAppUserSQL, user, password); err != nil {
		return fmt.Errorf("mysql: create application user %s: %w", user, err)
	}
	if _, err := db.ExecContext(ctx, alterAppUserSQL, user, password); err != nil {
		return fmt.Errorf("mysql: set application user %s's password: %w", user, err)
	}
	if _, err := db.ExecContext(ctx, grantDMLSQL(schema, user)); err != nil {
		return fmt.Errorf("mysql: grant DML on %s to %s: %w", schema, user, err)
	}
	return nil
}

// grantDMLSQL is the one grant of the application user: DML on every table
// of schema, present and future (a new migration's tables need no new
// grant), and EXECUTE of its procedures, which run with these same rights
// (SQL SECURITY INVOKER, see migrations/0012_send_procedure.sql). A _ in a
// database name of GRANT is a wildcard, so it is escaped: the grant names
// this schema only.
func grantDMLSQL(schema, user string) string {
	return "GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON `" + strings.ReplaceAll(schema, "_", `\_`) + "`.* TO '" + user + "'@'" + AppUserHost + "'"
}
