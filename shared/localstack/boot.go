package localstack

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

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/metrics"
)

// Defaults of the local mesh.
const (
	DefaultHTTPAddr  = "127.0.0.1:8080"
	DefaultKfakePort = 39192
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

// Run boots the local mesh, serves until ctx is done and shuts down what it
// started. A returned error is one line saying what failed and what to do.
func Run(ctx context.Context, o Options) (err error) {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	out := o.Out
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	bootStart := time.Now()

	root, err := FindRepoRoot(o.Dir)
	if err != nil {
		return err
	}
	state := o.Getenv("MESH_STATE_DIR")
	if state == "" {
		state = filepath.Join(root, ".local")
	}
	localDir := filepath.Join(state, "meshlocal")
	if err := os.MkdirAll(localDir, 0o700); err != nil {
		return fmt.Errorf("cannot create %s: %v", localDir, err)
	}
	log, logPath, logW, closeLog, err := newLogger(localDir, o.Getenv("MESH_LOG"), o.Stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	// Libraries that log through slog.Default or emit CloudWatch metrics
	// (EMF lines, stdout in Lambda) write to the log too, keeping the
	// terminal for progress and credentials.
	prevLog := slog.Default()
	slog.SetDefault(log)
	defer slog.SetDefault(prevLog)
	metrics.Default.W = logW
	defer func() { metrics.Default.W = nil }()

	// Cleanups run in reverse order at the end, each saying what it stopped.
	var cleanups []func()
	defer func() {
		if len(cleanups) > 0 {
			say("shutting down…")
		}
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()

	secretsPath := filepath.Join(localDir, "secrets.json")
	secrets, err := LoadSecrets(secretsPath, o.Getenv)
	if err != nil {
		return err
	}
	overlay := map[string]string{
		"MESH_ADMIN_KEY":        secrets.AdminKey,
		"MESH_JWT_KEYS":         secrets.JWTKeys,
		"MESH_INBOX_MASTER_KEY": secrets.InboxMasterKey,
	}
	getenv := func(k string) string {
		if v, ok := overlay[k]; ok {
			return v
		}
		return o.Getenv(k)
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}

	say("Agent Mesh local stack — repo %s, logs %s", root, logPath)

	// [1/6] MariaDB.
	if dsn := o.Getenv("MYSQL_DSN"); dsn != "" {
		say("[1/6] MariaDB: using MYSQL_DSN (%s)", redactDSN(dsn))
	} else {
		say("[1/6] MariaDB: starting private instance (infra/mariadb.sh up)…")
		script := filepath.Join(root, "infra", "mariadb.sh")
		_, statusErr := runScript(ctx, script, "status")
		wasRunning := statusErr == nil
		upOut, err := runScript(ctx, script, "up")
		if err != nil {
			return fmt.Errorf("MariaDB did not start: %s", lastLine(upOut, err))
		}
		say("      %s", lastLine(upOut, nil))
		dsnOut, err := runScript(ctx, script, "dsn")
		if err != nil {
			return fmt.Errorf("infra/mariadb.sh dsn failed: %s", lastLine(dsnOut, err))
		}
		overlay["MYSQL_DSN"] = strings.TrimSpace(dsnOut)
		if wasRunning {
			cleanups = append(cleanups, func() {
				say("  MariaDB left running: it was already up (shared with the tests); stop it with infra/mariadb.sh down")
			})
		} else {
			cleanups = append(cleanups, func() {
				// ctx is done by now; stopping must still run.
				if out, err := runScript(context.Background(), script, "down"); err != nil {
					say("  MariaDB: stop failed: %s", lastLine(out, err))
					return
				}
				say("  MariaDB stopped (meshlocal started it; its data stays in %s)", filepath.Join(state, "mariadb"))
			})
		}
	}

	// [2/6] Kafka.
	if brokers := o.Getenv("KAFKA_BROKERS"); brokers != "" {
		say("[2/6] Kafka: using KAFKA_BROKERS (%s); creating topic %s if missing…", brokers, cfg.KafkaTopic)
		if err := ensureTopic(ctx, cfg); err != nil {
			return fmt.Errorf("kafka at %s: %v; start it (infra/kafka.sh up) or unset KAFKA_BROKERS to use the embedded broker", brokers, err)
		}
	} else {
		port := DefaultKfakePort
		if v := o.Getenv("MESH_KFAKE_PORT"); v != "" {
			if port, err = strconv.Atoi(v); err != nil || port < 0 || port > 65535 {
				return fmt.Errorf("MESH_KFAKE_PORT=%q is not a port number", v)
			}
		}
		cluster, err := kfake.NewCluster(kfake.Ports(port), kfake.SeedTopics(int32(cfg.KafkaPartitions), cfg.KafkaTopic))
		if err != nil {
			return fmt.Errorf("embedded Kafka cannot listen on 127.0.0.1:%d (%v); set MESH_KFAKE_PORT to a free port (0 picks one)", port, err)
		}
		cleanups = append(cleanups, func() { cluster.Close(); say("  embedded Kafka (kfake) stopped") })
		overlay["KAFKA_BROKERS"] = strings.Join(cluster.ListenAddrs(), ",")
		overlay["KAFKA_AUTH"] = kafka.AuthNone
		say("[2/6] Kafka: embedded kfake on %s (topic %s, %d partitions)", overlay["KAFKA_BROKERS"], cfg.KafkaTopic, cfg.KafkaPartitions)
	}
	if cfg, err = config.Load(getenv); err != nil {
		return err
	}

	// [3/6] Migrations.
	say("[3/6] migrations…")
	env, err := app.New(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("database: %v; check MYSQL_DSN or run infra/mariadb.sh status", err)
	}
	cleanups = append(cleanups, func() { env.DB.Close(); say("  database pool closed") })
	applied, err := env.DB.Migrate(ctx)
	if err != nil {
		return fmt.Errorf("migrations failed: %v", err)
	}
	if len(applied) == 0 {
		say("      schema up to date")
	} else {
		say("      applied %s", joinInts(applied))
	}

	// [4/6] Routes and schedules.
	tpl, err := LoadTemplate(filepath.Join(root, "template.yaml"))
	if err != nil {
		return err
	}
	disp, err := dispatch.NewKafkaDispatcher(ctx, env.DB, cfg, log)
	if err != nil {
		return fmt.Errorf("dispatcher: %v", err)
	}
	if kp, ok := disp.Publisher.(dispatch.KafkaPublisher); ok {
		cleanups = append(cleanups, func() { kp.Client.Close() })
	}
	reg, err := NewRegistry(env, Deps{Dispatcher: disp})
	if err != nil {
		return err
	}
	if err := tpl.Check(reg); err != nil && !o.Partial {
		return fmt.Errorf("%v (run with -partial to serve the rest anyway)", err)
	}
	addr := o.Getenv("MESH_HTTP_ADDR")
	if addr == "" {
		addr = DefaultHTTPAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s (%v); stop whatever uses it or set MESH_HTTP_ADDR=127.0.0.1:8081", addr, err)
	}
	baseURL := "http://" + ln.Addr().String()
	stack := &Stack{Template: tpl, Registry: reg, Log: log, Partial: o.Partial}
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- stack.Serve(serveCtx, ln) }()
	cleanups = append(cleanups, func() {
		stopServing()
		if err := <-served; err != nil {
			say("  HTTP server: %v", err)
		}
		say("  HTTP server and schedules stopped")
	})
	routes, schedules := 0, []string{}
	for _, f := range tpl.Functions {
		routes += len(f.Routes)
		for _, s := range f.Schedules {
			if reg.Jobs[f.LogicalID] != nil {
				schedules = append(schedules, fmt.Sprintf("%s %s", strings.TrimSuffix(f.LogicalID, "Function"), s.Expr))
			}
		}
	}
	say("[4/6] serving template.yaml routes on %s (%d routes of %d functions)", baseURL, routes, len(reg.HTTP))
	if err := waitHealthy(ctx, baseURL, served); err != nil {
		return err
	}
	say("      GET /v1/health → 200, %.1f s after start", time.Since(bootStart).Seconds())
	say("      schedules (fired now, then at their rate): %s", strings.Join(schedules, ", "))
	if missing := tpl.Check(reg); missing != nil {
		say("      PARTIAL: %v", missing)
	}

	// [5/6] and [6/6] Demo.
	var creds *demoCreds
	if o.Demo {
		demo := &demo{base: baseURL, adminKey: secrets.AdminKey, say: say, stateDir: localDir, log: log}
		creds, err = demo.agents(ctx)
		if err != nil {
			say("[5/6] demo agents: FAILED: %v", err)
		} else if err := demo.exchange(ctx, creds, &cleanups); err != nil {
			say("[6/6] demo exchange: FAILED: %v", err)
		}
	} else {
		say("[5/6] demo agents: skipped (-demo=false)")
		say("[6/6] demo exchange: skipped")
	}

	printQuickstart(out, baseURL, secrets, creds, secretsPath)
	if o.Ready != nil {
		o.Ready(baseURL)
	}
	say("meshlocal is up. Ctrl-C stops it.")

	select {
	case <-ctx.Done():
		say("")
	case err := <-served:
		served <- err // for the cleanup
		return fmt.Errorf("the HTTP server stopped: %v", err)
	}
	return nil
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
// through it: they are printed to the terminal only.
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
