//go:build !linux

package meshd

// HideProcess does nothing off Linux. Other systems may still show a
// process's environment to its own user (macOS: ps -E), so there a handler
// that must not learn the key needs another user than meshd's.
func HideProcess() error { return nil }
