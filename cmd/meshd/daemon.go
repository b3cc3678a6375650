package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/meshmcp"
)

const handlerContract = `The handler runs once per event, in seq order, never two at once:
  stdin   the event as one JSON object: {v, event_id, seq, type, to, from,
          task_id, context_id, group_id?, message_id, occurred_at, body}
          type is message, status, artifact or undeliverable; body holds
          {message|status|artifact, task}.
  env     MESH_EVENT_ID, MESH_SEQ, MESH_EVENT_TYPE, MESH_FROM, MESH_TASK_ID,
          MESH_CONTEXT_ID, MESH_GROUP_ID, MESH_MESSAGE_ID, MESH_TO,
          MESH_OCCURRED_AT, MESH_HANDLER_SOCKET, MESH_HANDLER_TOKEN, and
          meshd's environment WITHOUT its credentials: no MESH_API_KEY, no
          MESH_CONFIG, no MESH_* variable named like a key, token, secret or
          password. A handler (an LLM above all) can be talked into printing
          its environment; nothing in it outlives the event.
  replies meshd reply, meshd tasks status and meshd artifact add inside the
          handler need no key: they call meshd over MESH_HANDLER_SOCKET (a
          Unix socket, mode 0600, in MESH_STATE_DIR) with MESH_HANDLER_TOKEN,
          a random capability minted for this run of the handler, and meshd
          makes the call with its own key. The capability acts only on this
          event's task (MESH_TASK_ID; another task is refused, exit 65) and
          is refused once this run of the handler has ended (exit 65), also
          for a process the handler left behind. Other meshd commands in a
          handler need their own MESH_API_KEY. On Linux meshd makes itself
          non-dumpable, so the handler cannot read the key from
          /proc/<meshd's pid>/environ either. The handler still runs as
          meshd's user: keep the config file out of its reach (another
          user, a sandbox) if it must not read the key from disk.
  exit    0 = handled (never delivered again).
          65, 126, 127 or a command that cannot start = this event can never
          be handled: parked at once (meshd deadletters, meshd retry).
          anything else, or MESH_HANDLER_TIMEOUT = retried with backoff
          (MESH_HANDLER_ATTEMPTS, default 10 tries over about 30 min), then parked.
  Parked: kept in MESH_STATE_DIR/<agent>.deadletters/, the task moved to failed
  with the error (when this agent is its recipient), delivery moves on.
  Idempotent replies: an event may be delivered again after a crash before it
  was marked, so reply with --message-id reply-$MESH_EVENT_ID: the mesh keeps
  one message per id. meshd reply/send/tasks exit 65 when the mesh refuses the
  call for good (e.g. 409 task_terminal), so "exec meshd reply ..." passes it on.`

