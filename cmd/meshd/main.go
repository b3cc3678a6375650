// Command meshd is the Agent Mesh agent-host daemon and CLI.
//
//	meshd run [-- command args...]   deliver the agent's events to a handler command
//	meshd mcp                        serve the agent's tools to an MCP client over stdio
//	meshd send --to bob "text"       send a message; prints {task_id, message_id, ...}
//	meshd reply --task ID "text"     reply in a task
//	meshd inbox [--after N]          print inbox events, one JSON object per line
//	meshd deadletters                list the events meshd run parked
//	meshd retry SEQ [-- command...]  run a parked event through the handler again
//	meshd version
//
// Configuration comes from the environment: MESH_API_URL, MESH_API_KEY,
// MESH_STATE_DIR, MESH_HANDLER, MESH_MODE (see usage). This file only parses
// and wires; the logic lives in shared/meshd, shared/meshmcp and
// shared/meshclient.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/meshmcp"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

const usage = `usage: meshd <command> [flags]

commands:
  run [-- command args...]    deliver this agent's events to a handler, in order, once each
  mcp                         MCP server on stdin/stdout for Claude Code or any MCP client:
                              tools mesh_check_inbox, mesh_ack, mesh_send_message, mesh_reply, ...
  send --to AGENT [--task ID] [--context ID] [--message-id ID] TEXT...
                              send a message (TEXT from stdin when omitted)
  reply --task ID [--message-id ID] TEXT...
                              reply in a task
  inbox [--after N] [--limit N] [--wait 5s]
                              print inbox events as JSON lines
  deadletters [--agent ID] [--json]
                              list the events meshd run parked (handler failed for good)
  retry [--agent ID] SEQ [-- command args...]
                              run parked event SEQ through the handler once; removed from
                              the list on success (stop meshd run first: it holds the lock)
  version                     print the version

environment:
  MESH_API_URL          mesh API base URL (default http://127.0.0.1:8080)
  MESH_API_KEY          this agent's API key (required)
  MESH_STATE_DIR        where delivery progress is kept (default ~/.local/state/meshd);
                        meshd mcp keeps its own cursor there (<agent>.mcp.state.json)
  MESH_HANDLER          handler command line, run with sh -c once per event
                        (or give the command after "run --")
  MESH_HANDLER_TIMEOUT  longest a handler may run (default 30m; 0 = no limit)
  MESH_HANDLER_ATTEMPTS tries of a failing event before it is parked (default 10; flag -attempts)
  MESH_HANDLER_BACKOFF  first wait between tries, doubling (default 5s; flag -backoff)
  MESH_HANDLER_BACKOFF_MAX
                        longest wait between tries (default 10m; flag -backoff-max);
                        the defaults span about 30 minutes
  MESH_KAFKA_PROBE_EVERY
                        auto mode: how often to check Kafka while polling (default 20s)
  MESH_MODE             auto (default), kafka or poll
  MESH_KAFKA_BROKERS    override the brokers the mesh announces (comma-separated)
  MESH_LOG_FORMAT       text (default) or json; logs go to stderr
  MESH_LOG_LEVEL        debug, info (default), warn or error

handler contract (meshd run and retry):
  exit 0 = handled. Exit 65, 126 or 127, or a command that cannot start = this event
  can never be handled: parked at once. Any other status or a timeout is retried with
  backoff, then parked. Parked: kept in MESH_STATE_DIR/<agent>.deadletters/, the task
  moved to failed with the error (when this agent is its recipient), delivery moves on.
  meshd send and reply exit 65 when the mesh refuses the call for good (a 4xx other
  than 408/429, e.g. 409 task_terminal), so "exec meshd reply ..." passes it on.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks command-line mistakes (exit status 2).
var errUsage = errors.New("usage")

// cli runs one command and returns the exit status.
func cli(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(ctx, args[1:], getenv, stdout, stderr)
	case "mcp":
		err = cmdMCP(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "send":
		err = cmdSend(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "reply":
		err = cmdReply(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "inbox":
		err = cmdInbox(ctx, args[1:], getenv, stdout, stderr)
	case "deadletters":
		err = cmdDeadLetters(args[1:], getenv, stdout, stderr)
	case "retry":
		err = cmdRetry(ctx, args[1:], getenv, stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "meshd %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "meshd: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage), errors.Is(err, flag.ErrHelp):
		return 2
	case meshclient.IsPermanent(err):
		// The mesh refused the call for good: a handler passing this status
		// on has its event parked instead of retried.
		fmt.Fprintf(stderr, "meshd: %s\n", strings.SplitN(err.Error(), "\n", 2)[0])
		return meshd.ExitPermanent
	default:
		// One line: the first line of the error, never a credential.
		msg := strings.SplitN(err.Error(), "\n", 2)[0]
		fmt.Fprintf(stderr, "meshd: %s\n", strings.TrimPrefix(msg, "meshd: "))
		return 1
	}
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

// settings is the environment, read once.
type settings struct {
	apiURL, apiKey string
}

func loadSettings(getenv func(string) string) (settings, error) {
	s := settings{apiURL: getenv("MESH_API_URL"), apiKey: getenv("MESH_API_KEY")}
	if s.apiURL == "" {
		s.apiURL = "http://127.0.0.1:8080"
	}
	if !strings.HasPrefix(s.apiURL, "http://") && !strings.HasPrefix(s.apiURL, "https://") {
		return s, fmt.Errorf("MESH_API_URL must start with http:// or https:// (got %q)", s.apiURL)
	}
	if s.apiKey == "" {
		return s, errors.New("MESH_API_KEY is not set: export this agent's API key (shown once when the agent was created)")
	}
	return s, nil
}

func newLogger(getenv func(string) string, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if v := getenv("MESH_LOG_LEVEL"); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return nil, fmt.Errorf("MESH_LOG_LEVEL must be debug, info, warn or error (got %q)", v)
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f := getenv("MESH_LOG_FORMAT"); f {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("MESH_LOG_FORMAT must be text or json (got %q)", f)
	}
}

func stateDir(getenv func(string) string) (string, error) {
	if d := getenv("MESH_STATE_DIR"); d != "" {
		return d, nil
	}
	if d := getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "meshd"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("MESH_STATE_DIR is not set and there is no HOME to default to ~/.local/state/meshd")
	}
	return filepath.Join(home, ".local", "state", "meshd"), nil
}

func cmdRun(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshd run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	attempts := fs.Int("attempts", 0, "tries of a failing event before it is parked (default MESH_HANDLER_ATTEMPTS or 10)")
	backoff := fs.Duration("backoff", 0, "first wait between tries (default MESH_HANDLER_BACKOFF or 5s)")
	backoffMax := fs.Duration("backoff-max", 0, "longest wait between tries (default MESH_HANDLER_BACKOFF_MAX or 10m)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	handler, err := commandHandler(fs.Args(), getenv, stdout, stderr)
	if err != nil {
		return err
	}
	// A handler that cannot run fails now, naming it, before any network.
	if err := handler.Check(); err != nil {
		return err
	}
	s, log, dir, err := daemonSettings(getenv, stderr)
	if err != nil {
		return err
	}
	cfg := meshd.Config{API: daemonClient(s, log, "meshd"), StateDir: dir, Handler: handler, Log: log}
	if err := envInt(getenv, "MESH_HANDLER_ATTEMPTS", &cfg.HandlerAttempts); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"MESH_HANDLER_BACKOFF", &cfg.HandlerBackoff}, {"MESH_HANDLER_BACKOFF_MAX", &cfg.HandlerBackoffMax}, {"MESH_KAFKA_PROBE_EVERY", &cfg.ProbeEvery}} {
		if err := envDuration(getenv, d.name, d.to); err != nil {
			return err
		}
	}
	if *attempts > 0 {
		cfg.HandlerAttempts = *attempts
	}
	if *backoff > 0 {
		cfg.HandlerBackoff = *backoff
	}
	if *backoffMax > 0 {
		cfg.HandlerBackoffMax = *backoffMax
	}
	if v := getenv("MESH_KAFKA_BROKERS"); v != "" {
		cfg.KafkaBrokers = strings.Split(v, ",")
	}
	cfg.Mode = getenv("MESH_MODE")
	switch cfg.Mode {
	case "", meshd.ModeAuto, meshd.ModeKafka, meshd.ModePoll:
	default:
		return fmt.Errorf("MESH_MODE must be auto, kafka or poll (got %q)", cfg.Mode)
	}
	return meshd.Run(ctx, cfg)
}

// commandHandler is the handler of run and retry: the command after "--",
// else MESH_HANDLER run with sh -c, bounded by MESH_HANDLER_TIMEOUT.
func commandHandler(command []string, getenv func(string) string, stdout, stderr io.Writer) (meshd.CommandHandler, error) {
	if len(command) == 0 {
		line := strings.TrimSpace(getenv("MESH_HANDLER"))
		if line == "" {
			return meshd.CommandHandler{}, errors.New(`MESH_HANDLER is not set: give the command to run for each event, e.g. MESH_HANDLER='cat >> inbox.jsonl' or meshd run -- cat`)
		}
		if err := meshd.CheckShellLine(line); err != nil {
			return meshd.CommandHandler{}, fmt.Errorf("MESH_HANDLER: %s", strings.TrimPrefix(err.Error(), "meshd: "))
		}
		command = []string{"sh", "-c", line}
	}
	timeout := 30 * time.Minute
	if err := envDuration(getenv, "MESH_HANDLER_TIMEOUT", &timeout); err != nil {
		return meshd.CommandHandler{}, err
	}
	return meshd.CommandHandler{Command: command, Timeout: timeout, Stdout: stdout, Stderr: stderr}, nil
}

// envDuration sets *d from the variable name when it is set (0 allowed).
func envDuration(getenv func(string) string, name string, d *time.Duration) error {
	v := getenv(name)
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

// envInt sets *n from the variable name when it is set (≥ 1).
func envInt(getenv func(string) string, name string, n *int) error {
	v := getenv(name)
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

func cmdDeadLetters(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshd deadletters", flag.ContinueOnError)
	fs.SetOutput(stderr)
	agent := fs.String("agent", "", "agent id (default: the only agent with state in MESH_STATE_DIR)")
	asJSON := fs.Bool("json", false, "print each parked event in full (envelope included) as a JSON line")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("deadletters takes no arguments (got %q)", fs.Arg(0))
	}
	dir, err := stateDir(getenv)
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
	enc := json.NewEncoder(stdout)
	for _, dl := range dls {
		if *asJSON {
			if err := enc.Encode(dl); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(stdout, "seq=%d type=%s from=%s task=%s reason=%s attempts=%d parked_at=%s error=%q\n",
			dl.Seq, dl.Type, dl.From, dl.TaskID, dl.Reason, dl.Attempts, dl.ParkedAt.Format(time.RFC3339), dl.Error)
	}
	return nil
}

func cmdRetry(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshd retry", flag.ContinueOnError)
	fs.SetOutput(stderr)
	agent := fs.String("agent", "", "agent id (default: the only agent with state in MESH_STATE_DIR)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() == 0 {
		return errors.New("retry needs the SEQ of a parked event (see meshd deadletters)")
	}
	seq, err := strconv.ParseInt(fs.Arg(0), 10, 64)
	if err != nil || seq < 1 {
		return fmt.Errorf("retry: SEQ must be a positive number (got %q)", fs.Arg(0))
	}
	command := fs.Args()[1:]
	if len(command) > 0 && command[0] == "--" {
		command = command[1:]
	}
	handler, err := commandHandler(command, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(getenv, stderr)
	if err != nil {
		return err
	}
	dir, err := stateDir(getenv)
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
	if s, err := loadSettings(getenv); err == nil {
		cfg.API = daemonClient(s, log, "meshd")
	}
	return meshd.RetryDeadLetter(ctx, cfg, seq)
}

// cmdMCP serves the MCP tools over stdin/stdout. stdout carries only MCP
// frames: every log line goes to stderr.
func cmdMCP(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshd mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("mcp takes no arguments (got %q)", fs.Arg(0))
	}
	s, log, dir, err := daemonSettings(getenv, stderr)
	if err != nil {
		return err
	}
	return meshmcp.Serve(ctx, meshmcp.Config{API: daemonClient(s, log, "meshd-mcp"), StateDir: dir, Log: log, Version: buildVersion()}, stdin, stdout)
}

// daemonSettings reads what the long-running commands (run, mcp) need from
// the environment: the API settings, the logger and the state directory.
func daemonSettings(getenv func(string) string, stderr io.Writer) (settings, *slog.Logger, string, error) {
	s, err := loadSettings(getenv)
	if err != nil {
		return s, nil, "", err
	}
	log, err := newLogger(getenv, stderr)
	if err != nil {
		return s, nil, "", err
	}
	dir, err := stateDir(getenv)
	return s, log, dir, err
}

// daemonClient is the API client of a long-running command. Calls give up
// after 15 s: the daemon's own loops (which retry forever) then log an
// outage promptly instead of after minutes, and an MCP tool call fails
// within seconds so the model can tell its user instead of hanging.
func daemonClient(s settings, log *slog.Logger, product string) *meshclient.Client {
	return meshclient.New(s.apiURL, s.apiKey, meshclient.WithLogger(log), meshclient.WithUserAgent(product+"/"+buildVersion()),
		meshclient.WithRetry(meshclient.RetryPolicy{Base: 200 * time.Millisecond, Max: 5 * time.Second, MaxElapsed: 15 * time.Second}))
}

// callTimeout bounds one CLI call, retries included.
const callTimeout = time.Minute

func textParts(fs *flag.FlagSet, stdin io.Reader) ([]mesh.Part, error) {
	text := strings.Join(fs.Args(), " ")
	if fs.NArg() == 0 {
		b, err := io.ReadAll(io.LimitReader(stdin, 16<<20))
		if err != nil {
			return nil, err
		}
		text = strings.TrimRight(string(b), "\n")
	}
	if text == "" {
		return nil, errors.New("nothing to send: give the text as arguments or on stdin")
	}
	return []mesh.Part{{Kind: "text", Text: text}}, nil
}

func cmdSend(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshd send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	to := fs.String("to", "", "recipient agent id (required)")
	task := fs.String("task", "", "continue this task")
	contextID := fs.String("context", "", "context id to group related tasks")
	messageID := fs.String("message-id", "", "idempotency id (minted when empty; reuse it to retry safely)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *to == "" {
		return errors.New("send needs --to AGENT")
	}
	return sendText(ctx, fs, getenv, stdin, stdout, stderr, func(ctx context.Context, c *meshclient.Client, parts []mesh.Part) (any, error) {
		return c.Send(ctx, meshclient.SendRequest{To: *to, Parts: parts, MessageID: *messageID, TaskID: *task, ContextID: *contextID})
	})
}

func cmdReply(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshd reply", flag.ContinueOnError)
	fs.SetOutput(stderr)
	task := fs.String("task", "", "task id (required; MESH_TASK_ID in a handler)")
	messageID := fs.String("message-id", "", "idempotency id (minted when empty)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *task == "" {
		return errors.New("reply needs --task ID")
	}
	return sendText(ctx, fs, getenv, stdin, stdout, stderr, func(ctx context.Context, c *meshclient.Client, parts []mesh.Part) (any, error) {
		return c.Reply(ctx, *task, meshclient.ReplyRequest{Parts: parts, MessageID: *messageID})
	})
}

// sendText is the rest of send and reply once their flags are checked: the
// settings, the text (arguments or stdin), one call bounded by callTimeout,
// and its answer as one JSON object on stdout.
func sendText(ctx context.Context, fs *flag.FlagSet, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer,
	call func(context.Context, *meshclient.Client, []mesh.Part) (any, error)) error {
	s, err := loadSettings(getenv)
	if err != nil {
		return err
	}
	parts, err := textParts(fs, stdin)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	res, err := call(ctx, client(s, stderr), parts)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

func cmdInbox(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshd inbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	after := fs.Int64("after", 0, "print events with seq greater than this")
	limit := fs.Int("limit", 100, "at most this many events (1-500)")
	wait := fs.Duration("wait", 0, "long-poll up to this long (at most 20s) when there is nothing yet")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("inbox takes no arguments (got %q)", fs.Arg(0))
	}
	s, err := loadSettings(getenv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout+*wait)
	defer cancel()
	page, err := client(s, stderr).Inbox(ctx, *after, *limit, *wait)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for _, ev := range page.Events {
		if err := enc.Encode(ev); err != nil {
			return err
		}
	}
	// The cursor goes to stderr so stdout stays pure JSON lines.
	fmt.Fprintf(stderr, "next_after=%s oldest_seq=%s\n", strconv.FormatInt(page.NextAfter, 10), strconv.FormatInt(page.OldestSeq, 10))
	return nil
}

func client(s settings, stderr io.Writer) *meshclient.Client {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return meshclient.New(s.apiURL, s.apiKey, meshclient.WithLogger(log), meshclient.WithUserAgent("meshd/"+buildVersion()))
}
