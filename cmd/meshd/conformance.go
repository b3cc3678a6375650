package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentmesh/agentmesh/shared/a2aconformance"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

func conformanceCommands() []*command {
	return []*command{
		{name: "a2a-conformance-agent", summary: "a handler that behaves as the A2A TCK's system under test (meshd run -- meshd a2a-conformance-agent)",
			long: `Handles one event (the envelope on stdin) the way the A2A TCK expects of the
agent it tests, chosen by the message id prefix (tck-complete-task,
tck-artifact-*, tck-input-required, tck-stream-*, test-resubscribe-message-id,
...; anything else completes with the message echoed). It acts only through
mesh operations on the event's task: replies, status moves and artifacts,
through meshd run's control socket (outside a handler run, with MESH_API_KEY).
Only messages on tasks this agent received start work; other events exit 0.
test-resubscribe-message-id works for 2x the streaming timeout and
tck-delayed-complete for 1x: meshd handles one event at a time, so the agent's
other events wait meanwhile.`,
			examples: `  meshd run -- meshd a2a-conformance-agent
  TCK_STREAMING_TIMEOUT=5 meshd run -- meshd a2a-conformance-agent`,
			setup: setupConformance},
	}
}

func setupConformance(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	timeout := fs.Duration("streaming-timeout", 0, "the TCK's streaming timeout (default: TCK_STREAMING_TIMEOUT in seconds, else 2s; at most 1m)")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usageError("a2a-conformance-agent takes no arguments (the event comes on stdin)")
		}
		t := *timeout
		if !fs.Changed("streaming-timeout") {
			if v := e.getenv("TCK_STREAMING_TIMEOUT"); v != "" {
				secs, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return usageError("TCK_STREAMING_TIMEOUT must be a number of seconds (got %q)", v)
				}
				t = time.Duration(secs * float64(time.Second))
			} else {
				t = a2aconformance.DefaultStreamingTimeout
			}
		}
		if t <= 0 || t > a2aconformance.MaxStreamingTimeout {
			return usageError("the streaming timeout must be over 0 and at most %v (got %v)", a2aconformance.MaxStreamingTimeout, t)
		}
		env, err := a2aconformance.ReadEnvelope(e.stdin)
		if err != nil {
			return meshd.Permanent(err)
		}
		// The longest plan waits 2x and makes four calls, each bounded
		// like one `meshd reply` in a handler.
		ctx, cancel := context.WithTimeout(ctx, 2*t+4*2*callTimeout)
		defer cancel()
		agent := &a2aconformance.Agent{StreamingTimeout: t, Log: slog.New(slog.NewTextHandler(e.stderr, nil))}
		if hc, ok := meshd.HandlerClientFromEnv(e.getenv); ok {
			agent.Ops = hc
			return agent.Handle(ctx, env)
		}
		s, err := e.settings()
		if err != nil {
			return fmt.Errorf("not inside meshd run (no %s) and no API key: %w", meshd.EnvHandlerSocket, err)
		}
		c, done := e.client(s)
		defer done()
		agent.Ops = c
		return agent.Handle(ctx, env)
	}
}