func daemonCommands() []*command {
	return []*command{
		{name: "run", args: "[-- COMMAND ARGS...]", summary: "deliver this agent's events to a handler, in order, once each (foreground)",
			long: `meshd run is the foreground daemon (systemd, launchd, containers; meshd start
runs it in the background). The handler is the command after "--", else
MESH_HANDLER run with sh -c. Ctrl-C (SIGTERM) lets the running handler finish,
then tells the mesh the agent is draining; a second Ctrl-C stops the handler's
process group.

` + handlerContract + `

Batches (--batch N, N from 1 to 1000; default 1: one run per event):
  what    up to N events meshd has ALREADY received (one Kafka fetch, one
          inbox page) go to one run of the handler; meshd never waits to fill
          a batch, so a quiet agent still gets single events. A lone ready
          event runs in the single-event form above. Pushed events (push
          mode) come one at a time and are not batched.
  stdin   one event per line, in seq order: each line is exactly the JSON
          object a single-event run gets, followed by "\n". A batch's stdin
          stops before the event that would take it past 8 MiB.
  env     MESH_BATCH=<number of events>, and none of the per-event MESH_*
          variables (read each event's fields from its line). A run
          without MESH_BATCH is a single event. MESH_HANDLER_SOCKET and
          MESH_HANDLER_TOKEN as above; the capability acts on the task of
          any event of the batch, no other.
  exit    0 = every event of the batch handled: the state advances once, to
          its last event. Anything else (any status, a timeout) marks
          nothing of the batch: each of its events then runs alone, in the
          single-event form, with the retries and parking above, so one bad
          event is parked alone and the others are handled.
  crash   a crash after the batch ran and before its mark runs the whole
          batch once more: make its work idempotent, e.g. per line
          meshd reply --task <task_id> --message-id reply-<event_id> ...

Other settings: MESH_MODE auto (default: the push channel when the mesh
announces one, else Kafka when reachable; the inbox API while neither is),
push, kafka or poll; MESH_KAFKA_BROKERS; MESH_PUSH_MAX_CONN_AGE (default 2h),
MESH_PUSH_RETRY_BASE (default 30s); MESH_HANDLER_TIMEOUT (default 30m);
MESH_HANDLER_BACKOFF, MESH_HANDLER_BACKOFF_MAX; MESH_LOG_FORMAT text|json;
MESH_LOG_LEVEL.`,
			examples: `  meshd run -- ./handler.sh
  MESH_HANDLER='cat >> inbox.jsonl' meshd run
  meshd run --batch 100 -- sh -c 'cat >> inbox.jsonl'   # up to 100 events a run
  # handler.sh: answer every message and complete its task
  #!/bin/sh
  [ "$MESH_EVENT_TYPE" = message ] || exit 0
  meshd reply --message-id "reply-$MESH_EVENT_ID" "got it"
  exec meshd tasks status completed`,
			setup: setupRun},
		{name: "mcp", summary: "serve this agent's tools to an MCP client (Claude Code, ...) on stdin/stdout",
			long: `Speaks MCP over stdio: stdout carries only MCP frames, logs go to stderr.
Tools: send, reply, group send, inbox (check, ack), tasks (list, get, messages,
update status, add artifact), friends (list, requests, request, accept,
reject), groups (list, create, add member, roster), whoami.

Claude Code: put this in .mcp.json at the project root (or run
  claude mcp add mesh --env MESH_API_KEY=... -- meshd mcp):
  {"mcpServers": {"mesh": {"command": "meshd", "args": ["mcp"],
     "env": {"MESH_API_URL": "http://127.0.0.1:8080", "MESH_API_KEY": "..."}}}}
Any stdio MCP client: command "meshd", args ["mcp"], the same env (or
args ["mcp", "--config", "/path/config.toml"] after meshd init).`,
			examples: `  meshd mcp
  meshd mcp --config ~/.config/meshd/alice.toml`,
			setup: setupMCP},
		{name: "deadletters", summary: "list the events meshd run parked (handler failed for good)",
			examples: `  meshd deadletters
  meshd deadletters --json | jq .envelope`,
			setup: setupDeadLetters},
		{name: "retry", args: "SEQ [-- COMMAND ARGS...]", summary: "run parked event SEQ through the handler again",
			long: `Removed from the parked list on success. Stop meshd first: it holds the lock
of the agent's state. The handler gets the same contract as under meshd run
(see meshd run --help): its meshd reply, tasks status and artifact add go
through this process, which needs MESH_API_KEY for them.`,
			examples: `  meshd retry 42
  meshd retry 42 -- ./fixed-handler.sh`,
			setup: setupRetry},
	}
}

