package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/shared/meshclient"
)

// cliEnv is what a command reads its settings from: the process environment
// over the config file, and its standard streams.
type cliEnv struct {
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer
	configPath     string // --config
	dashAt         int    // index of the first argument after "--", or -1

	once    sync.Once
	conf    map[string]string
	confErr error
}

// get is the setting name (MESH_API_URL): the environment variable when
// set, else the config file's entry (api_url).
func (e *cliEnv) get(name string) string {
	if v := e.getenv(name); v != "" {
		return v
	}
	e.once.Do(e.loadConfig)
	return e.conf[name]
}

// configFile is the config file's path: --config, MESH_CONFIG, else
// $XDG_CONFIG_HOME/meshd/config.toml or ~/.config/meshd/config.toml ("" when
// there is no home). explicit: named by the user, so it must exist.
func (e *cliEnv) configFile() (path string, explicit bool) {
	if e.configPath != "" {
		return e.configPath, true
	}
	if p := e.getenv("MESH_CONFIG"); p != "" {
		return p, true
	}
	if d := e.getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "meshd", "config.toml"), false
	}
	if h := e.getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "meshd", "config.toml"), false
	}
	return "", false
}

func (e *cliEnv) loadConfig() {
	path, explicit := e.configFile()
	if path == "" {
		return
	}
	conf, err := readConfig(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return
	}
	e.conf, e.confErr = conf, err
}

// usedConfig is the config file's path when one was read.
func (e *cliEnv) usedConfig() (string, bool) {
	e.once.Do(e.loadConfig)
	path, _ := e.configFile()
	return path, e.conf != nil
}

// configErr is the config file's problem, if any: checked by every command
// that needs a setting, so a broken file is named instead of ignored.
func (e *cliEnv) configErr() error {
	e.once.Do(e.loadConfig)
	return e.confErr
}

// readConfig reads the config file: `key = "value"` lines (a TOML subset),
// '#' comments; key api_url is the setting MESH_API_URL.
func readConfig(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	defer f.Close()
	conf := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		if !ok || k == "" || strings.ContainsAny(k, " \t\"") {
			return nil, fmt.Errorf("config file %s line %d: want key = \"value\"", path, n)
		}
		conf["MESH_"+strings.ToUpper(k)] = v
	}
	return conf, sc.Err()
}

// writeConfig writes the settings (key -> value, keys like api_url) to
// path with mode 0600: the file holds the API key.
func writeConfig(path string, keys []string, values map[string]string) error {
	var b strings.Builder
	b.WriteString("# meshd configuration (meshd init). Environment variables MESH_<KEY> override these.\n")
	for _, k := range keys {
		if v := values[k]; v != "" {
			fmt.Fprintf(&b, "%s = %s\n", k, strconv.Quote(v))
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// settings are the API settings, read once.
type settings struct {
	apiURL, apiKey string
}

func (e *cliEnv) settings() (settings, error) {
	if err := e.configErr(); err != nil {
		return settings{}, err
	}
	s := settings{apiURL: e.get("MESH_API_URL"), apiKey: e.get("MESH_API_KEY")}
	if s.apiURL == "" {
		s.apiURL = "http://127.0.0.1:8080"
	}
	if !strings.HasPrefix(s.apiURL, "http://") && !strings.HasPrefix(s.apiURL, "https://") {
		return s, fmt.Errorf("MESH_API_URL must start with http:// or https:// (got %q)", s.apiURL)
	}
	if s.apiKey == "" {
		return s, errors.New("MESH_API_KEY is not set: export this agent's API key (shown once when the agent was created) or store it with meshd init")
	}
	return s, nil
}

func (e *cliEnv) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if v := e.get("MESH_LOG_LEVEL"); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return nil, fmt.Errorf("MESH_LOG_LEVEL must be debug, info, warn or error (got %q)", v)
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f := e.get("MESH_LOG_FORMAT"); f {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("MESH_LOG_FORMAT must be text or json (got %q)", f)
	}
}

func (e *cliEnv) stateDir() (string, error) {
	if d := e.get("MESH_STATE_DIR"); d != "" {
		return d, nil
	}
	if d := e.getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "meshd"), nil
	}
	home := e.getenv("HOME")
	if home == "" {
		return "", errors.New("MESH_STATE_DIR is not set and there is no HOME to default to ~/.local/state/meshd")
	}
	return filepath.Join(home, ".local", "state", "meshd"), nil
}

