// Package tasks provides the A2A-style tasks of the mesh: sending messages
// (to one agent or fanned out to a group), replies, status moves, artifacts,
// the read routes, the inbox API, and the scheduled task scanner. Methods
// take and return typed values (shared/api's wire types) and fail with
// mesh.Errors; the HTTP routes and the scheduled jobs that call them live in
// the adapter, taskshttp.
//
// Every write runs in ONE transaction (mysql.DB.InTx) that, in this order,
// spends the caller's rate budget, claims the idempotency key, checks who may
// do what, writes the business rows and appends the outbox events for the
// other party with their gapless per-recipient seq. A 2xx therefore means the
// message and its events committed together; any error means nothing did.
//
// Lock order, the same in every transaction (so they cannot deadlock each
// other): the caller's rate_limits row, its idempotency_keys row, task rows,
// the task_contexts row of a new task's conversation (claimContext), then
// inbox_counters rows in ascending recipient order (outbox.Append).
package tasks

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/retention"
)

// Defaults of the Service's limits.
const (
	DefaultMaxMessageBytes = 256 << 10
	DefaultIdleTimeout     = 24 * time.Hour
	// DefaultMaxFanoutBytes caps message size × recipients of one group
	// send: the whole fan-out is one transaction, and a 256 KiB message to
	// 1,000 members would otherwise write half a gigabyte in it.
	DefaultMaxFanoutBytes = 64 << 20
	// MaxFanoutMembers caps the recipients of one group send: the answer
	// lists one task per recipient and must fit a Lambda response.
	MaxFanoutMembers = 10000
	// DefaultScanBatch is how many idle tasks one scanner transaction fails.
	DefaultScanBatch = 200
	// DefaultOutboxRetention is how long settled outbox rows stay readable
	// through GET /v1/inbox before the janitor deletes them.
	DefaultOutboxRetention = 7 * 24 * time.Hour
)

// Service implements the task routes on MySQL.
type Service struct {
	DB    *mysql.DB
	Clock mesh.Clock
	// MaxMessageBytes limits the parts of one message or artifact, measured
	// as their stored JSON (file bytes count base64-encoded).
	MaxMessageBytes int
	// MaxFanoutBytes limits message bytes × recipients of a group send.
	MaxFanoutBytes int
	// IdleTimeout is how long a non-terminal task may go without activity
	// before the scanner fails it.
	IdleTimeout time.Duration
	// ScanBatch is the number of tasks per scanner transaction.
	ScanBatch int
	// Inbox serves GET /v1/inbox; its DB defaults to DB.
	Inbox outbox.Inbox
	// Janitor is the outbox retention job.
	Janitor outbox.Janitor
	// Retention is the history retention job (terminal tasks, audit log,
	// answered friend requests, expired sessions, revoked keys), run by
	// RunJanitor after the outbox; its DB, Clock and Log default to s's.
	Retention retention.Janitor
	Log       *slog.Logger
	// Metrics receives the undeliverable counts (default metrics.Default).
	Metrics *metrics.Sink
	// Failpoint, when set, is called with a point's name inside every write
	// transaction; an error aborts (rolls back) the transaction. Only tests
	// set it: "before_commit" runs after every row of the write, including
	// the outbox rows, is written, or queued to travel with the commit in a
	// new task's pipe, and before the commit.
	Failpoint func(ctx context.Context, name string) error
	// TraceID returns the trace id of the invocation ctx belongs to, which
	// the write's events carry; the adapter sets it from the tracing
	// backend. Nil, or "", means no trace.
	TraceID func(ctx context.Context) string
}

func (s *Service) traceID(ctx context.Context) string {
	if s.TraceID == nil {
		return ""
	}
	return s.TraceID(ctx)
}

// FailpointBeforeCommit is the failpoint between the last insert and the
// commit (a new task's pipe: before the round trip that carries both).
const FailpointBeforeCommit = "before_commit"

// WithDefaults fills unset limits and returns s. Every method calls it, so a
// Service literal works like a fully configured one; an adapter calls it
// once before it shares s between goroutines, so no call writes a field.
func (s *Service) WithDefaults() *Service {
	if s.Clock == nil {
		s.Clock = mesh.SystemClock
	}
	if s.MaxMessageBytes <= 0 {
		s.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if s.MaxFanoutBytes <= 0 {
		s.MaxFanoutBytes = DefaultMaxFanoutBytes
	}
	if s.IdleTimeout <= 0 {
		s.IdleTimeout = DefaultIdleTimeout
	}
	if s.ScanBatch <= 0 {
		s.ScanBatch = DefaultScanBatch
	}
	if s.Log == nil {
		s.Log = slog.Default()
	}
	if s.Inbox.DB == nil {
		s.Inbox.DB = s.DB
	}
	if s.Inbox.Log == nil {
		s.Inbox.Log = s.Log
	}
	if s.Metrics == nil {
		s.Metrics = metrics.Default
	}
	if s.Inbox.Metrics == nil {
		s.Inbox.Metrics = s.Metrics
	}
	if s.Janitor.DB == nil {
		s.Janitor.DB = s.DB
	}
	if s.Janitor.Retention <= 0 {
		s.Janitor.Retention = DefaultOutboxRetention
	}
	if s.Janitor.Clock == nil {
		s.Janitor.Clock = s.Clock
	}
	return s
}

// newID mints a server-side id (task, message, context, artifact): a random
// UUID v4, so ids reveal nothing about order or volume.
func newID() string { return outbox.NewEventID() }