// runConfig is meshd.Config from the settings, with the handler of args.
func (e *cliEnv) runConfig(args []string) (meshd.Config, error) {
	handler, err := e.commandHandler(args)
	if err != nil {
		return meshd.Config{}, err
	}
	// A handler that cannot run fails now, naming it, before any network.
	if err := handler.Check(); err != nil {
		return meshd.Config{}, err
	}
	s, log, dir, err := e.daemonSettings(e.stderr)
	if err != nil {
		return meshd.Config{}, err
	}
	// The handler runs as this user: without this it could read the key
	// from /proc/<this pid>/environ although its own environment has none.
	if err := meshd.HideProcess(); err != nil {
		log.Warn("cannot hide this process's environment from its handler (prctl PR_SET_DUMPABLE)", "err", err)
	}
	cfg := meshd.Config{API: daemonClient(s, log, "meshd"), StateDir: dir, Handler: handler, Log: log}
	if err := e.envInt("MESH_HANDLER_ATTEMPTS", &cfg.HandlerAttempts); err != nil {
		return cfg, err
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"MESH_HANDLER_BACKOFF", &cfg.HandlerBackoff}, {"MESH_HANDLER_BACKOFF_MAX", &cfg.HandlerBackoffMax}, {"MESH_KAFKA_PROBE_EVERY", &cfg.ProbeEvery},
		// The push channel's connection age limit (the mesh's setting of the
		// same name, when shortened to simulate API Gateway's 2 h), and the
		// window a reconnect after a lost connection is spread over.
		{"MESH_PUSH_MAX_CONN_AGE", &cfg.PushMaxAge}, {"MESH_PUSH_RETRY_BASE", &cfg.PushRetryBase}} {
		if err := e.envDuration(d.name, d.to); err != nil {
			return cfg, err
		}
	}
	if v := e.get("MESH_KAFKA_BROKERS"); v != "" {
		cfg.KafkaBrokers = strings.Split(v, ",")
	}
	cfg.Mode = e.get("MESH_MODE")
	switch cfg.Mode {
	case "", meshd.ModeAuto, meshd.ModePush, meshd.ModeKafka, meshd.ModePoll:
	default:
		return cfg, fmt.Errorf("MESH_MODE must be auto, push, kafka or poll (got %q)", cfg.Mode)
	}
	return cfg, nil
}

// commandHandler is the handler of run and retry: the command after "--"
// (or the arguments), else MESH_HANDLER run with sh -c, bounded by
// MESH_HANDLER_TIMEOUT.
func (e *cliEnv) commandHandler(command []string) (meshd.CommandHandler, error) {
	if len(command) == 0 {
		line := strings.TrimSpace(e.get("MESH_HANDLER"))
		if line == "" {
			return meshd.CommandHandler{}, errors.New(`MESH_HANDLER is not set: give the command to run for each event, e.g. MESH_HANDLER='cat >> inbox.jsonl' or meshd run -- cat`)
		}
		if err := meshd.CheckShellLine(line); err != nil {
			return meshd.CommandHandler{}, fmt.Errorf("MESH_HANDLER: %s", strings.TrimPrefix(err.Error(), "meshd: "))
		}
		command = []string{"sh", "-c", line}
	}
	timeout := 30 * time.Minute
	if err := e.envDuration("MESH_HANDLER_TIMEOUT", &timeout); err != nil {
		return meshd.CommandHandler{}, err
	}
	// No MESH_CONFIG for the handler: the file holds the key. Its meshd
	// commands reach meshd through the control channel instead.
	return meshd.CommandHandler{Command: command, Timeout: timeout, Stdout: e.stdout, Stderr: e.stderr}, nil
}

// envDuration sets *d from the setting name when it is set (0 allowed).
func (e *cliEnv) envDuration(name string, d *time.Duration) error {
	v := e.get(name)
	if v == "" {
		return nil
	}
	x, err := time.ParseDuration(v)
	if err != nil || x < 0 {
		return fmt.Errorf("%s must be a duration like 10m (got %q)", name, v)
	}
	*d = x
	return nil
}

// envInt sets *n from the setting name when it is set (≥ 1).
func (e *cliEnv) envInt(name string, n *int) error {
	v := e.get(name)
	if v == "" {
		return nil
	}
	x, err := strconv.Atoi(v)
	if err != nil || x < 1 {
		return fmt.Errorf("%s must be a whole number ≥ 1 (got %q)", name, v)
	}
	*n = x
	return nil
}

