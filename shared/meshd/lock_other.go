//go:build !unix

package meshd

// lockState is a no-op where flock is unavailable; run one meshd per agent.
func lockState(dir, agentID string) (func(), error) { return func() {}, nil }
