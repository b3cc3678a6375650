//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// detach makes cmd its own session, so the terminal's Ctrl-C and hangup
// do not reach the background daemon.
func detach(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} }
