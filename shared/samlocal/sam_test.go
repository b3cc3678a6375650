package samlocal_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/localstack"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/samlocal"
	"github.com/agentmesh/agentmesh/shared/samtemplate"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// Bounds of the tier: one sam build, a start-api that serves every request,
// and the invokes.
const (
	buildTimeout  = 10 * time.Minute
	apiStartLimit = 2 * time.Minute
	invokeTimeout = 2 * time.Minute
	// dispatcherTimeout replaces the dispatcher's 90 s in the tier's
	// template: a run drains until its deadline's margins, so it ends in
	// about a second instead of 62.
	dispatcherTimeout = 15
)

// TestSAMTier runs the functions as the SAM CLI does (sam build, then
// sam local start-api and sam local invoke on Podman), against a private
// database of the tests' MariaDB and a broker the containers reach.
func TestSAMTier(t *testing.T) {
	if os.Getenv("MESH_SAM_TIER") == "" {
		t.Skip("the SAM tier runs from infra/sam-test.sh (make test's SAM step), which starts Podman")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	pod := podmanStatus(t, root)
	sam := os.Getenv("MESH_SAM")
	if sam == "" {
		sam = filepath.Join(root, ".local", "venv", "bin", "sam")
	}
	if _, err := os.Stat(sam); err != nil {
		missing(t, "the SAM CLI", err)
	}
	start := time.Now()
	dir := t.TempDir()

	t.Run("a second infra/podman.sh up changes nothing", func(t *testing.T) {
		pidFile := filepath.Join(root, ".local", "podman", "service.pid")
		if d := os.Getenv("MESH_STATE_DIR"); d != "" {
			pidFile = filepath.Join(d, "podman", "service.pid")
		}
		before, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatalf("the engine is up but has no pid file: %v", err)
		}
		out, err := exec.Command(filepath.Join(root, "infra", "podman.sh"), "up").CombinedOutput()
		if err != nil {
			t.Fatalf("infra/podman.sh up: %v\n%s", err, out)
		}
		after, _ := os.ReadFile(pidFile)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "podman: up: ") || !bytes.Equal(before, after) {
			t.Fatalf("a second up did something (service pid %s -> %s):\n%s", before, after, out)
		}
	})

	// The database: a fresh one, reached from the bridge through a forwarder
	// (MariaDB still sees 127.0.0.1, as its grant wants).
	_, dsn := mysqltest.New(t)
	dbCfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	hostIP := pod["MESH_PODMAN_HOST_IP"]
	fwd := forward(t, hostIP, dbCfg.Addr)
	dbCfg.Addr = net.JoinHostPort("host.containers.internal", fwd)
	// The broker: kfake listening on the bridge, so the address it
	// advertises is one the containers reach.
	const topic, partitions = "inbox.events", 12
	cluster, err := kfake.NewCluster(kfake.SeedTopics(partitions, topic),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(hostIP, "0"))
		}))
	if err != nil {
		t.Fatalf("kfake on %s: %v", hostIP, err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()

	secrets, err := localstack.LoadSecrets(filepath.Join(dir, "secrets.json"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	vars, err := samlocal.Vars(secrets, dbCfg.FormatDSN(), strings.Join(brokers, ","))
	if err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(dir, "env.json")
	b, err := samlocal.EnvFile(vars)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(envFile, b, 0o600); err != nil {
		t.Fatal(err)
	}

	tpl := tierTemplate(t, root, pod["MESH_SAM_ARCH"], dir)
	samEnv := cleanEnv(pod["DOCKER_HOST"], dir)
	buildDir := filepath.Join(dir, "build")
	run(t, root, samEnv, buildTimeout, sam, "build", "--config-file", filepath.Join(root, "samconfig.toml"),
		"--template-file", tpl, "--build-dir", buildDir)
	t.Logf("sam build: %s", time.Since(start).Round(time.Second))
	built := filepath.Join(buildDir, "template.yaml")

	t.Run("start-api serves the walking skeleton and a read route of each kind", func(t *testing.T) {
		url := startAPI(t, root, samEnv, sam, built, envFile)
		walkingSkeleton(t, url, secrets.AdminKey)
		t.Logf("start-api: %s", time.Since(start).Round(time.Second))
	})

	t.Run("every scheduled function answers its sample event", func(t *testing.T) {
		fns, err := samtemplate.Load(filepath.Join(root, "template.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, fn := range fns.Functions {
			if len(fn.Schedules) == 0 {
				continue
			}
			n++
			t.Run(fn.LogicalID, func(t *testing.T) {
				event := filepath.Join(root, "events", fn.Dir+".json")
				var out, logs string
				for attempt := 1; ; attempt++ {
					out, logs = run(t, root, samEnv, invokeTimeout, sam, "local", "invoke", "--config-file", filepath.Join(root, "samconfig.toml"),
						"--template-file", built, "--env-vars", envFile, "--skip-pull-image", "--event", event, fn.LogicalID)
					// SAM streams the container's log from a thread and,
					// once the answer is in, waits at most one second for
					// it (samcli/local/docker/container.py, wait_for_result):
					// on a loaded machine the log ends early or is empty
					// (seen: the run's first line, then nothing; and, under
					// stress-ng, no line of the container at all, answer
					// null). A log without the emulator's END line is cut
					// short, not a verdict: the run is invoked again (a
					// scheduled run may run twice), at most four more times.
					if attempt < 5 && !strings.Contains(logs, "END RequestId") {
						t.Logf("%s: SAM's log stopped before the run's END line (attempt %d); invoking it again", fn.LogicalID, attempt)
						continue
					}
					break
				}
				// sam local invoke exits 0 even when the function's init
				// fails: the answer and the function's own log decide.
				if strings.TrimSpace(out) != "null" || strings.Contains(logs, "errorMessage") {
					t.Fatalf("%s answered %q, want null (a scheduled run that succeeded); log:\n%s", fn.LogicalID, out, logs)
				}
				if want := fmt.Sprintf(`"msg":"scheduled run","job":%q`, fn.LogicalID); !strings.Contains(logs, want) {
					t.Fatalf("%s logged no %s; log:\n%s", fn.LogicalID, want, logs)
				}
			})
		}
		if n < 5 {
			t.Fatalf("only %d scheduled functions in template.yaml: the template was not read", n)
		}
	})

	t.Run("the dispatcher published the skeleton's events to the broker", func(t *testing.T) {
		// bob's message and alice's reply, sealed: nothing in clear.
		recs := kafkatest.ReadTopic(t, brokers, topic, 2, 20*time.Second)
		if len(recs) != 2 {
			t.Fatalf("%d records on %s, want 2 (the message and its reply)", len(recs), topic)
		}
		for _, r := range recs {
			if bytes.Contains(r.Value, []byte("hello from the SAM tier")) {
				t.Errorf("a record carries the message in clear")
			}
		}
	})
	t.Logf("the SAM tier took %s", time.Since(start).Round(time.Second))
}

// walkingSkeleton: token → send → inbox → reply, then reads of each kind:
// public, an agent's own, by path parameter, by query, and an account's
// (session cookie).
func walkingSkeleton(t *testing.T, url, adminKey string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	call := func(method, path, auth string, in any, want int) (*http.Response, []byte) {
		t.Helper()
		var body io.Reader
		if in != nil {
			b, _ := json.Marshal(in)
			body = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, url+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(auth, "mesh_session=") {
			req.Header.Set("Cookie", auth)
		} else if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		if in != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %s %s, want %d", method, path, resp.Status, raw, want)
		}
		return resp, raw
	}

	_, raw := call("GET", "/v1/health", "", nil, 200)
	if !bytes.Contains(raw, []byte(`"status":"ok"`)) {
		t.Fatalf("GET /v1/health answered %s", raw)
	}
	keys := map[string]string{}
	for _, id := range []string{"alice", "bob"} {
		var out struct {
			APIKey string `json:"api_key"`
		}
		_, raw := call("POST", "/v1/admin/agents", adminKey, map[string]string{"agent_id": id, "name": id}, 201)
		if err := json.Unmarshal(raw, &out); err != nil || out.APIKey == "" {
			t.Fatalf("creating %s answered %s", id, raw)
		}
		keys[id] = out.APIKey
	}
	call("POST", "/v1/admin/friendships", adminKey, map[string]string{"a": "alice", "b": "bob"}, 201)

	alice, bob := meshclient.New(url, keys["alice"]), meshclient.New(url, keys["bob"])
	if _, err := alice.Token(ctx); err != nil {
		t.Fatalf("alice's token: %v", err)
	}
	sent, err := alice.Send(ctx, meshclient.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: "text", Text: "hello from the SAM tier"}}})
	if err != nil {
		t.Fatalf("alice's send: %v", err)
	}
	page, err := bob.Inbox(ctx, 0, 10, 0)
	if err != nil {
		t.Fatalf("bob's inbox: %v", err)
	}
	if len(page.Events) != 1 || page.Events[0].Type != mesh.EventMessage || page.Events[0].From != "alice" ||
		page.Events[0].MessageID != sent.MessageID || page.Events[0].TaskID != sent.TaskID {
		t.Fatalf("bob's inbox holds %+v, want alice's message %s", page.Events, sent.MessageID)
	}
	reply, err := bob.Reply(ctx, sent.TaskID, meshclient.ReplyRequest{Parts: []mesh.Part{{Kind: "text", Text: "hello back"}}})
	if err != nil {
		t.Fatalf("bob's reply: %v", err)
	}
	page, err = alice.Inbox(ctx, 0, 10, 0)
	if err != nil {
		t.Fatalf("alice's inbox: %v", err)
	}
	if len(page.Events) != 1 || page.Events[0].From != "bob" || page.Events[0].MessageID != reply.MessageID {
		t.Fatalf("alice's inbox holds %+v, want bob's reply %s", page.Events, reply.MessageID)
	}

	// Reads: the agent's own (no parameter), by path parameter, by query.
	me, err := alice.Me(ctx)
	if err != nil || me.AgentID != "alice" {
		t.Fatalf("GET /v1/agents/me: %+v, %v", me, err)
	}
	task, err := bob.GetTask(ctx, sent.TaskID)
	if err != nil || task.TaskID != sent.TaskID || task.Initiator != "alice" || task.Recipient != "bob" {
		t.Fatalf("GET /v1/tasks/{id}: %+v, %v", task.Task, err)
	}
	tasks, err := alice.ListTasks(ctx, meshclient.TaskQuery{Role: "initiator"})
	if err != nil || len(tasks.Tasks) != 1 || tasks.Tasks[0].TaskID != sent.TaskID {
		t.Fatalf("GET /v1/tasks?role=initiator: %+v, %v", tasks, err)
	}
	// An account's read, with the session cookie of a sign-in.
	pw := "correct horse battery"
	call("POST", "/v1/admin/accounts", adminKey, map[string]any{"email": "ada@example.org", "password": pw, "name": "Ada"}, 201)
	resp, _ := call("POST", "/v1/account/session", "", map[string]string{"email": "ada@example.org", "password": pw}, 200)
	session := ""
	for _, c := range resp.Cookies() {
		if c.Name == "mesh_session" {
			session = c.Value
		}
	}
	if session == "" {
		t.Fatalf("sign-in set no mesh_session cookie: %v", resp.Header)
	}
	_, raw = call("GET", "/v1/account/agents", "mesh_session="+session, nil, 200)
	if !bytes.Contains(raw, []byte(`"agents"`)) {
		t.Fatalf("GET /v1/account/agents answered %s", raw)
	}
}

// startAPI runs sam local start-api on a free port until the test ends and
// returns its URL once it listens.
func startAPI(t *testing.T, root string, env []string, sam, tpl, envFile string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cmd := exec.Command(sam, "local", "start-api", "--config-file", filepath.Join(root, "samconfig.toml"),
		"--template-file", tpl, "--env-vars", envFile, "--skip-pull-image", "--warm-containers", "LAZY",
		"--host", "127.0.0.1", "--port", port)
	cmd.Dir, cmd.Env = root, env
	var logs syncBuffer
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			if strings.Contains(sc.Text(), "Running on http://127.0.0.1:"+port) {
				once.Do(func() { close(ready) })
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		// SIGINT: start-api stops its warm containers before it exits.
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("sam local start-api:\n%s", logs.String())
		}
	})
	select {
	case <-ready:
	case err := <-exited:
		t.Fatalf("sam local start-api exited: %v\n%s", err, logs.String())
	case <-time.After(apiStartLimit):
		t.Fatalf("sam local start-api did not listen within %s:\n%s", apiStartLimit, logs.String())
	}
	return "http://127.0.0.1:" + port
}

