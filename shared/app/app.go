// Package app builds a function's shared dependencies once, at init, from its
// environment: configuration (secrets resolved), the database pool, the
// identity service and the logger. It links no Kafka code: HTTP functions
// import it; the dispatcher adds its Kafka client on top.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/tracing"
)

// Env is what every function shares.
type Env struct {
	Config   config.Config
	DB       *mysql.DB
	Identity *identity.Service
	Log      *slog.Logger
}

// NewLogger returns the JSON logger functions write to CloudWatch.
func NewLogger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Load builds an Env from the process environment, resolving secrets.
func Load(ctx context.Context) (*Env, error) {
	cfg, err := config.LoadAWS(ctx, os.Getenv)
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg, NewLogger())
}

// New builds an Env from an explicit configuration (the local stack uses it).
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (*Env, error) {
	if err := cfg.Require("MYSQL_DSN"); err != nil {
		return nil, err
	}
	// A request body carries the message's parts as JSON, with file bytes in
	// base64 (4/3 larger): the body cap must never be what refuses a message
	// the configured limit allows (that one answers 413 message_too_large).
	if need := cfg.MaxMessageBytes*4/3 + 64<<10; need > httpapi.MaxBodyBytes {
		httpapi.MaxBodyBytes = need
	}
	db, err := mysql.OpenWithCredentials(ctx, cfg.MySQLDSN, cfg.DBCredentials)
	if err != nil {
		return nil, err
	}
	id, err := identity.New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Env{Config: cfg, DB: db, Identity: id, Log: log}, nil
}

// MustLoad is Load for a function's init: on failure it logs one clear line
// and exits, so the Lambda init error names the cause.
func MustLoad() *Env {
	env, err := Load(context.Background())
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("function init failed", "err", err)
		fmt.Fprintln(os.Stderr, "init failed:", err)
		os.Exit(1)
	}
	return env
}

// HTTP wraps an endpoint with the shared middleware and tracing.
func (e *Env) HTTP(ep httpapi.Endpoint) httpapi.LambdaHandler {
	return tracing.HTTP(httpapi.Lambda(identityhttp.Authenticator(e.Identity), e.Log, ep))
}
