package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/apigwlocal"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/localstack"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

// Defaults of the local mesh.
const (
	DefaultHTTPAddr  = "127.0.0.1:8080"
	DefaultKfakePort = 29192
	topicRetention   = 7 * 24 * time.Hour
)

// Options configure Run.
type Options struct {
	// Dir is where to start looking for the repository root (go.mod).
	Dir string
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
	// Out is the terminal: progress, credentials and the quickstart go here
	// as plain text, never through the structured log.
	Out io.Writer
	// Stderr receives structured warnings and errors (JSON).
	Stderr io.Writer
	// Demo creates alice and bob and runs the demo exchange.
	Demo bool
	// Partial serves even when some template functions have no handler yet.
	Partial bool
	// Ready, if set, is called once the routes are served and the demo is done.
	Ready func(baseURL string)
}

func (o Options) withDefaults() Options {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	return o
}

// localMesh is one run of the local mesh: what Run has started so far and
// how to stop it.
type localMesh struct {
	o     Options
	start time.Time
	// root is the repository; localDir holds the log, secrets and demo state.
	root, stateDir, localDir string
	log                      *slog.Logger
	logPath                  string
	// metrics receives the CloudWatch EMF lines of handlers and jobs: the
	// log file, keeping the terminal for progress and credentials.
	metrics     *metrics.Sink
	secrets     localstack.Secrets
	secretsPath string
	// overlay holds the variables meshlocal sets itself (secrets, the
	// private MariaDB's DSN, the embedded broker); getenv reads it first.
	overlay map[string]string
	cfg     config.Config
	env     *app.Env
	tpl     *samtemplate.Template
	reg     apigwlocal.Registry
	baseURL string
	// served receives the HTTP server's end (the stack's Serve result).
	served chan error
	// cleanups run in reverse order at the end, each saying what it stopped.
	cleanups []func()
}

// Run boots the local mesh, serves until ctx is done and shuts down what it
// started. A returned error is one line saying what failed and what to do.
func Run(ctx context.Context, o Options) error {
	m, err := openLocalMesh(o.withDefaults())
	if err != nil {
		return err
	}
	defer m.close()
	if err := m.boot(ctx); err != nil {
		return err
	}
	return m.serveUntilDone(ctx)
}

