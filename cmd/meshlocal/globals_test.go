package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// Run hands its logger and metrics sink to what it starts instead of
// swapping the process's slog.Default and metrics.Default, which would
// reroute every other user of them (tests in the same process included);
// the dispatcher's CloudWatch lines still land in meshlocal's log file, not
// on stdout.
func TestRunLeavesTheProcessLoggerAndMetricsSinkAlone(t *testing.T) {
	_, dsn := mysqltest.New(t)
	state := t.TempDir()
	env := map[string]string{"MYSQL_DSN": dsn, "MESH_HTTP_ADDR": "127.0.0.1:0", "MESH_KFAKE_PORT": "0", "MESH_STATE_DIR": state}
	before, beforeW := slog.Default(), metrics.Default.W

	var during *slog.Logger
	var duringW io.Writer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Dir: ".", Getenv: func(k string) string { return env[k] }, Out: &out, Stderr: &testenv.Buffer{},
			Ready: func(string) {
				during, duringW = slog.Default(), metrics.Default.W
				cancel()
			}})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v\n%s", err, out.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("Run did not serve and stop within 2 minutes:\n%s", out.String())
	}
	if during == nil {
		t.Fatalf("Run returned without calling Ready:\n%s", out.String())
	}
	if during != before {
		t.Error("slog.Default was replaced while Run served")
	}
	if duringW != beforeW {
		t.Error("metrics.Default's writer was replaced while Run served")
	}
	// The dispatcher's first scheduled run starts with the stack and, cut
	// short by the shutdown, emits its metrics before Run returns.
	logFile, err := os.ReadFile(filepath.Join(state, "meshlocal", "meshlocal.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logFile), `"OutboxSent"`) {
		t.Errorf("the dispatcher's metrics are not in meshlocal.log:\n%s", logFile)
	}
}
