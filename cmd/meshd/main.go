// Command meshd is the Agent Mesh agent-host daemon and CLI: it delivers the
// agent's events to a handler (run, start, stop, status), serves the agent's
// tools to an LLM (mcp) and does everything the agent API allows from a
// shell (send, reply, tasks, friends, groups, ...). `meshd help` lists the
// commands; `meshd COMMAND --help` explains one, with examples.
//
// Configuration comes from the environment (MESH_API_URL, MESH_API_KEY,
// MESH_STATE_DIR, MESH_HANDLER, ...) over a config file written by
// `meshd init`. This package only parses and wires; the logic lives in
// shared/meshd, shared/meshmcp and shared/meshclient.
//
// The files are split by responsibility: commands.go (the command table,
// help, dispatch), settings.go (config file, environment, clients),
// daemon.go (run, mcp, deadletters, retry), lifecycle.go (start, stop,
// status, init, install), messages.go (send, reply, inbox, artifacts),
// tasks.go, social.go (whoami, friends, groups), output.go (tables).
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func buildVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}
