package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/statedir"
)

func lifecycleCommands() []*command {
	return []*command{
		{name: "start", args: "[-- COMMAND ARGS...]", summary: "run the daemon in the background (log and pid in the state dir)",
			long: `meshd start runs meshd run detached, with its log in
MESH_STATE_DIR/<agent>.log, and returns once it delivers. It refuses when
another meshd instance is already live for this agent (seen through the mesh's
presence, from any host). Takes the flags of meshd run.`,
			examples: `  meshd start -- ./handler.sh
  meshd start --from latest       # a fresh state dir skips what is pending
  meshd status; meshd stop`,
			setup: setupStart},
		{name: "stop", summary: "stop the background daemon: the handler finishes, the agent turns draining",
			examples: "  meshd stop\n  meshd stop --now   # kill the running handler; its event comes again at the next start",
			setup:    setupStop},
		{name: "status", summary: "the agent's presence, delivery mode, lag, parked events, pid and uptime",
			examples: "  meshd status\n  meshd status --json", setup: setupStatus},
		{name: "init", summary: "write the config file (API URL, key, handler), mode 0600",
			long: `The key is read from --api-key, else from stdin (so it stays out of the
shell history). Every command reads the file; MESH_* environment variables
override it.`,
			examples: `  meshd init --api-url https://mesh.example.com --handler ./handler.sh < key.txt
  echo "$KEY" | meshd init --config ~/.config/meshd/bob.toml`,
			setup: setupInit},
		{name: "install", summary: "write a systemd user unit (Linux) or launchd agent (macOS) running meshd run",
			long: `Writes ~/.config/systemd/user/meshd.service (Linux) or
~/Library/LaunchAgents/net.agentmesh.meshd.plist (macOS) that runs
"meshd run --config FILE", restarting it on failure. Enable it with the
printed command.`,
			examples: "  meshd init < key.txt && meshd install --user\n  systemctl --user enable --now meshd", setup: setupInstall},
	}
}

// runInfo is what a running meshd publishes in MESH_STATE_DIR/<agent>.run.json
// for meshd status and stop; removed when it exits.
type runInfo struct {
	PID        int       `json:"pid"`
	AgentID    string    `json:"agent_id"`
	InstanceID string    `json:"instance_id"`
	Mode       string    `json:"mode"`
	StartedAt  time.Time `json:"started_at"`
	Log        string    `json:"log,omitempty"`
}

func runInfoPath(dir, agent string) string { return filepath.Join(dir, agent+".run.json") }

func readRunInfo(dir, agent string) (runInfo, bool) {
	var ri runInfo
	b, err := os.ReadFile(runInfoPath(dir, agent))
	if err != nil || json.Unmarshal(b, &ri) != nil || ri.PID <= 0 {
		return ri, false
	}
	return ri, true
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	return err == nil && p.Signal(syscall.Signal(0)) == nil
}

// preflight is what run and start check with the mesh before delivering:
// another live instance of this agent, and where a fresh state dir starts.
type preflight struct {
	me    meshclient.Me
	other string // a description of another live instance, or ""
}

// otherInstanceWindow: a heartbeat this recent (meshd beats every 30 s)
// from an instance that is not ours means it is still running.
const otherInstanceWindow = 75 * time.Second

func (e *cliEnv) preflight(ctx context.Context, api *meshclient.Client, dir, from string, log *slog.Logger) (preflight, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	me, err := api.Me(cctx)
	if err != nil {
		if meshclient.IsStatus(err, 401) {
			return preflight{}, err
		}
		if from != "" {
			return preflight{}, fmt.Errorf("--from needs the mesh API, which did not answer: %w", err)
		}
		log.Warn("could not check for another meshd of this agent before starting", "err", err)
		return preflight{}, nil
	}
	pf := preflight{me: me}
	ours, _ := readRunInfo(dir, me.AgentID)
	if me.Status == "active" && me.InstanceID != nil && *me.InstanceID != "" && me.LastHeartbeatAt != nil &&
		time.Since(*me.LastHeartbeatAt) < otherInstanceWindow &&
		!(ours.InstanceID == *me.InstanceID && !alive(ours.PID)) {
		pf.other = fmt.Sprintf("instance %s (heartbeat %s)", *me.InstanceID, ago(*me.LastHeartbeatAt))
		if ours.InstanceID == *me.InstanceID {
			pf.other += fmt.Sprintf(", pid %d here", ours.PID)
		}
	}
	return pf, e.seedState(dir, me, from, log)
}

