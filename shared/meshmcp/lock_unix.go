//go:build unix

package meshmcp

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockCursor takes the exclusive lock of agentID's cursor, waiting for
// another process that holds it (it only does so for one read-modify-write).
// The OS drops the lock if the process dies.
func lockCursor(dir, agentID string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("meshmcp: state dir: %w", err)
	}
	path := filepath.Join(dir, agentID+".mcp.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("meshmcp: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("meshmcp: lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
