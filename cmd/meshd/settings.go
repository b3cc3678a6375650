package main

import (
	"bufio"
	"bytes"
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
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/statedir"
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

// configErr is the config file's problem, if any: checked by every command
// that needs a setting, so a broken file is named instead of ignored.
func (e *cliEnv) configErr() error {
	e.once.Do(e.loadConfig)
	return e.confErr
}

// configHeader opens the file meshd init writes.
const configHeader = "# meshd configuration (meshd init), TOML. Environment variables MESH_<KEY> override these.\n"

// legacyConfigHeader opened the files meshd init wrote before the config
// file was TOML: their values are Go-quoted strings (\a, \v and \xHH
// escapes are not TOML), so such a file is read the legacy way.
const legacyConfigHeader = "# meshd configuration (meshd init). Environment variables MESH_<KEY> override these."

// maxConfig bounds how much of the config file is read.
const maxConfig = 1 << 20

// readConfig reads the config file, TOML with top-level `key = value`
// settings (key api_url is the setting MESH_API_URL). A file in the older
// `key = "Go-quoted value"` form, as earlier meshd init wrote it or a person
// wrote by hand, still loads.
func readConfig(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfig))
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if strings.HasPrefix(string(data), legacyConfigHeader) {
		return readLegacyConfig(path, data)
	}
	var raw map[string]any
	if _, terr := toml.Decode(string(data), &raw); terr != nil {
		if conf, lerr := readLegacyConfig(path, data); lerr == nil {
			return conf, nil
		}
		return nil, fmt.Errorf("config file %s: %w", path, terr)
	}
	conf := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case int64, float64, bool:
			s = fmt.Sprint(v) // attempts = 3 means "3", as the environment would say
		default:
			return nil, fmt.Errorf("config file %s: %s must be a string, number or boolean, not a table or array", path, k)
		}
		if !validConfigKey(k) {
			return nil, fmt.Errorf("config file %s: key %q is not a setting name (letters, digits, _)", path, k)
		}
		conf["MESH_"+strings.ToUpper(k)] = s
	}
	return conf, nil
}

// validConfigKey: a key that becomes MESH_<KEY>.
func validConfigKey(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// readLegacyConfig reads the pre-TOML form: `key = "value"` lines with Go
// escapes (or an unquoted value taken as it is), '#' comments.
func readLegacyConfig(path string, data []byte) (map[string]string, error) {
	conf := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		} else if strings.HasPrefix(v, `"`) {
			ok = false // a broken quoted value, not an unquoted one
		}
		if !ok || k == "" || strings.ContainsAny(k, " \t\"") {
			return nil, fmt.Errorf("config file %s line %d: want key = \"value\"", path, n)
		}
		conf["MESH_"+strings.ToUpper(k)] = v
	}
	return conf, sc.Err()
}

// writeConfig writes the settings (key -> value, keys like api_url, in the
// order of keys) to path as TOML, atomically and with mode 0600 from the
// first byte: the file holds the API key.
func writeConfig(path string, keys []string, values map[string]string) error {
	var b bytes.Buffer
	b.WriteString(configHeader)
	for _, k := range keys {
		v := values[k]
		if v == "" {
			continue
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("config file %s: the value of %s is not valid UTF-8, which TOML cannot hold", path, k)
		}
		// One key at a time keeps the caller's order; the library quotes.
		line, err := toml.Marshal(map[string]string{k: v})
		if err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		b.Write(line)
	}
	if err := statedir.Make(filepath.Dir(path)); err != nil {
		return err
	}
	return statedir.WriteFile(path, b.Bytes(), 0o600)
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