// seedState gives a fresh state dir its starting point: the seq the
// agent's last meshd reported handled (its heartbeats' last_seq), unless
// --from says 0 (everything retained) or latest (only what arrives from
// now on). An existing state is never moved.
func (e *cliEnv) seedState(dir string, me meshclient.Me, from string, log *slog.Logger) error {
	exists, err := meshd.StateExists(dir, me.AgentID)
	if err != nil {
		return err
	}
	if exists {
		if from != "" {
			log.Warn("--from ignored: the state dir already has this agent's position", "state", meshd.StatePath(dir, me.AgentID))
		}
		return nil
	}
	var start int64
	switch from {
	case "0":
	case "latest":
		start = me.LastSeq
	case "":
		var stats struct {
			LastSeq int64 `json:"last_seq"`
		}
		_ = json.Unmarshal(me.Stats, &stats)
		start = min(max(stats.LastSeq, 0), me.LastSeq)
	default:
		return usageError("--from must be 0 or latest (got %q)", from)
	}
	if start == 0 {
		return nil
	}
	log.Info("fresh state dir: starting after the agent's last handled seq (--from 0 replays the retention)", "after_seq", start, "newest_seq", me.LastSeq)
	st := meshd.State{AgentID: me.AgentID, LastSeq: start, Offset: -1, UpdatedAt: time.Now().UTC()}
	if from == "latest" {
		st.LastAt = time.Now().UTC()
	}
	return meshd.SaveState(dir, st)
}

// runFlags are the flags of run and start.
type runFlags struct {
	attempts            *int
	backoff, backoffMax *time.Duration
	from                *string
	batch               *int
}

func addRunFlags(fs *pflag.FlagSet) runFlags {
	return runFlags{
		attempts:   fs.Int("attempts", 0, "tries of a failing event before it is parked (default MESH_HANDLER_ATTEMPTS or 10)"),
		backoff:    fs.Duration("backoff", 0, "first wait between tries (default MESH_HANDLER_BACKOFF or 5s)"),
		backoffMax: fs.Duration("backoff-max", 0, "longest wait between tries (default MESH_HANDLER_BACKOFF_MAX or 10m)"),
		from:       fs.String("from", "", "a fresh state dir starts after the agent's last handled seq; 0 = every retained event, latest = only new ones"),
		batch:      fs.Int("batch", 1, fmt.Sprintf("hand the handler up to N events already received in one run, one JSON line each (1..%d; see Batches)", meshd.MaxBatch)),
	}
}

// check refuses flag values out of range, before anything starts.
func (f runFlags) check() error {
	if err := meshd.CheckBatch(*f.batch); err != nil {
		return usageError("--batch must be 1..%d (got %d)", meshd.MaxBatch, *f.batch)
	}
	return nil
}

func (f runFlags) apply(cfg *meshd.Config) {
	cfg.Batch = *f.batch
	if *f.attempts > 0 {
		cfg.HandlerAttempts = *f.attempts
	}
	if *f.backoff > 0 {
		cfg.HandlerBackoff = *f.backoff
	}
	if *f.backoffMax > 0 {
		cfg.HandlerBackoffMax = *f.backoffMax
	}
}

