package pushaws

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/agentmesh/agentmesh/shared/push"
)

// RelayRequest is the PushRelayFunction's input: messages to post, in
// order per connection, then connections to close.
type RelayRequest struct {
	Posts  []RelayPost `json:"posts,omitempty"`
	Closes []string    `json:"closes,omitempty"`
}

// RelayPost is one message for one connection; Data travels as base64.
type RelayPost struct {
	ConnectionID string `json:"connection_id"`
	Data         []byte `json:"data"`
}

// RelayResponse is the PushRelayFunction's output: the connections that
// answered 410.
type RelayResponse struct {
	Gone []string `json:"gone"`
}

// Bounds of one relay invocation.
const (
	// MaxInvokePayload is Lambda's limit on a synchronous invocation's
	// request (6 MB); LambdaRelay splits larger batches.
	MaxInvokePayload = 6 << 20
	// MaxRelayPosts bounds the messages of one request.
	MaxRelayPosts = 2000
	// MaxRelayCloses bounds the connections one request closes.
	MaxRelayCloses = 1000
	// MaxAsyncCloses bounds the connections of one asynchronous bye and
	// close: with ids of at most push.MaxIDLength bytes its request stays
	// far under Lambda's limit on an asynchronous invocation's payload
	// (256 KB).
	MaxAsyncCloses = 250
	// DefaultInvokeTimeout bounds one synchronous invocation of the relay
	// function. It is longer than the function's own timeout (10 s in
	// template.yaml), so the caller never gives up on a relay that is still
	// posting, and shorter than push.DefaultSenderTimeout, so the Sender's
	// round never does either.
	DefaultInvokeTimeout = 12 * time.Second
)

// LambdaRelay reaches the @connections API through the PushRelayFunction,
// which runs outside the VPC: the functions in the VPC have no route to a
// public API, but reach Lambda's own API through its interface endpoint.
// A request larger than Lambda's payload limit is split, and the parts are
// sent one after the other so each connection's order holds.
type LambdaRelay struct {
	Client        *lambda.Client
	Function      string // name or ARN of the PushRelayFunction
	Log           *slog.Logger
	InvokeTimeout time.Duration // per invocation (default DefaultInvokeTimeout)
}

var (
	_ push.Relay     = (*LambdaRelay)(nil)
	_ push.ByeCloser = (*LambdaRelay)(nil)
)

// Post relays msgs; see push.Relay. A part that fails is dropped (its
// messages are in the inbox) and the next part still goes; the error joins
// the failures.
func (r *LambdaRelay) Post(ctx context.Context, msgs []push.Message) ([]string, error) {
	var gone []string
	var errs []error
	for _, part := range splitPosts(msgs, MaxInvokePayload, MaxRelayPosts) {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		resp, err := r.invoke(ctx, RelayRequest{Posts: part})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		gone = append(gone, resp.Gone...)
	}
	return gone, errors.Join(errs...)
}

// Close relays the closes, MaxRelayCloses per invocation.
func (r *LambdaRelay) Close(ctx context.Context, connectionIDs []string) error {
	var errs []error
	ids := push.UniqueIDs(connectionIDs)
	for len(ids) > 0 {
		n := min(len(ids), MaxRelayCloses)
		if _, err := r.invoke(ctx, RelayRequest{Closes: ids[:n]}); err != nil {
			errs = append(errs, err)
		}
		ids = ids[n:]
	}
	return errors.Join(errs...)
}

// ByeAndClose hands the byes and closes to the relay function in
// asynchronous invocations (InvocationType Event), MaxAsyncCloses
// connections each: Lambda accepts them at once and runs them (the byes,
// then the closes) without the caller, which is a request with a short
// budget. Lambda retries a failed run; the janitor is the backstop.
func (r *LambdaRelay) ByeAndClose(ctx context.Context, connectionIDs []string, bye []byte) error {
	var errs []error
	ids := push.UniqueIDs(connectionIDs)
	for len(ids) > 0 {
		n := min(len(ids), MaxAsyncCloses)
		req := RelayRequest{Closes: ids[:n], Posts: make([]RelayPost, n)}
		for i, id := range ids[:n] {
			req.Posts[i] = RelayPost{ConnectionID: id, Data: bye}
		}
		if err := r.invokeAsync(ctx, req); err != nil {
			errs = append(errs, err)
		}
		ids = ids[n:]
	}
	return errors.Join(errs...)
}

func (r *LambdaRelay) invokeAsync(ctx context.Context, req RelayRequest) error {
	payload, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, r.invokeTimeout())
	defer cancel()
	if _, err := r.Client.Invoke(ictx, &lambda.InvokeInput{
		FunctionName:   aws.String(r.Function),
		InvocationType: types.InvocationTypeEvent,
		Payload:        payload,
	}); err != nil {
		return fmt.Errorf("pushaws: invoking %s asynchronously: %w", r.Function, err)
	}
	return nil
}

func (r *LambdaRelay) invokeTimeout() time.Duration {
	if r.InvokeTimeout <= 0 {
		return DefaultInvokeTimeout
	}
	return r.InvokeTimeout
}

