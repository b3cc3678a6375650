// Package mysql is the MySQL/Aurora adapter: connections, the transaction
// boundary with deadlock retry, and schema migrations. SQL here runs unchanged
// on Aurora MySQL 8.0 and MariaDB 10.11.
package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/backoff"
)

// MySQL server error numbers the code reacts to.
const (
	ErrDupEntry     = 1062
	ErrLockWait     = 1205
	ErrDeadlock     = 1213
	maxTxAttempts   = 6
	defaultMaxConns = 10
)

// DB is a connection pool with the project's transaction boundary.
type DB struct {
	*sql.DB
}

// Credentials supplies the user and password of a new connection; fresh
// asks for them to be read again from their source, because the server just
// refused the previous ones.
type Credentials func(ctx context.Context, fresh bool) (user, password string, err error)

// Open connects with dsn, forcing the options the code relies on (parsed UTC
// times, utf8mb4) and checks the server answers.
func Open(ctx context.Context, dsn string) (*DB, error) {
	return OpenWithCredentials(ctx, dsn, nil)
}

// OpenWithCredentials is Open with the user and password of every new
// connection taken from creds (when not nil) instead of the DSN. A connection
// the server refuses for its credentials (1045, a rotated password) asks
// creds for fresh ones and is tried once more, so a pool follows a rotation
// without restarting.
func OpenWithCredentials(ctx context.Context, dsn string, creds Credentials) (*DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: bad DSN: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.Collation = "utf8mb4_unicode_ci"
	// Parameters are interpolated client-side (safe with utf8mb4): no
	// server-side prepared statements, which pin every RDS Proxy session and
	// cost two extra round trips per statement. No session variables are set
	// for the same reason: every time is a UTC parameter from the application's
	// clock, never the server's NOW() or time_zone.
	cfg.InterpolateParams = true
	// A Pipe sends several statements in one round trip. Every text is the
	// project's constant SQL and every argument is escaped by the driver,
	// so no argument can add a statement. RDS Proxy does not pin a session
	// for a multi-statement text (its pinning conditions are texts over
	// 16 KB, prepared statements, session variables, locks and temporary
	// tables).
	cfg.MultiStatements = true
	var connector driver.Connector
	if creds == nil {
		if connector, err = mysql.NewConnector(cfg); err != nil {
			return nil, fmt.Errorf("mysql: %w", err)
		}
	} else {
		connector = &credConnector{cfg: cfg, creds: creds}
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(defaultMaxConns)
	db.SetMaxIdleConns(defaultMaxConns)
	db.SetConnMaxLifetime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: cannot reach %s: %w", cfg.Addr, err)
	}
	return &DB{DB: db}, nil
}

// txRetry spaces the retries of a transaction that hit a deadlock or a lock
// wait: 10 ms doubling to 160 ms, half of it random, so the five retries
// span 155-310 ms, long enough for a contending send, heartbeat or scanner
// batch to commit.
var txRetry = backoff.Policy{Base: 10 * time.Millisecond, Max: 160 * time.Millisecond, Jitter: 0.5}

// InTx runs fn in one transaction and commits it. A deadlock or lock-wait
// timeout (1213, 1205) rolls back and runs fn again from the start, so fn must
// do all its reads inside tx and have no effects outside it. Any error from fn
// rolls back and is returned as is.
func (db *DB) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return retryDeadlocks(ctx, func() error { return db.runTx(ctx, fn) })
}

// retryDeadlocks runs one transaction attempt until it ends in anything but
// a deadlock or lock-wait timeout, at most maxTxAttempts times.
func retryDeadlocks(ctx context.Context, attempt func() error) error {
	var err error
	for n := 0; n < maxTxAttempts; n++ {
		if n > 0 {
			// Jittered so two retried transactions do not collide again.
			if !backoff.Wait(ctx, txRetry.Delay(n)) {
				return ctx.Err()
			}
		}
		err = attempt()
		if !IsRetryable(err) {
			return err
		}
	}
	return err
}

func (db *DB) runTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// IsRetryable reports whether err is a deadlock or lock-wait timeout.
func IsRetryable(err error) bool {
	return errNumber(err) == ErrDeadlock || errNumber(err) == ErrLockWait
}

// IsUnavailable reports whether err means the database cannot be reached or
// cannot serve right now (connection refused or lost, server shutting down,
// too many connections, read-only during a failover): a condition to retry
// later, not a bug. Callers answer 503 with Retry-After or back off.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	switch errNumber(err) {
	case 1040, // too many connections
		1053, // server shutdown in progress
		1290, // --read-only (Aurora writer failover)
		1836, // read-only mode
		1927: // connection was killed (MariaDB)
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	return false
}

// IsDuplicate reports whether err is a duplicate-key violation (1062).
func IsDuplicate(err error) bool { return errNumber(err) == ErrDupEntry }

// IsSignal reports whether err is a procedure's SIGNAL SQLSTATE '45000'
// with message (error 1644 on MySQL 8.0 and MariaDB alike).
func IsSignal(err error, message string) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1644 && me.SQLState == [5]byte{'4', '5', '0', '0', '0'} && me.Message == message
}

func errNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// Placeholders returns "?,?,…" with n marks, for IN lists and multi-row
// VALUES built from a fixed statement shape.
func Placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}

// errAccessDenied is the server's "Access denied for user" (wrong password).
const errAccessDenied = 1045

// credConnector makes each connection with the credentials of the moment.
type credConnector struct {
	cfg   *mysql.Config
	creds Credentials
}

func (c *credConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.connect(ctx, false)
	if errNumber(err) == errAccessDenied {
		conn, err = c.connect(ctx, true)
	}
	return conn, err
}

func (c *credConnector) connect(ctx context.Context, fresh bool) (driver.Conn, error) {
	user, pass, err := c.creds(ctx, fresh)
	if err != nil {
		return nil, err
	}
	cfg := c.cfg.Clone()
	cfg.User, cfg.Passwd = user, pass
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return conn.Connect(ctx)
}

func (c *credConnector) Driver() driver.Driver { return &mysql.MySQLDriver{} }
