//go:build unix

package meshd_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/shared/meshd"
)

// unixClient dials the control socket at path.
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
}

func TestTheControlChannelRefusesAnUnknownCallerBeforeReadingItsBody(t *testing.T) {
	ctl := meshd.NewHandlerControl(nil, t.TempDir(), "bob", nil)
	defer ctl.Close()
	path, err := ctl.Listen()
	if err != nil {
		t.Fatal(err)
	}
	// Not JSON at all: a server that decoded first would answer 400.
	req, _ := http.NewRequest(http.MethodPost, "http://meshd/v1/reply", strings.NewReader("{{{ not json"))
	req.Header.Set("Authorization", "Bearer guessed")
	resp, err := unixClient(path).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401 before the body is read", resp.StatusCode)
	}
}

func TestClosingLeavesASocketThatIsNotOurs(t *testing.T) {
	ctl := meshd.NewHandlerControl(nil, t.TempDir(), "bob", nil)
	path, err := ctl.Listen()
	if err != nil {
		t.Fatal(err)
	}
	// Another meshd took the state lock after this one and made its own
	// socket at the same path.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	theirs, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	if err := ctl.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("Close removed the other meshd's socket: %v", err)
	}
}

func TestListenSaysWhenTheStateDirCannotHoldTheSocket(t *testing.T) {
	dir := t.TempDir()
	// A non-empty directory where the socket belongs.
	if err := os.MkdirAll(filepath.Join(dir, "bob.handler.sock", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctl := meshd.NewHandlerControl(nil, dir, "bob", nil)
	defer ctl.Close()
	if _, err := ctl.Listen(); err == nil || !strings.Contains(err.Error(), "handler control socket") {
		t.Fatalf("Listen = %v, want an error naming the handler control socket", err)
	}
}
