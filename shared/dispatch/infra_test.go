package dispatch_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/testenv"
)

// privateService is a MariaDB or Kafka instance of this test's own, started
// with the infra/ scripts in a state directory of its own on free ports, so
// the test can stop or kill it without touching the shared services.
type privateService struct {
	t      testing.TB
	script string
	env    []string
	state  string
	port   int
}

// startPrivate runs "<script> up" for a private instance. When the script
// cannot start it, the test fails under CI and is skipped elsewhere.
func startPrivate(t testing.TB, name string, env func(state string, port, port2 int) []string) *privateService {
	t.Helper()
	infra, err := filepath.Abs("../../infra")
	if err != nil {
		t.Fatal(err)
	}
	// A short path: a MariaDB socket path must stay under 108 bytes.
	state, err := os.MkdirTemp("", "mesh-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	p := &privateService{t: t, script: filepath.Join(infra, name+".sh"), state: state, port: freePort(t)}
	p.env = append(os.Environ(), env(state, p.port, freePort(t))...)
	t.Cleanup(func() {
		p.run("down")
		_ = os.RemoveAll(state)
	})
	if out, err := p.run("up"); err != nil {
		msg := fmt.Sprintf("a private %s (infra/%s.sh up) could not start: %v\n%s%s", name, name, err, out, logTails(state))
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

func (p *privateService) run(cmd string) (string, error) {
	c := exec.Command(p.script, cmd)
	c.Env = p.env
	out, err := c.CombinedOutput()
	return string(out), err
}

// must runs cmd and fails the test if it fails.
func (p *privateService) must(cmd string) {
	p.t.Helper()
	if out, err := p.run(cmd); err != nil {
		p.t.Fatalf("%s %s: %v\n%s", filepath.Base(p.script), cmd, err, out)
	}
}

// kill SIGKILLs the process named by the instance's pid file.
func (p *privateService) kill(pidFile string) {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.state, pidFile))
	if err != nil {
		p.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		p.t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	// Wait until it is gone, so "up" starts a new one.
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; {
		if time.Now().After(deadline) {
			p.t.Fatalf("pid %d still alive 10 s after SIGKILL", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// signal sends sig to the process named by the instance's pid file.
func (p *privateService) signal(pidFile string, sig syscall.Signal) {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.state, pidFile))
	if err != nil {
		p.t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, sig); err != nil {
		p.t.Fatal(err)
	}
	// Wait until the process is in the state the signal puts it in.
	stopped := sig == syscall.SIGSTOP
	if !waitUntil(5*time.Second, func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// Field 3 of /proc/PID/stat is the state; T is stopped.
		f := strings.Fields(string(st))
		return err == nil && len(f) > 2 && (f[2] == "T") == stopped
	}) {
		p.t.Fatalf("pid %d did not take %v", pid, sig)
	}
}

func (p *privateService) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// privateMariaDB starts a MariaDB of the test's own (infra/mariadb.sh).
func privateMariaDB(t testing.TB) *privateService {
	return startPrivate(t, "mariadb", func(state string, port, _ int) []string {
		return []string{"MESH_STATE_DIR=" + state, "MESH_MARIADB_PORT=" + strconv.Itoa(port)}
	})
}

// privateKafka starts a Kafka broker of the test's own (infra/kafka.sh),
// reusing the shared instance's resolved jars when they are there.
func privateKafka(t testing.TB) *privateService {
	return startPrivate(t, "kafka", func(state string, port, controller int) []string {
		if lib, err := filepath.Abs("../../.local/kafka/lib"); err == nil {
			if _, err := os.Stat(filepath.Join(lib, ".mesh-kafka-stamp")); err == nil {
				_ = os.MkdirAll(filepath.Join(state, "kafka"), 0o755)
				_ = os.Symlink(lib, filepath.Join(state, "kafka", "lib"))
			}
		}
		return []string{"MESH_STATE_DIR=" + state, "MESH_KAFKA_PORT=" + strconv.Itoa(port), "MESH_KAFKA_CONTROLLER_PORT=" + strconv.Itoa(controller)}
	})
}

// freePort is a port for a private service: testenv.FreePort.
func freePort(t testing.TB) int { return testenv.FreePort(t) }

// logTails is the end of every log a private service left in state, for
// the failure message: the directory is removed when the test ends.
func logTails(state string) string {
	var b strings.Builder
	_ = filepath.WalkDir(state, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".log") || strings.HasSuffix(path, ".out") || strings.HasSuffix(path, ".err")) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "--- last lines of %s:\n%s\n", path, strings.Join(lines, "\n"))
		return nil
	})
	return b.String()
}

// waitUntil polls cond every 20 ms until it holds or timeout passes.
func waitUntil(timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
