//go:build !unix

package meshd

import "os/exec"

// killGroup keeps exec's default (kill the direct child) where process
// groups are unavailable.
func killGroup(cmd *exec.Cmd) {}