// localAgent is the agent whose local files deadletters and retry read:
// --agent, else the only agent with state in dir (no API call needed).
func localAgent(flagAgent, dir string) (string, error) {
	if flagAgent != "" {
		if !mesh.ValidAgentID(flagAgent) {
			return "", fmt.Errorf("--agent %q is not an agent id", flagAgent)
		}
		return flagAgent, nil
	}
	ids, err := meshd.StateAgents(dir)
	if err != nil {
		return "", err
	}
	switch len(ids) {
	case 0:
		return "", nil
	case 1:
		return ids[0], nil
	default:
		return "", fmt.Errorf("state dir %s holds several agents (%s): pick one with --agent", dir, strings.Join(ids, ", "))
	}
}

func setupDeadLetters(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	agent := fs.String("agent", "", "agent id (default: the only agent with state in MESH_STATE_DIR)")
	asJSON := fs.Bool("json", false, "print each parked event in full (envelope included) as a JSON line")
	return func(_ context.Context, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("deadletters takes no arguments (got %q)", args[0])
		}
		dir, err := e.stateDir()
		if err != nil {
			return err
		}
		id, err := localAgent(*agent, dir)
		if err != nil || id == "" {
			return err
		}
		dls, err := meshd.ListDeadLetters(dir, id)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			for _, dl := range dls {
				if err := enc.Encode(dl); err != nil {
					return err
				}
			}
			return nil
		}
		t := newTable(e.stdout, "SEQ", "TYPE", "FROM", "TASK", "REASON", "ATTEMPTS", "PARKED", "ERROR")
		for _, dl := range dls {
			t.row(dl.Seq, dl.Type, dl.From, dl.TaskID, dl.Reason, dl.Attempts, dl.ParkedAt.Format(time.RFC3339), truncate(dl.Error, 300))
		}
		return t.flush()
	}
}

func setupRetry(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	agent := fs.String("agent", "", "agent id (default: the only agent with state in MESH_STATE_DIR)")
	return func(ctx context.Context, args []string) error {
		if len(args) == 0 {
			return errors.New("retry needs the SEQ of a parked event (see meshd deadletters)")
		}
		seq, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil || seq < 1 {
			return fmt.Errorf("retry: SEQ must be a positive number (got %q)", args[0])
		}
		handler, err := e.commandHandler(args[1:])
		if err != nil {
			return err
		}
		log, err := e.logger(e.stderr)
		if err != nil {
			return err
		}
		dir, err := e.stateDir()
		if err != nil {
			return err
		}
		id, err := localAgent(*agent, dir)
		if err != nil {
			return err
		}
		if id == "" {
			return fmt.Errorf("no meshd state in %s: nothing was parked", dir)
		}
		cfg := meshd.RetryConfig{StateDir: dir, AgentID: id, Handler: handler, Log: log}
		if s, err := e.settings(); err == nil {
			if err := meshd.HideProcess(); err != nil { // as in run
				log.Warn("cannot hide this process's environment from its handler (prctl PR_SET_DUMPABLE)", "err", err)
			}
			cfg.API = daemonClient(s, log, "meshd")
			// The handler replies through this process, as under meshd run.
			// The socket is made at the handler's run, under the state lock
			// RetryDeadLetter takes, so a running meshd's socket is never
			// replaced.
			ctl := meshd.NewHandlerControl(cfg.API, dir, id, log)
			defer ctl.Close()
			cfg.Handler = ctl.Wrap(handler)
		}
		return meshd.RetryDeadLetter(ctx, cfg, seq)
	}
}

// setupMCP serves the MCP tools over stdin/stdout. stdout carries only MCP
// frames: every log line goes to stderr.
func setupMCP(_ *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("mcp takes no arguments (got %q)", args[0])
		}
		s, log, dir, err := e.daemonSettings(e.stderr)
		if err != nil {
			return err
		}
		return meshmcp.Serve(ctx, meshmcp.Config{API: daemonClient(s, log, "meshd-mcp"), StateDir: dir, Log: log, Version: buildVersion()}, e.stdin, e.stdout)
	}
}
