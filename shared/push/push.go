// Package push is the push delivery channel's domain: which WebSocket
// connections an agent has open (at most MaxConnsPerAgent, each at most
// MaxConnAge old), authenticated with the agent's mesh token at $connect,
// and the relay that posts the dispatcher's records to them through the API
// Gateway @connections management API.
//
// Kafka stays the log and MySQL the truth: a push is a courtesy copy of a
// record already published. A push that fails is dropped (the host covers
// the gap from GET /v1/inbox), never retried in a way that could block,
// reorder or dead-letter anything.
//
// The package is free of transport: pushws adapts it to the Lambda events
// of the WebSocket API's routes; the relays (management API, Lambda) live
// beside it.
package push

import (
	"context"
	"time"
)

// Limits of API Gateway WebSocket APIs the channel is built around.
const (
	// MaxConnsPerAgent is how many live connections one agent may hold; a
	// newer connection closes the oldest.
	MaxConnsPerAgent = 2
	// MaxConnAge is API Gateway's hard limit on a connection's life.
	MaxConnAge = 2 * time.Hour
	// IdleTimeout is API Gateway's idle limit; meshd pings well inside it.
	IdleTimeout = 10 * time.Minute
	// MaxMessageBytes is the largest message API Gateway carries; a record
	// over it is pushed as a Nudge.
	MaxMessageBytes = 128 << 10
	// MaxFrameBytes is the largest WebSocket frame API Gateway accepts.
	MaxFrameBytes = 32 << 10
)

// Message is one post to one connection.
type Message struct {
	ConnectionID string
	Data         []byte
}

// Relay reaches the @connections management API of the WebSocket API: on
// AWS either directly (a function outside the VPC) or through a function
// that is (the VPC has no route to a public API); locally, meshlocal's
// emulation of it.
type Relay interface {
	// Post sends each message to its connection, in slice order per
	// connection. It returns the connections that are gone (410); any
	// other failure of one message is logged and dropped, never retried.
	Post(ctx context.Context, msgs []Message) (gone []string, err error)
	// Close ends connections (DeleteConnection); one already gone is not
	// an error.
	Close(ctx context.Context, connectionIDs []string) error
}