// openLocalMesh finds the repository, creates the state directory, opens
// the log and loads the secrets and the configuration.
func openLocalMesh(o Options) (*localMesh, error) {
	m := &localMesh{o: o, start: time.Now(), overlay: map[string]string{}}
	root, err := samtemplate.FindRepoRoot(o.Dir)
	if err != nil {
		return nil, err
	}
	m.root = root
	m.stateDir = o.Getenv("MESH_STATE_DIR")
	if m.stateDir == "" {
		m.stateDir = filepath.Join(root, ".local")
	}
	m.localDir = filepath.Join(m.stateDir, "meshlocal")
	if err := os.MkdirAll(m.localDir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create %s: %v", m.localDir, err)
	}
	log, logPath, logW, closeLog, err := newLogger(m.localDir, o.Getenv("MESH_LOG"), o.Stderr)
	if err != nil {
		return nil, err
	}
	m.log, m.logPath = log, logPath
	m.metrics = &metrics.Sink{W: logW, Stack: o.Getenv("MESH_STACK_NAME")}
	m.cleanups = append(m.cleanups, closeLog)
	if err := m.loadConfig(); err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

// loadConfig loads (or generates and stores) the local secrets and the
// configuration they complete.
func (m *localMesh) loadConfig() error {
	m.secretsPath = filepath.Join(m.localDir, "secrets.json")
	secrets, err := localstack.LoadSecrets(m.secretsPath, m.o.Getenv)
	if err != nil {
		return err
	}
	m.secrets = secrets
	m.overlay["MESH_ADMIN_KEY"] = secrets.AdminKey
	m.overlay["MESH_JWT_KEYS"] = secrets.JWTKeys
	m.overlay["MESH_INBOX_MASTER_KEY"] = secrets.InboxMasterKey
	// The push channel is the template's WebSocket API, served on the HTTP
	// API's port like everything else (its stage is the path, as on AWS).
	addr := m.o.Getenv("MESH_HTTP_ADDR")
	if addr == "" {
		addr = DefaultHTTPAddr
	}
	if m.o.Getenv("MESH_PUSH_URL") == "" {
		m.overlay["MESH_PUSH_URL"] = apigwlocal.WebSocketURL("http://"+addr, pushStage)
	}
	if m.o.Getenv("MESH_PUSH_ENDPOINT") == "" {
		m.overlay["MESH_PUSH_ENDPOINT"] = apigwlocal.ManagementEndpoint("http://"+addr, pushStage)
	}
	m.announceBaseURL("http://" + addr)
	m.cfg, err = config.Load(m.getenv)
	return err
}

// announceBaseURL makes base the A2A gateway's base (its Function URL is
// served on the HTTP API's port) and the public API URL its cards link to,
// unless MESH_A2A_URL or MESH_PUBLIC_API_URL is set.
func (m *localMesh) announceBaseURL(base string) {
	if m.o.Getenv("MESH_A2A_URL") == "" {
		m.overlay["MESH_A2A_URL"] = base
	}
	if m.o.Getenv("MESH_PUBLIC_API_URL") == "" {
		m.overlay["MESH_PUBLIC_API_URL"] = base
	}
}

// pushStage is the StageName of the template's WebSocket API (PushStage).
const pushStage = "push"

// getenv is the environment the mesh runs with: meshlocal's own variables
// over the process's.
func (m *localMesh) getenv(k string) string {
	if v, ok := m.overlay[k]; ok {
		return v
	}
	return m.o.Getenv(k)
}

func (m *localMesh) say(format string, args ...any) {
	fmt.Fprintf(m.o.Out, format+"\n", args...)
}

// onClose adds a cleanup; cleanups run in reverse order.
func (m *localMesh) onClose(f func()) { m.cleanups = append(m.cleanups, f) }

// close runs the cleanups in reverse order. The first one closes the log,
// so it runs last and every other cleanup can still log.
func (m *localMesh) close() {
	if len(m.cleanups) > 1 {
		m.say("shutting down…")
	}
	for i := len(m.cleanups) - 1; i >= 0; i-- {
		m.cleanups[i]()
	}
	m.cleanups = nil
}

// boot runs the six steps of make run up to the quickstart.
func (m *localMesh) boot(ctx context.Context) error {
	m.say("Agent Mesh local stack — repo %s, logs %s", m.root, m.logPath)
	if err := m.startMariaDB(ctx); err != nil {
		return err
	}
	if err := m.startKafka(ctx); err != nil {
		return err
	}
	if err := m.migrate(ctx); err != nil {
		return err
	}
	if err := m.serve(ctx); err != nil {
		return err
	}
	creds := m.demo(ctx)
	printQuickstart(m.o.Out, m.baseURL, m.cfg.A2AURL, m.secrets, creds, m.secretsPath)
	return nil
}

// serveUntilDone tells the caller the mesh is up and waits for ctx or for
// the HTTP server to fail.
func (m *localMesh) serveUntilDone(ctx context.Context) error {
	if m.o.Ready != nil {
		m.o.Ready(m.baseURL)
	}
	m.say("meshlocal is up. Ctrl-C stops it.")
	select {
	case <-ctx.Done():
		m.say("")
		return nil
	case err := <-m.served:
		m.served <- err // for the cleanup
		return fmt.Errorf("the HTTP server stopped: %v", err)
	}
}

// startMariaDB is step 1: MYSQL_DSN, or the private instance of
// infra/mariadb.sh, stopped at the end only if this run started it.
func (m *localMesh) startMariaDB(ctx context.Context) error {
	if dsn := m.o.Getenv("MYSQL_DSN"); dsn != "" {
		m.say("[1/6] MariaDB: using MYSQL_DSN (%s)", redactDSN(dsn))
		return nil
	}
	m.say("[1/6] MariaDB: starting private instance (infra/mariadb.sh up)…")
	script := filepath.Join(m.root, "infra", "mariadb.sh")
	_, statusErr := runScript(ctx, script, "status")
	wasRunning := statusErr == nil
	upOut, err := runScript(ctx, script, "up")
	if err != nil {
		return fmt.Errorf("MariaDB did not start: %s", lastLine(upOut, err))
	}
	m.say("      %s", lastLine(upOut, nil))
	dsnOut, err := runScript(ctx, script, "dsn")
	if err != nil {
		return fmt.Errorf("infra/mariadb.sh dsn failed: %s", lastLine(dsnOut, err))
	}
	m.overlay["MYSQL_DSN"] = strings.TrimSpace(dsnOut)
	if wasRunning {
		m.onClose(func() {
			m.say("  MariaDB left running: it was already up (shared with the tests); stop it with infra/mariadb.sh down")
		})
		return nil
	}
	m.onClose(func() {
		// ctx is done by now; stopping must still run.
		if out, err := runScript(context.Background(), script, "down"); err != nil {
			m.say("  MariaDB: stop failed: %s", lastLine(out, err))
			return
		}
		m.say("  MariaDB stopped (meshlocal started it; its data stays in %s)", filepath.Join(m.stateDir, "mariadb"))
	})
	return nil
}

// startKafka is step 2: KAFKA_BROKERS (with the topic created if missing),
// or an embedded kfake broker. The configuration is reloaded afterwards,
// since steps 1 and 2 may have set its DSN and brokers.
func (m *localMesh) startKafka(ctx context.Context) error {
	if brokers := m.o.Getenv("KAFKA_BROKERS"); brokers != "" {
		m.say("[2/6] Kafka: using KAFKA_BROKERS (%s); creating topic %s if missing…", brokers, m.cfg.KafkaTopic)
		if err := ensureTopic(ctx, m.cfg); err != nil {
			return fmt.Errorf("kafka at %s: %v; start it (infra/kafka.sh up) or unset KAFKA_BROKERS to use the embedded broker", brokers, err)
		}
	} else if err := m.startKfake(); err != nil {
		return err
	}
	cfg, err := config.Load(m.getenv)
	if err != nil {
		return err
	}
	m.cfg = cfg
	return nil
}

func (m *localMesh) startKfake() error {
	port := DefaultKfakePort
	if v := m.o.Getenv("MESH_KFAKE_PORT"); v != "" {
		var err error
		if port, err = strconv.Atoi(v); err != nil || port < 0 || port > 65535 {
			return fmt.Errorf("MESH_KFAKE_PORT=%q is not a port number", v)
		}
	}
	cluster, err := kfake.NewCluster(kfake.Ports(port), kfake.SeedTopics(int32(m.cfg.KafkaPartitions), m.cfg.KafkaTopic))
	if err != nil {
		return fmt.Errorf("embedded Kafka cannot listen on 127.0.0.1:%d (%v); set MESH_KFAKE_PORT to a free port (0 picks one)", port, err)
	}
	m.onClose(func() { cluster.Close(); m.say("  embedded Kafka (kfake) stopped") })
	m.overlay["KAFKA_BROKERS"] = strings.Join(cluster.ListenAddrs(), ",")
	m.overlay["KAFKA_AUTH"] = kafka.AuthNone
	m.say("[2/6] Kafka: embedded kfake on %s (topic %s, %d partitions)", m.overlay["KAFKA_BROKERS"], m.cfg.KafkaTopic, m.cfg.KafkaPartitions)
	return nil
}

// migrate is step 3: the database pool and the embedded migrations.
func (m *localMesh) migrate(ctx context.Context) error {
	m.say("[3/6] migrations…")
	env, err := app.New(ctx, m.cfg, m.log)
	if err != nil {
		return fmt.Errorf("database: %v; check MYSQL_DSN or run infra/mariadb.sh status", err)
	}
	m.env = env
	m.onClose(func() { env.DB.Close(); m.say("  database pool closed") })
	localstack.SizeAPIPool(env.DB)
	applied, err := env.DB.Migrate(ctx)
	if err != nil {
		return fmt.Errorf("migrations failed: %v", err)
	}
	if len(applied) == 0 {
		m.say("      schema up to date")
	} else {
		m.say("      applied %s", joinInts(applied))
	}
	return nil
}

// serve is step 4: every route and schedule of template.yaml, served by the
// handlers and jobs of the registry, until the mesh closes.
func (m *localMesh) serve(ctx context.Context) error {
	addr := m.o.Getenv("MESH_HTTP_ADDR")
	if addr == "" {
		addr = DefaultHTTPAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s (%v); stop whatever uses it or set MESH_HTTP_ADDR=127.0.0.1:8081", addr, err)
	}
	m.baseURL = "http://" + ln.Addr().String()
	// The listener comes before the handlers: with port 0 only now is the
	// base URL the A2A cards announce known.
	m.announceBaseURL(m.baseURL)
	cfg, err := config.Load(m.getenv)
	if err != nil {
		ln.Close()
		return err
	}
	m.cfg.A2AURL, m.cfg.PublicAPIURL = cfg.A2AURL, cfg.PublicAPIURL
	m.env.Config.A2AURL, m.env.Config.PublicAPIURL = cfg.A2AURL, cfg.PublicAPIURL
	if err := m.buildRegistry(ctx); err != nil {
		ln.Close()
		return err
	}
	stack := &apigwlocal.Stack{Template: m.tpl, Registry: m.reg, Log: m.log, Partial: m.o.Partial}
	// The gateway ends connections at the age the mesh plans with (2 h, as
	// on AWS, unless MESH_PUSH_MAX_CONN_AGE simulates a shorter limit).
	stack.WebSocket.MaxConnAge = m.cfg.PushMaxConnAge
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	m.served = make(chan error, 1)
	go func() { m.served <- stack.Serve(serveCtx, ln) }()
	m.onClose(func() {
		stopServing()
		if err := <-m.served; err != nil {
			m.say("  HTTP server: %v", err)
		}
		m.say("  HTTP server and schedules stopped")
	})
	routes, schedules := m.routesAndSchedules()
	m.say("[4/6] serving template.yaml routes on %s (%d routes of %d functions)", m.baseURL, routes, len(m.reg.HTTP))
	if err := waitHealthy(ctx, m.baseURL, m.served); err != nil {
		return err
	}
	m.say("      GET /v1/health → 200, %.1f s after start", time.Since(m.start).Seconds())
	for _, f := range m.tpl.URLFunctions() {
		m.say("      Function URL of %s (streaming): %s%s…", f.LogicalID, m.baseURL, f.URL.LocalPath)
	}
	m.say("      schedules (fired now, then at their rate): %s", strings.Join(schedules, ", "))
	if missing := m.reg.Check(m.tpl); missing != nil {
		m.say("      PARTIAL: %v", missing)
	}
	return nil
}

// buildRegistry reads template.yaml and builds the handler and job of each
// of its functions, the dispatcher's included; without -partial, a function
// the registry cannot run is an error.
func (m *localMesh) buildRegistry(ctx context.Context) error {
	tpl, err := samtemplate.Load(filepath.Join(m.root, "template.yaml"))
	if err != nil {
		return err
	}
	m.tpl = tpl
	disp, closeDispatcher, err := localstack.NewDispatcher(ctx, m.cfg, m.log)
	if err != nil {
		return fmt.Errorf("dispatcher: %v", err)
	}
	m.onClose(closeDispatcher)
	disp.Metrics = m.metrics
	m.reg, err = localstack.NewRegistry(m.env, localstack.Deps{Dispatcher: disp, Metrics: m.metrics})
	if err != nil {
		return err
	}
	if err := m.reg.Check(tpl); err != nil && !m.o.Partial {
		return fmt.Errorf("%v (run with -partial to serve the rest anyway)", err)
	}
	return nil
}

// routesAndSchedules counts the template's routes and names the schedules
// that fire ("Dispatcher rate(1 minute)").
func (m *localMesh) routesAndSchedules() (routes int, schedules []string) {
	schedules = []string{}
	for _, f := range m.tpl.Functions {
		routes += len(f.Routes)
		for _, s := range f.Schedules {
			if m.reg.Jobs[f.LogicalID] != nil {
				schedules = append(schedules, fmt.Sprintf("%s %s", strings.TrimSuffix(f.LogicalID, "Function"), s.Expr))
			}
		}
	}
	return routes, schedules
}

// demo is steps 5 and 6: the demo agents and their exchange. A failed demo
// is reported and the mesh keeps serving; the credentials are nil when the
// agents could not be made.
func (m *localMesh) demo(ctx context.Context) *demoCreds {
	if !m.o.Demo {
		m.say("[5/6] demo agents: skipped (-demo=false)")
		m.say("[6/6] demo exchange: skipped")
		return nil
	}
	d := &demo{base: m.baseURL, adminKey: m.secrets.AdminKey, say: m.say, stateDir: m.localDir, log: m.log}
	creds, err := d.agents(ctx)
	if err != nil {
		m.say("[5/6] demo agents: FAILED: %v", err)
		return nil
	}
	if err := d.exchange(ctx, creds, &m.cleanups); err != nil {
		m.say("[6/6] demo exchange: FAILED: %v", err)
	}
	return creds
}

// waitHealthy polls GET /v1/health until it answers 200.
func waitHealthy(ctx context.Context, base string, served chan error) error {
	client := &http.Client{Timeout: 3 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		select {
		case err := <-served:
			served <- err
			return fmt.Errorf("the local stack did not start: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := client.Get(base + "/v1/health")
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("GET %s/v1/health did not answer 200 within 30 s (last: %s); see the log", base, last)
}

func ensureTopic(ctx context.Context, cfg config.Config) error {
	opts, err := kafka.Options{Brokers: cfg.KafkaBrokers, Auth: cfg.KafkaAuth}.ClientOpts(ctx)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = kafka.EnsureTopic(tctx, cl, kafka.TopicSpec{Name: cfg.KafkaTopic, Partitions: int32(cfg.KafkaPartitions), Retention: topicRetention})
	return err
}

// runScript runs an infra script and returns its combined output.
func runScript(ctx context.Context, script string, args ...string) (string, error) {
	if _, err := exec.LookPath("bash"); err != nil {
		return "", errors.New("bash not found: install bash")
	}
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// lastLine is the last non-empty line of a script's output: the scripts end
// with the one line that says what happened or what to do.
func lastLine(out string, err error) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	if err != nil {
		return err.Error()
	}
	return "(no output)"
}

// redactDSN shows user, address and database of a DSN, never its password.
func redactDSN(dsn string) string {
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "unparseable DSN"
	}
	return fmt.Sprintf("%s@%s/%s", c.User, c.Addr, c.DBName)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprintf("%04d", n)
	}
	return strings.Join(s, ", ")
}

// newLogger returns the structured logger: JSON lines into a file under the
// state directory, with warnings and errors also on stderr so they are seen.
// MESH_LOG=stderr sends everything to stderr instead. Credentials never go
// through it: they are printed to the terminal only. The writer it returns
// is where the metrics go too.
func newLogger(dir, mode string, stderr io.Writer) (*slog.Logger, string, io.Writer, func(), error) {
	if mode == "stderr" {
		return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})), "stderr", stderr, func() {}, nil
	}
	path := filepath.Join(dir, "meshlocal.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, "", nil, nil, fmt.Errorf("cannot open the log file: %v", err)
	}
	h := slog.NewMultiHandler(
		slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}),
		slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}),
	)
	return slog.New(h), path, f, func() { f.Close() }, nil
}
