// Package pushtest provides a recording push.Relay for tests of the push
// channel's server side.
package pushtest

import (
	"context"
	"slices"
	"sync"

	"github.com/agentmesh/agentmesh/shared/push"
)

// Relay records every Post and Close. Connections listed in Gone answer
// 410 to a post. It is safe for concurrent use.
type Relay struct {
	mu     sync.Mutex
	posts  []push.Message
	closed []string
	gone   map[string]bool
}

// NewRelay returns an empty recording relay.
func NewRelay() *Relay { return &Relay{gone: map[string]bool{}} }

// SetGone makes posts to connectionIDs report them gone.
func (r *Relay) SetGone(connectionIDs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range connectionIDs {
		r.gone[id] = true
	}
}

// Post implements push.Relay.
func (r *Relay) Post(_ context.Context, msgs []push.Message) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gone []string
	for _, m := range msgs {
		if r.gone[m.ConnectionID] {
			gone = append(gone, m.ConnectionID)
			continue
		}
		r.posts = append(r.posts, push.Message{ConnectionID: m.ConnectionID, Data: slices.Clone(m.Data)})
	}
	return gone, nil
}

// Close implements push.Relay.
func (r *Relay) Close(_ context.Context, connectionIDs []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = append(r.closed, connectionIDs...)
	return nil
}

// Posts returns the messages posted so far, in order.
func (r *Relay) Posts() []push.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.posts)
}

// PostsTo returns the payloads posted to connectionID, as strings.
func (r *Relay) PostsTo(connectionID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.posts {
		if m.ConnectionID == connectionID {
			out = append(out, string(m.Data))
		}
	}
	return out
}

// Closed returns the connections closed so far, in order.
func (r *Relay) Closed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.closed)
}

// Reset forgets what was recorded (not the gone set).
func (r *Relay) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.posts, r.closed = nil, nil
}
