//go:build unix

package meshd

import (
	"os/exec"
	"syscall"
)

// killGroup runs cmd in its own process group and makes cancellation kill
// the whole group, so `sh -c "a | b"` leaves no orphan behind.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