func (r *LambdaRelay) invoke(ctx context.Context, req RelayRequest) (RelayResponse, error) {
	payload, err := json.Marshal(req)
	if err != nil {
		return RelayResponse{}, err
	}
	ictx, cancel := context.WithTimeout(ctx, r.invokeTimeout())
	defer cancel()
	out, err := r.Client.Invoke(ictx, &lambda.InvokeInput{
		FunctionName:   aws.String(r.Function),
		InvocationType: types.InvocationTypeRequestResponse,
		Payload:        payload,
	})
	if err != nil {
		return RelayResponse{}, fmt.Errorf("pushaws: invoking %s: %w", r.Function, err)
	}
	if out.FunctionError != nil {
		// The payload is the function's error object: its message, never
		// pushed data.
		return RelayResponse{}, fmt.Errorf("pushaws: %s failed (%s): %.300s", r.Function, *out.FunctionError, out.Payload)
	}
	var resp RelayResponse
	if err := json.Unmarshal(out.Payload, &resp); err != nil {
		return RelayResponse{}, fmt.Errorf("pushaws: %s answered no relay response: %w", r.Function, err)
	}
	return resp, nil
}

// Encoded sizes of a request, for splitting: {"posts":[ ... ]} and, per
// post, {"connection_id":<id>,"data":"<base64>"} plus its comma.
const (
	requestOverhead = len(`{"posts":[]}`)
	postOverhead    = len(`{"connection_id":,"data":""},`)
)

// splitPosts cuts msgs, in order, into parts whose request encodes to at
// most maxBytes and holds at most maxPosts messages.
func splitPosts(msgs []push.Message, maxBytes, maxPosts int) [][]RelayPost {
	var parts [][]RelayPost
	var cur []RelayPost
	size := requestOverhead
	for _, m := range msgs {
		id, _ := json.Marshal(m.ConnectionID)
		n := postOverhead + len(id) + base64.StdEncoding.EncodedLen(len(m.Data))
		if len(cur) > 0 && (size+n > maxBytes || len(cur) == maxPosts) {
			parts, cur, size = append(parts, cur), nil, requestOverhead
		}
		cur = append(cur, RelayPost{ConnectionID: m.ConnectionID, Data: m.Data})
		size += n
	}
	if len(cur) > 0 {
		parts = append(parts, cur)
	}
	return parts
}

// RelayHandler is the PushRelayFunction's Lambda handler: it checks the
// request as a whole (counts, ids, sizes) and refuses it untouched when any
// part is out of bounds, then posts through relay and closes.
func RelayHandler(relay push.Relay) func(ctx context.Context, req RelayRequest) (RelayResponse, error) {
	return func(ctx context.Context, req RelayRequest) (RelayResponse, error) {
		if err := req.Validate(); err != nil {
			return RelayResponse{}, err
		}
		resp := RelayResponse{Gone: []string{}}
		if len(req.Posts) > 0 {
			msgs := make([]push.Message, len(req.Posts))
			for i, p := range req.Posts {
				msgs[i] = push.Message{ConnectionID: p.ConnectionID, Data: p.Data}
			}
			gone, err := relay.Post(ctx, msgs)
			if err != nil {
				return RelayResponse{}, fmt.Errorf("push relay: posting: %w", err)
			}
			resp.Gone = append(resp.Gone, gone...)
		}
		if len(req.Closes) > 0 {
			if err := relay.Close(ctx, req.Closes); err != nil {
				return RelayResponse{}, fmt.Errorf("push relay: closing: %w", err)
			}
		}
		return resp, nil
	}
}

// Validate checks a relay request against the bounds RelayHandler serves.
func (req RelayRequest) Validate() error {
	if len(req.Posts) > MaxRelayPosts {
		return fmt.Errorf("push relay: %d posts in one request, at most %d", len(req.Posts), MaxRelayPosts)
	}
	if len(req.Closes) > MaxRelayCloses {
		return fmt.Errorf("push relay: %d closes in one request, at most %d", len(req.Closes), MaxRelayCloses)
	}
	for i, p := range req.Posts {
		if !validConnectionID(p.ConnectionID) {
			return fmt.Errorf("push relay: posts[%d]: connection_id must be 1 to %d printable ASCII characters", i, push.MaxIDLength)
		}
		if len(p.Data) == 0 || len(p.Data) > push.MaxMessageBytes {
			return fmt.Errorf("push relay: posts[%d]: data is %d bytes, must be 1 to %d", i, len(p.Data), push.MaxMessageBytes)
		}
	}
	for i, c := range req.Closes {
		if !validConnectionID(c) {
			return fmt.Errorf("push relay: closes[%d]: connection_id must be 1 to %d printable ASCII characters", i, push.MaxIDLength)
		}
	}
	return nil
}

// validConnectionID reports whether id can be an API Gateway connection
// id (a short base64 string): 1 to push.MaxIDLength printable ASCII
// characters without spaces.
func validConnectionID(id string) bool {
	if id == "" || len(id) > push.MaxIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}
