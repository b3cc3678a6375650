// Command push-relay is the PushRelayFunction: it runs outside the VPC and
// posts to the push channel's connections through the @connections
// management API (MESH_PUSH_ENDPOINT) for the functions inside the VPC,
// which reach it with Lambda Invoke (pushaws.LambdaRelay). It needs no
// database and holds no secret, so it links neither (no shared/app).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/push/pushaws"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	relay, err := newRelay(context.Background(), log)
	if err != nil {
		log.Error("function init failed", "err", err)
		fmt.Fprintln(os.Stderr, "init failed:", err)
		os.Exit(1)
	}
	lambda.Start(pushaws.RelayHandler(relay))
}

func newRelay(ctx context.Context, log *slog.Logger) (*pushaws.ManagementRelay, error) {
	cfg, err := config.LoadAWS(ctx, os.Getenv)
	if err != nil {
		return nil, err
	}
	if cfg.PushEndpoint == "" {
		return nil, errors.New("config: MESH_PUSH_ENDPOINT is not set")
	}
	return pushaws.NewManagementRelay(ctx, cfg.PushEndpoint, log)
}
