//go:build unix

package meshd

import (
	"os/exec"
	"syscall"
)

// killGroup runs cmd in its own process group and returns what kills the
// whole group once cmd started, so `sh -c "a | b"` leaves no orphan behind.
func killGroup(cmd *exec.Cmd) func() error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
