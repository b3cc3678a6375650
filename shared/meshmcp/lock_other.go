//go:build !unix

package meshmcp

// lockCursor is a no-op where flock is unavailable; the in-process mutex
// still serializes one server's acknowledgements.
func lockCursor(dir, agentID string) (func(), error) { return func() {}, nil }