// daemonSettings is what the long-running commands (run, mcp) need: the
// API settings, the logger and the state directory.
func (e *cliEnv) daemonSettings(logTo io.Writer) (settings, *slog.Logger, string, error) {
	s, err := e.settings()
	if err != nil {
		return s, nil, "", err
	}
	log, err := e.logger(logTo)
	if err != nil {
		return s, nil, "", err
	}
	dir, err := e.stateDir()
	return s, log, dir, err
}

// daemonClient is the API client of a long-running command. Calls give up
// after 15 s: the daemon's own loops (which retry forever) then log an
// outage promptly instead of after minutes, and an MCP tool call fails
// within seconds so the model can tell its user instead of hanging. The
// first failed attempt of an outage is logged at once, naming
// MESH_API_URL.
func daemonClient(s settings, log *slog.Logger, product string) *meshclient.Client {
	return meshclient.New(s.apiURL, s.apiKey, meshclient.WithLogger(log), meshclient.WithUserAgent(product+"/"+buildVersion()),
		meshclient.WithRetry(meshclient.RetryPolicy{Base: 200 * time.Millisecond, Max: 5 * time.Second, MaxElapsed: 15 * time.Second}),
		meshclient.WithRetryNotify(func(n meshclient.RetryNotice) {
			if n.Unreachable && n.Attempt == 1 {
				log.Warn("the mesh API does not answer; retrying (check MESH_API_URL)", "MESH_API_URL", s.apiURL, "err", n.Err)
			}
		}))
}

// cliAttemptTimeout bounds one attempt of a CLI call: an address that
// swallows packets costs seconds per visible retry, not half a minute.
const cliAttemptTimeout = 10 * time.Second

// client is the API client of a one-shot command. It tells the user on
// stderr, within 2 s of an outage, which MESH_API_URL does not answer, then
// counts the retries.
func (e *cliEnv) client(s settings) (*meshclient.Client, func()) {
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(e.stderr, format+"\n", args...)
	}
	// An address that accepts nothing and refuses nothing gives no error to
	// report: after 1.5 s without an answer, say what is being waited for.
	waiting := time.AfterFunc(1500*time.Millisecond, func() {
		say("meshd: waiting for the mesh API at MESH_API_URL=%s (no answer yet)", s.apiURL)
	})
	c := meshclient.New(s.apiURL, s.apiKey, meshclient.WithLogger(log), meshclient.WithUserAgent("meshd/"+buildVersion()),
		meshclient.WithRetry(meshclient.RetryPolicy{Base: 500 * time.Millisecond, Max: 5 * time.Second, MaxElapsed: callTimeout, AttemptTimeout: cliAttemptTimeout}),
		meshclient.WithRetryNotify(func(n meshclient.RetryNotice) {
			waiting.Stop()
			what := "is unreachable"
			if !n.Unreachable {
				what = "answered with an error"
			}
			if n.Attempt == 1 {
				say("meshd: the mesh API at MESH_API_URL=%s %s (%s); retrying for up to %s (Ctrl-C to stop)", s.apiURL, what, firstLine(n.Err), callTimeout)
				return
			}
			say("meshd: retry %d: %s", n.Attempt, firstLine(n.Err))
		}))
	return c, func() { waiting.Stop() }
}

func firstLine(err error) string {
	return strings.TrimPrefix(strings.SplitN(err.Error(), "\n", 2)[0], "meshclient: ")
}

// callTimeout bounds one CLI call, retries included.
const callTimeout = 30 * time.Second
