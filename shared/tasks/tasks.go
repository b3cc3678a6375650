// Package tasks provides the A2A-style tasks of the mesh: sending messages
// (to one agent or fanned out to a group), replies, status moves, artifacts,
// the read routes, the inbox API, and the scheduled task scanner.
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

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/outbox"
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
	Log     *slog.Logger
	// Metrics receives the undeliverable counts (default metrics.Default).
	Metrics *metrics.Sink
	// Failpoint, when set, is called with a point's name inside every write
	// transaction; an error aborts (rolls back) the transaction. Only tests
	// set it: "before_commit" runs after every row of the write, including
	// the outbox rows, is written and before the commit.
	Failpoint func(ctx context.Context, name string) error
}

// FailpointBeforeCommit is the failpoint between the last insert and the commit.
const FailpointBeforeCommit = "before_commit"

// New builds the service from a function's environment.
func New(env *app.Env) *Service {
	s := &Service{
		DB:              env.DB,
		Clock:           mesh.SystemClock,
		MaxMessageBytes: env.Config.MaxMessageBytes,
		IdleTimeout:     env.Config.TaskIdleTimeout,
		Log:             env.Log,
		Janitor:         outbox.Janitor{DB: env.DB, Retention: env.Config.OutboxRetention, Log: env.Log},
		Inbox:           outbox.Inbox{MaxPolls: env.Config.MaxLongPolls},
	}
	return s.withDefaults()
}

// withDefaults fills unset limits; handlers call it so a Service literal in a
// test works like one built by New.
func (s *Service) withDefaults() *Service {
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

// Endpoints maps the template's logical function IDs to this package's
// routes.
func Endpoints(s *Service) httpapi.Endpoints {
	s.withDefaults()
	agent := func(h func(context.Context, *httpapi.Request) (httpapi.Response, error)) httpapi.Endpoint {
		return httpapi.Endpoint{Auth: httpapi.AuthAgent, Handle: h}
	}
	return httpapi.Endpoints{
		"SendMessageFunction":      agent(s.handleSend),
		"SendGroupMessageFunction": agent(s.handleGroupSend),
		"ReplyFunction":            agent(s.handleReply),
		"UpdateTaskStatusFunction": agent(s.handleStatus),
		"AddArtifactFunction":      agent(s.handleArtifact),
		"GetTaskFunction":          agent(s.handleGetTask),
		"ListTaskMessagesFunction": agent(s.handleListMessages),
		"ListTasksFunction":        agent(s.handleListTasks),
		"InboxFunction":            agent(s.handleInbox),
	}
}

// Jobs maps the template's scheduled functions to this package's jobs.
func Jobs(s *Service) app.Jobs {
	s.withDefaults()
	return app.Jobs{
		"TaskScannerFunction":   s.ScanIdleTasks,
		"OutboxJanitorFunction": s.RunJanitor,
	}
}

// newID mints a server-side id (task, message, context, artifact): a random
// UUID v4, so ids reveal nothing about order or volume.
func newID() string { return outbox.NewEventID() }
