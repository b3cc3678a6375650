package apigwlocal

import "sync"

// Invocations counts function invocations by logical ID, whatever invoked
// them (an HTTP route, a WebSocket route, a schedule): what a Lambda bill
// counts, and what the idle-cost bench watches.
type Invocations struct {
	mu sync.Mutex
	n  map[string]int64
}

// NewInvocations returns an empty count.
func NewInvocations() *Invocations { return &Invocations{n: map[string]int64{}} }

// Add counts one invocation of function.
func (c *Invocations) Add(function string) {
	c.mu.Lock()
	c.n[function]++
	c.mu.Unlock()
}

// Snapshot returns a copy of the counts so far.
func (c *Invocations) Snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// Total is the sum of every function's count.
func (c *Invocations) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t int64
	for _, v := range c.n {
		t += v
	}
	return t
}
