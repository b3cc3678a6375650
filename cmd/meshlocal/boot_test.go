package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// runMesh runs Run until the demo is done, checks GET /v1/health and stops
// it as Ctrl-C would. It returns the terminal output and stderr.
func runMesh(t *testing.T, env map[string]string) (out, stderr string) {
	t.Helper()
	var o, e testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		done <- Run(ctx, Options{
			Dir: ".", Getenv: func(k string) string { return env[k] }, Out: &o, Stderr: &e, Demo: true,
			Ready: func(base string) { ready <- base },
		})
	}()
	select {
	case base := <-ready:
		resp, err := http.Get(base + "/v1/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET /v1/health = %d", resp.StatusCode)
		}
	case err := <-done:
		t.Fatalf("Run returned before it was ready: %v\n%s\n%s", err, o.String(), e.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("not ready after 2 minutes:\n%s", o.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not stop within 30 s of the cancel:\n%s", o.String())
	}
	return o.String(), e.String()
}

var (
	apiKeyRe   = regexp.MustCompile(`amk_[A-Za-z0-9_-]+`)
	adminKeyRe = regexp.MustCompile(`amadm_[A-Za-z0-9_-]+`)
	demoPwRe   = regexp.MustCompile(`demo-[0-9a-f]{20}`)
)

// The whole local mesh, in-process: a real database, the embedded Kafka
// broker, every route, the demo agents and the demo exchange through meshd;
// then a restart on the same database and state.
func TestRunBootsTheMeshRunsTheDemoAndRestartsIdempotently(t *testing.T) {
	if testing.Short() {
		t.Skip("boots the whole local mesh")
	}
	_, dsn := mysqltest.New(t)
	state := t.TempDir()
	env := map[string]string{
		"MYSQL_DSN": dsn, "MESH_HTTP_ADDR": "127.0.0.1:0", "MESH_KFAKE_PORT": "0", "MESH_STATE_DIR": state,
	}

	out, stderr := runMesh(t, env)
	for _, want := range []string{
		"[1/6] MariaDB: using MYSQL_DSN",
		"[2/6] Kafka: embedded kfake on 127.0.0.1:",
		"[3/6] migrations…",
		"[4/6] serving template.yaml routes on http://127.0.0.1:",
		"GET /v1/health → 200",
		"Function URL of A2aFunction (streaming): http://127.0.0.1:",
		"card      http://127.0.0.1:",
		"[5/6] demo agents: alice created, bob created; alice and bob are friends",
		"bob's meshd    ← seq 1 from alice",
		"bob's handler  → POST /v1/tasks/",
		"alice's meshd  ← seq 1 from bob",
		"exchange complete",
		"admin key      amadm_",
		"alice API key  amk_",
		"console        http://127.0.0.1:",
		"(sign in as demo@localhost, password demo-",
		"meshlocal is up. Ctrl-C stops it.",
		"demo meshd of alice and bob stopped",
		"HTTP server and schedules stopped",
		"embedded Kafka (kfake) stopped",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal output lacks %q", want)
		}
	}
	if strings.Contains(out, "FAILED") || strings.Contains(out, "PARTIAL") {
		t.Errorf("terminal output reports a failure")
	}
	if strings.Contains(out, "127.0.0.1:0/") {
		t.Error("the terminal shows a URL of port 0, not the port listened on")
	}
	if strings.Contains(out, dsn) {
		t.Error("the terminal shows the DSN with its password")
	}

	t.Run("credentials reach the terminal only, never the structured log", func(t *testing.T) {
		secrets := append(apiKeyRe.FindAllString(out, -1), adminKeyRe.FindAllString(out, -1)...)
		secrets = append(secrets, demoPwRe.FindAllString(out, -1)...)
		if len(secrets) < 3 {
			t.Fatalf("found %d credentials in the terminal output, want the admin key and two API keys", len(secrets))
		}
		logData, err := os.ReadFile(filepath.Join(state, "meshlocal", "meshlocal.log"))
		if err != nil {
			t.Fatal(err)
		}
		if len(logData) == 0 {
			t.Fatal("the structured log is empty")
		}
		for _, s := range secrets {
			if bytes.Contains(logData, []byte(s)) || strings.Contains(stderr, s) {
				t.Errorf("credential %.12s… leaked into the log", s)
			}
		}
	})
	t.Run("generated secrets are stored readable by the owner only", func(t *testing.T) {
		fi, err := os.Stat(filepath.Join(state, "meshlocal", "secrets.json"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("secrets.json mode %v, want 0600", fi.Mode().Perm())
		}
	})

	// A restart keeps the admin key and the agents' stored keys and runs
	// the exchange again (their inboxes continue at seq 2).
	out2, _ := runMesh(t, env)
	for _, want := range []string{
		"[5/6] demo agents: alice existed (API key kept), bob existed (API key kept)",
		"bob's meshd    ← seq 2 from alice",
		"alice's meshd  ← seq 2 from bob",
		"schema up to date",
	} {
		if !strings.Contains(out2, want) {
			t.Errorf("restart output lacks %q", want)
		}
	}
	if a, b := adminKeyRe.FindString(out), adminKeyRe.FindString(out2); a == "" || a != b {
		t.Errorf("the admin key changed across restarts")
	}
	if a, b := demoPwRe.FindString(out), demoPwRe.FindString(out2); a == "" || a != b {
		t.Errorf("the demo account's password changed across restarts (%q, %q)", a, b)
	}
	if a, b := apiKeyRe.FindString(out), apiKeyRe.FindString(out2); a == "" || a != b {
		t.Errorf("alice's API key changed across restarts")
	}
}

func TestRunFailsWithOneLineSayingWhatToDo(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, dsn := mysqltest.New(t)
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"an unreachable database names MYSQL_DSN",
			map[string]string{"MYSQL_DSN": "mesh:mesh@tcp(127.0.0.1:1)/mesh", "MESH_KFAKE_PORT": "0"},
			"check MYSQL_DSN"},
		{"a busy HTTP port names MESH_HTTP_ADDR",
			map[string]string{"MYSQL_DSN": dsn, "MESH_KFAKE_PORT": "0", "MESH_HTTP_ADDR": busy.Addr().String()},
			"set MESH_HTTP_ADDR"},
		{"a busy Kafka port names MESH_KFAKE_PORT",
			map[string]string{"MYSQL_DSN": dsn, "MESH_KFAKE_PORT": portOf(busy)},
			"set MESH_KFAKE_PORT"},
		{"a malformed secret names its variable",
			map[string]string{"MYSQL_DSN": dsn, "MESH_INBOX_MASTER_KEY": "short"},
			"MESH_INBOX_MASTER_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.env["MESH_STATE_DIR"] = t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out bytes.Buffer
			err := Run(ctx, Options{Dir: ".", Getenv: func(k string) string { return tt.env[k] }, Out: &out, Stderr: &bytes.Buffer{}})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Run = %v, want an error containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("the error spans several lines: %q", err)
			}
		})
	}
}

func portOf(ln net.Listener) string {
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}
