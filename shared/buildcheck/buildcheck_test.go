package buildcheck_test

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

const module = "github.com/agentmesh/agentmesh"

// kafkaLinkers are the only functions that may link the Kafka client: the
// dispatcher publishes the outbox, migrate creates the inbox topic.
var kafkaLinkers = map[string]bool{"dispatcher": true, "migrate": true}

// forbidden are import path prefixes no function binary may link: the SQL
// grammar test's parser, the template parser of the local stack, the embedded
// Kafka broker and test helpers.
var forbidden = []string{
	"vitess.io/",
	"github.com/awslabs/goformation",
	"github.com/twmb/franz-go/pkg/kfake",
	"testing",
	module + "/shared/testenv",
	module + "/shared/mysql/mysqltest",
	module + "/shared/kafka/kafkatest",
	module + "/shared/localstack",
	module + "/shared/apigwlocal",
	module + "/shared/samtemplate",
}

// The Lambda build of the Makefile (build and build-%).
var lambdaEnv = []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64"}

var lambdaFlags = []string{"-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w"}

func TestEachFunctionLinksOnlyWhatItUses(t *testing.T) {
	root := moduleRoot(t)
	deps := functionDeps(t, root)
	for _, fn := range functionDirs(t, root) {
		t.Run(fn, func(t *testing.T) {
			d, ok := deps[fn]
			if !ok {
				t.Fatalf("go list did not report functions/%s", fn)
			}
			kafka := false
			for _, p := range d {
				if strings.HasPrefix(p, "github.com/twmb/franz-go/") {
					kafka = true
				}
				for _, f := range forbidden {
					if p == f || strings.HasPrefix(p, f+"/") || strings.HasSuffix(f, "/") && strings.HasPrefix(p, f) {
						t.Errorf("functions/%s links %s", fn, p)
					}
				}
			}
			switch {
			case kafka && !kafkaLinkers[fn]:
				t.Errorf("functions/%s links the Kafka client (github.com/twmb/franz-go); only %v may. Import chain: %s",
					fn, keys(kafkaLinkers), importChain(t, root, fn, "github.com/twmb/franz-go/pkg/kgo"))
			case !kafka && kafkaLinkers[fn]:
				// The positive control: the listing does see the Kafka client.
				t.Errorf("functions/%s does not link the Kafka client it needs; is the dependency listing empty?", fn)
			}
		})
	}
}

func TestEveryFunctionBuildsAsAnArm64LambdaBootstrap(t *testing.T) {
	root := moduleRoot(t)
	fns := functionDirs(t, root)
	out := t.TempDir()
	start := time.Now()
	// One go build for all: the packages they share compile once, and the
	// links run in parallel.
	args := append([]string{"build"}, lambdaFlags...)
	args = append(args, "-o", out+string(filepath.Separator), "./functions/...")
	cmd := exec.Command(goCommand(t), args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), lambdaEnv...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	took := time.Since(start)

	var total, largest int64
	for _, fn := range fns {
		t.Run(fn, func(t *testing.T) {
			path := filepath.Join(out, fn)
			f, err := elf.Open(path)
			if err != nil {
				t.Fatalf("no Lambda binary for functions/%s: %v", fn, err)
			}
			defer f.Close()
			if f.Machine != elf.EM_AARCH64 {
				t.Errorf("machine %v, want arm64 (Lambda arm64)", f.Machine)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("dynamically linked; provided.al2023 wants a static binary (CGO_ENABLED=0)")
				}
			}
			if f.Section(".symtab") != nil {
				t.Errorf("has a symbol table; -ldflags=-s strips it")
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(data, []byte(root)) {
				t.Errorf("contains the build directory %s; -trimpath removes it", root)
			}
			total += int64(len(data))
			largest = max(largest, int64(len(data)))
		})
	}
	t.Logf("built %d functions for linux/arm64 in %v: %.0f MiB in all, the largest %.1f MiB",
		len(fns), took.Round(time.Millisecond), float64(total)/(1<<20), float64(largest)/(1<<20))
}

func TestTheHealthBootstrapAnswersUnderTheLambdaEmulator(t *testing.T) {
	root := moduleRoot(t)
	_, dsn := mysqltest.New(t)
	tests := []struct {
		name string
		dsn  string
		ok   bool
	}{
		{"with its database the function answers 200 ok", dsn, true},
		{"with a wrong database password the invocation fails and says why", strings.Replace(dsn, "mesh:mesh@", "mesh:wrong@", 1), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(tc.dsn, "@") {
				t.Fatalf("unexpected DSN shape %q", tc.dsn)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			start := time.Now()
			cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "infra", "rie.sh"), "functions/health", "events/health.json")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "MYSQL_DSN="+tc.dsn, "GO="+goCommand(t))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			t.Logf("infra/rie.sh took %v", time.Since(start).Round(time.Millisecond))
			if !tc.ok {
				if err == nil {
					t.Fatalf("infra/rie.sh succeeded with a wrong password:\n%s", stdout.String())
				}
				if !strings.Contains(stderr.String(), "Access denied") || !strings.Contains(stderr.String(), "the function failed") {
					t.Fatalf("the failure does not say why:\n%s", stderr.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("infra/rie.sh: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			var resp events.APIGatewayV2HTTPResponse
			if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &resp); err != nil {
				t.Fatalf("the response is not an API Gateway v2 response: %v\n%s", err, stdout.String())
			}
			var body map[string]string
			if resp.StatusCode != 200 || json.Unmarshal([]byte(resp.Body), &body) != nil || body["status"] != "ok" {
				t.Fatalf("got %d %q, want 200 {\"status\":\"ok\"}", resp.StatusCode, resp.Body)
			}
			if ct := resp.Headers["Content-Type"]; ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
		})
	}
}

// functionDirs lists functions/*: each is one Lambda function.
func functionDirs(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "functions"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		t.Fatal("no functions under functions/")
	}
	return out
}

// functionDeps maps each function to every package its Lambda build links,
// from one go list run with the deploy platform and tags.
func functionDeps(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command(goCommand(t), "list", "-tags", "lambda.norpc", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./functions/...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), lambdaEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	out := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			out[strings.TrimPrefix(f[0], module+"/functions/")] = f[1:]
		}
	}
	return out
}

// importChain names the packages through which function fn reaches target,
// so a failure says which import to move.
func importChain(t *testing.T, root, fn, target string) string {
	t.Helper()
	cmd := exec.Command(goCommand(t), "list", "-tags", "lambda.norpc", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./functions/"+fn)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), lambdaEnv...)
	b, err := cmd.Output()
	if err != nil {
		return "(go list failed)"
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	// Breadth-first from the function to target.
	start := module + "/functions/" + fn
	prev := map[string]string{start: ""}
	queue := []string{start}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == target {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append([]string{strings.TrimPrefix(p, module+"/")}, chain...)
			}
			return strings.Join(chain, " -> ")
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return "(not found)"
}

// goCommand is the go command of the toolchain running the tests.
func goCommand(t *testing.T) string {
	t.Helper()
	if p := filepath.Join(build.Default.GOROOT, "bin", "go"); fileExists(p) {
		return p
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command: %v", err)
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for !fileExists(filepath.Join(dir, "go.mod")) {
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	return dir
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
