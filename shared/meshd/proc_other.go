//go:build !unix

package meshd

import "os/exec"

// killGroup kills the direct child where process groups are unavailable.
func killGroup(cmd *exec.Cmd) func() error {
	return func() error {
		if cmd.Process == nil {
			return nil
		}
		return cmd.Process.Kill()
	}
}