func setupRun(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	rf := addRunFlags(fs)
	refuseOther := fs.Bool("refuse-other", false, "exit instead of warning when another instance of this agent is live (meshd start sets it)")
	_ = fs.MarkHidden("refuse-other")
	return func(ctx context.Context, args []string) error {
		if err := rf.check(); err != nil {
			return err
		}
		cfg, err := e.runConfig(args)
		if err != nil {
			return err
		}
		rf.apply(&cfg)
		if *rf.from != "" && *rf.from != "0" && *rf.from != "latest" {
			return usageError("--from must be 0 or latest (got %q)", *rf.from)
		}
		pf, err := e.preflight(ctx, cfg.API, cfg.StateDir, *rf.from, cfg.Log)
		if err != nil {
			return err
		}
		if pf.other != "" {
			if *refuseOther {
				return fmt.Errorf("another meshd is live for agent %s: %s; stop it first (meshd stop there), or wait until it is no longer active", pf.me.AgentID, pf.other)
			}
			cfg.Log.Warn("ANOTHER MESHD IS RUNNING FOR THIS AGENT: both will handle every event. Stop one of them.", "agent_id", pf.me.AgentID, "other", pf.other)
		}
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		cfg.InstanceID = fmt.Sprintf("%x", b)
		started := time.Now().UTC()
		var agent string
		cfg.OnMode = func(agentID, mode string) {
			agent = agentID
			ri := runInfo{PID: os.Getpid(), AgentID: agentID, InstanceID: cfg.InstanceID, Mode: mode, StartedAt: started, Log: e.getenv("MESH_LOG_FILE")}
			if b, err := json.Marshal(ri); err == nil {
				_ = statedir.Put(cfg.StateDir, filepath.Base(runInfoPath(cfg.StateDir, agentID)), b)
			}
		}
		// A second interrupt kills the handler in flight (the first lets
		// it finish).
		interrupt := make(chan struct{})
		cfg.Interrupt = interrupt
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sigs)
		go func() {
			n := 0
			for range sigs {
				if n++; n == 2 {
					close(interrupt)
					return
				}
			}
		}()
		err = meshd.Run(ctx, cfg)
		if agent != "" {
			_ = os.Remove(runInfoPath(cfg.StateDir, agent))
		}
		return err
	}
}

// startWait bounds how long start waits for the daemon to deliver.
const startWait = 30 * time.Second

func setupStart(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	rf := addRunFlags(fs)
	return func(ctx context.Context, args []string) error {
		if err := rf.check(); err != nil {
			return err
		}
		cfg, err := e.runConfig(args)
		if err != nil {
			return err
		}
		pf, err := e.preflight(ctx, cfg.API, cfg.StateDir, *rf.from, cfg.Log)
		if err != nil {
			return err
		}
		if pf.me.AgentID == "" {
			return errors.New("the mesh API did not answer: cannot check that no other meshd runs for this agent (see meshd whoami)")
		}
		agent := pf.me.AgentID
		if ri, ok := readRunInfo(cfg.StateDir, agent); ok && alive(ri.PID) {
			return fmt.Errorf("meshd already runs for agent %s (pid %d, since %s): meshd status, meshd stop", agent, ri.PID, ago(ri.StartedAt))
		}
		if pf.other != "" {
			return fmt.Errorf("another meshd is live for agent %s: %s; stop it first (meshd stop there), or wait until it is no longer active", agent, pf.other)
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		// run makes the state dir when it takes its lock, but the log is
		// opened here first: a dir that does not exist yet is made now,
		// owner-only.
		if err := statedir.Make(cfg.StateDir); err != nil {
			return err
		}
		logPath := filepath.Join(cfg.StateDir, agent+".log")
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer logf.Close()
		child := []string{"run", "--refuse-other"}
		if e.configPath != "" {
			child = append(child, "--config", e.configPath)
		}
		fs.Visit(func(f *pflag.Flag) {
			if f.Name != "config" && f.Name != "from" { // the state is seeded here
				child = append(child, "--"+f.Name+"="+f.Value.String())
			}
		})
		if len(args) > 0 {
			child = append(append(child, "--"), args...)
		}
		cmd := exec.Command(self, child...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), "MESH_LOG_FILE="+logPath)
		detach(cmd)
		if err := cmd.Start(); err != nil {
			return err
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		deadline := time.NewTimer(startWait)
		defer deadline.Stop()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case err := <-exited:
				return fmt.Errorf("meshd run exited at once (%v): %s", err, lastLogLine(logPath))
			case <-deadline.C:
				fmt.Fprintf(e.stdout, "meshd started (pid %d) but is not delivering yet after %s; see %s\n", cmd.Process.Pid, startWait, logPath)
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
			if ri, ok := readRunInfo(cfg.StateDir, agent); ok && ri.PID == cmd.Process.Pid {
				fmt.Fprintf(e.stdout, "meshd started for agent %s: pid %d, mode %s\nlog:  %s\nstop: meshd stop   status: meshd status\n", agent, ri.PID, ri.Mode, logPath)
				return nil
			}
		}
	}
}

func lastLogLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "see " + path
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// localDaemon finds the agent and run info of the state dir: --agent, else
// the only agent with state there.
func (e *cliEnv) localDaemon(flagAgent string) (dir, agent string, err error) {
	if dir, err = e.stateDir(); err != nil {
		return "", "", err
	}
	if agent, err = localAgent(flagAgent, dir); err != nil {
		return "", "", err
	}
	if agent == "" {
		// A daemon that has handled nothing yet has run info but no state.
		if runs, _ := filepath.Glob(filepath.Join(dir, "*.run.json")); len(runs) == 1 {
			agent = strings.TrimSuffix(filepath.Base(runs[0]), ".run.json")
		}
	}
	if agent == "" {
		return dir, "", fmt.Errorf("no meshd state in %s (MESH_STATE_DIR)", dir)
	}
	return dir, agent, nil
}

func setupStop(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	agentFlag := fs.String("agent", "", "agent id (default: the only agent with state in MESH_STATE_DIR)")
	now := fs.Bool("now", false, "kill the running handler instead of waiting for it (its event comes again at the next start)")
	timeout := fs.Duration("timeout", 0, "give up waiting after this long (default MESH_HANDLER_TIMEOUT + 10s)")
	return func(ctx context.Context, _ []string) error {
		dir, agent, err := e.localDaemon(*agentFlag)
		if err != nil {
			return err
		}
		ri, ok := readRunInfo(dir, agent)
		if !ok || !alive(ri.PID) {
			return fmt.Errorf("no meshd is running for agent %s from %s", agent, dir)
		}
		p, _ := os.FindProcess(ri.PID)
		if err := p.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		if *now {
			time.Sleep(100 * time.Millisecond) // two signals, not one merged
			_ = p.Signal(syscall.SIGTERM)
		}
		wait := *timeout
		if wait <= 0 {
			wait = 30 * time.Minute
			_ = e.envDuration("MESH_HANDLER_TIMEOUT", &wait)
			wait += 10 * time.Second
		}
		fmt.Fprintf(e.stderr, "meshd: stopping pid %d (waiting for its handler to finish; meshd stop --now kills it)\n", ri.PID)
		deadline := time.Now().Add(wait)
		for alive(ri.PID) && !isZombie(ri.PID) {
			if time.Now().After(deadline) {
				return fmt.Errorf("meshd pid %d still runs after %s", ri.PID, wait)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		fmt.Fprintf(e.stdout, "meshd stopped (pid %d); agent %s is draining\n", ri.PID, agent)
		return nil
	}
}

// isZombie: an exited child of this process not yet reaped (tests start
// the daemon as their own child) no longer runs.
func isZombie(pid int) bool {
	if runtime.GOOS != "linux" {
		return false
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	if i := strings.LastIndexByte(line, ')'); i >= 0 && i+2 < len(line) {
		return line[i+2] == 'Z'
	}
	return false
}

// daemonStatus is what meshd status reports.
type daemonStatus struct {
	AgentID     string     `json:"agent_id"`
	Name        string     `json:"name,omitempty"`
	Presence    string     `json:"presence,omitempty"`
	Instance    string     `json:"instance_id,omitempty"`
	Running     bool       `json:"running"`
	PID         int        `json:"pid,omitempty"`
	Mode        string     `json:"mode,omitempty"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	HandledSeq  int64      `json:"handled_seq"`
	NewestSeq   int64      `json:"newest_seq"`
	Lag         int64      `json:"lag"`
	Parked      int        `json:"parked"`
	Log         string     `json:"log,omitempty"`
	APIError    string     `json:"api_error,omitempty"`
	LastBeatAgo string     `json:"-"`

	// Lost is the latest loss of events past the mesh's retention.
	Lost *meshd.LostEvents `json:"lost,omitempty"`
}

func setupStatus(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	agentFlag := fs.String("agent", "", "agent id (default: the only agent with state in MESH_STATE_DIR)")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	return func(ctx context.Context, _ []string) error {
		dir, agent, err := e.localDaemon(*agentFlag)
		if err != nil {
			return err
		}
		st := daemonStatus{AgentID: agent}
		if ri, ok := readRunInfo(dir, agent); ok && alive(ri.PID) && !isZombie(ri.PID) {
			st.Running, st.PID, st.Mode, st.Log = true, ri.PID, ri.Mode, ri.Log
			st.StartedAt = &ri.StartedAt
		}
		state, err := meshd.LoadState(dir, agent)
		if err != nil {
			return err
		}
		st.HandledSeq = state.LastSeq
		if state.Lost.Total > 0 {
			st.Lost = &state.Lost
		}
		dls, err := meshd.ListDeadLetters(dir, agent)
		if err != nil {
			return err
		}
		st.Parked = len(dls)
		apiErr := e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
			me, err := c.Me(ctx)
			if err != nil {
				return err
			}
			st.Name, st.Presence, st.NewestSeq = me.Name, me.Status, me.LastSeq
			st.Instance = deref(me.InstanceID)
			st.LastBeatAgo = ago(deref(me.LastHeartbeatAt))
			st.Lag = max(me.LastSeq-st.HandledSeq, 0)
			return nil
		})
		if meshclient.IsStatus(apiErr, 401) {
			return apiErr
		}
		if apiErr != nil {
			st.APIError = firstLine(apiErr)
		}
		if *asJSON {
			return printJSON(e.stdout, st)
		}
		run := "not running"
		if st.Running {
			run = fmt.Sprintf("running, pid %d, up %s, mode %s", st.PID, time.Since(*st.StartedAt).Round(time.Second), st.Mode)
		}
		fmt.Fprintf(e.stdout, "agent     %s %s\nmeshd     %s\n", st.AgentID, st.Name, run)
		if st.APIError != "" {
			fmt.Fprintf(e.stdout, "presence  unknown: %s\nhandled   seq %d\n", st.APIError, st.HandledSeq)
		} else {
			fmt.Fprintf(e.stdout, "presence  %s (last heartbeat %s)\nhandled   seq %d of %d, lag %d\n", st.Presence, st.LastBeatAgo, st.HandledSeq, st.NewestSeq, st.Lag)
		}
		fmt.Fprintf(e.stdout, "parked    %d (meshd deadletters)\n", st.Parked)
		if l := st.Lost; l != nil {
			fmt.Fprintf(e.stdout, "lost      %d events from seq %d (seq %d-%d expired before they were handled, %s; %d in all)\n",
				l.Count(), l.FromSeq, l.FromSeq, l.ToSeq, l.At.Format(time.RFC3339), l.Total)
		}
		if st.Log != "" {
			fmt.Fprintf(e.stdout, "log       %s\n", st.Log)
		}
		return nil
	}
}

func setupInit(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	apiURL := fs.String("api-url", "", "the mesh API base URL (default MESH_API_URL or http://127.0.0.1:8080)")
	apiKey := fs.String("api-key", "", "this agent's API key (default: read from stdin, so it stays out of the shell history)")
	handler := fs.String("handler", "", "the handler command line meshd run/start runs for each event")
	stateDir := fs.String("state-dir", "", "where delivery progress, logs and the pid are kept")
	force := fs.Bool("force", false, "replace an existing config file")
	return func(_ context.Context, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("init takes no arguments (got %q)", args[0])
		}
		path, _ := e.configFile()
		if path == "" {
			return errors.New("no HOME: name the config file with --config")
		}
		if _, err := os.Stat(path); err == nil && !*force {
			return fmt.Errorf("%s exists: pass --force to replace it", path)
		}
		key := *apiKey
		if key == "" {
			line, err := bufio.NewReader(e.stdin).ReadString('\n')
			if err != nil && line == "" {
				return errors.New("no API key: pipe it on stdin (meshd init < key.txt) or pass --api-key")
			}
			key = strings.TrimSpace(line)
		}
		url := *apiURL
		if url == "" {
			url = e.getenv("MESH_API_URL")
		}
		if url == "" {
			url = "http://127.0.0.1:8080"
		}
		if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
			return fmt.Errorf("--api-url must start with http:// or https:// (got %q)", url)
		}
		if err := writeConfig(path, []string{"api_url", "api_key", "handler", "state_dir"},
			map[string]string{"api_url": url, "api_key": key, "handler": *handler, "state_dir": *stateDir}); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote %s (mode 0600)\ncheck it with: meshd whoami --config %s\n", path, path)
		return nil
	}
}

func setupInstall(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	user := fs.Bool("user", false, "install for the current user (required: system-wide units are not written)")
	goos := fs.String("os", runtime.GOOS, "linux (systemd) or darwin (launchd)")
	_ = fs.MarkHidden("os")
	return func(_ context.Context, args []string) error {
		if !*user {
			return usageError("install needs --user (a system-wide unit is for your packaging, not meshd)")
		}
		cfgPath, _ := e.configFile()
		if cfgPath == "" {
			return errors.New("no HOME: name the config file with --config")
		}
		if abs, err := filepath.Abs(cfgPath); err == nil {
			cfgPath = abs
		}
		if _, err := os.Stat(cfgPath); err != nil {
			return fmt.Errorf("config file %s: %w (write it with meshd init first)", cfgPath, err)
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		home := e.getenv("HOME")
		var path, text, next string
		switch *goos {
		case "linux":
			dir := e.getenv("XDG_CONFIG_HOME")
			if dir == "" {
				dir = filepath.Join(home, ".config")
			}
			path = filepath.Join(dir, "systemd", "user", "meshd.service")
			text = systemdUnit(self, cfgPath)
			next = "systemctl --user daemon-reload && systemctl --user enable --now meshd\nlogs: journalctl --user -u meshd -f"
		case "darwin":
			path = filepath.Join(home, "Library", "LaunchAgents", "net.agentmesh.meshd.plist")
			text = launchdPlist(self, cfgPath, filepath.Join(home, "Library", "Logs", "meshd.log"))
			next = "launchctl load -w " + path
		default:
			return fmt.Errorf("install supports linux (systemd) and darwin (launchd), not %s", *goos)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote %s\nnext: %s\n", path, next)
		return nil
	}
}

// systemdUnit runs meshd run in the foreground; SIGTERM on stop lets the
// handler finish (TimeoutStopSec covers the default handler timeout), and
// exit 65 (a refused key) is not restarted in a loop.
func systemdUnit(bin, cfg string) string {
	return fmt.Sprintf(`[Unit]
Description=Agent Mesh daemon (meshd)
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=%s run --config %s
Restart=on-failure
RestartSec=5
# 65: what restarting cannot fix (a refused API key, a bad setting).
RestartPreventExitStatus=65
KillMode=mixed
KillSignal=SIGTERM
TimeoutStopSec=31min

[Install]
WantedBy=default.target
`, systemdQuote(bin), systemdQuote(cfg))
}

func systemdQuote(s string) string {
	if !strings.ContainsAny(s, " \t\"'\\") {
		return s
	}
	return strconv.Quote(s)
}

func launchdPlist(bin, cfg, logPath string) string {
	esc := func(s string) string {
		return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
	}
	return fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key><string>net.agentmesh.meshd</string>
  <key>ProgramArguments</key>
  <array><string>%s</string><string>run</string><string>--config</string><string>%s</string></array>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>
  <key>StandardOutPath</key><string>%s</string>
  <key>StandardErrorPath</key><string>%s</string>
</dict>
</plist>
`, esc(bin), esc(cfg), esc(logPath), esc(logPath))
}
