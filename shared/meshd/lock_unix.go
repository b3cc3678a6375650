//go:build unix

package meshd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockState takes an exclusive lock on the agent's state so two meshd
// processes never consume for one agent from one state dir (each would run
// the handler for the same events). The OS drops the lock if the process dies.
func lockState(dir, agentID string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("meshd: state dir: %w", err)
	}
	path := filepath.Join(dir, agentID+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("meshd: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("meshd: another meshd is already running for agent %q with state dir %s", agentID, dir)
		}
		return nil, fmt.Errorf("meshd: lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