// tierTemplate writes template.yaml as the tier builds it: the code at
// root, the host's architecture (the containers run it natively) and a
// short dispatcher timeout.
func tierTemplate(t *testing.T, root, arch, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := samlocal.LocalTemplate(raw, root, arch, map[string]int{"DispatcherFunction": dispatcherTimeout})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "template.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// cleanEnv is SAM's environment: no AWS credentials (with fake ones SAM
// spends seconds per invoke retrying STS), and none of the mesh's
// variables (SAM gives a function the shell's value of a declared variable;
// only the --env-vars file may set them).
func cleanEnv(dockerHost, dir string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "MESH_") || strings.HasPrefix(k, "KAFKA_") ||
			k == "MYSQL_DSN" || k == "DOCKER_HOST" || k == "GOARCH" || k == "LAMBDA_ARCH" {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "DOCKER_HOST="+dockerHost, "SAM_CLI_TELEMETRY=0", "AWS_DEFAULT_REGION=us-east-1",
		"AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "no-credentials"), "AWS_CONFIG_FILE="+filepath.Join(dir, "no-config"))
}

// run runs a SAM command to its end within limit; it returns its stdout
// (the function's answer, for invoke) and stderr (the function's log).
func run(t *testing.T, root string, env []string, limit time.Duration, name string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = root, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sam %s: %v\n%s%s", strings.Join(args[:2], " "), err, stdout.String(), tail(stderr.String(), 60))
	}
	return stdout.String(), stderr.String()
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// podmanStatus reads infra/podman.sh status: DOCKER_HOST, the host's
// address on the containers' bridge, the architecture of the base image.
func podmanStatus(t *testing.T, root string) map[string]string {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "infra", "podman.sh"), "status").CombinedOutput()
	if err != nil {
		missing(t, "Podman (infra/podman.sh up)", fmt.Errorf("%v: %s", err, out))
	}
	st := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			st[k] = v
		}
	}
	for _, k := range []string{"DOCKER_HOST", "MESH_PODMAN_HOST_IP", "MESH_SAM_ARCH"} {
		if st[k] == "" {
			t.Fatalf("infra/podman.sh status printed no %s:\n%s", k, out)
		}
	}
	if want := map[string]string{"amd64": "x86_64", "arm64": "arm64"}[runtime.GOARCH]; st["MESH_SAM_ARCH"] != want {
		t.Fatalf("the base image is for %s, the host runs %s", st["MESH_SAM_ARCH"], want)
	}
	return st
}

// missing fails under CI (the tier must run there) and skips elsewhere.
func missing(t *testing.T, what string, err error) {
	t.Helper()
	if testenv.InCI() {
		t.Fatalf("%s is required under CI: %v", what, err)
	}
	t.Skipf("%s unavailable: %v", what, err)
}

// forward relays connections to hostIP:<port> (the returned port) to
// target until the test ends.
func forward(t *testing.T, hostIP, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(hostIP, "0"))
	if err != nil {
		t.Fatalf("listen on the containers' bridge %s: %v", hostIP, err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	// A container's pool may keep its connections open: the end of the test
	// closes them too.
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				d, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					return
				}
				track(d)
				defer d.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(d, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, d); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
