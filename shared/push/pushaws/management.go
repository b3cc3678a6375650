// Package pushaws holds the push channel's relays that speak AWS APIs: the
// API Gateway @connections management API (ManagementRelay), and the
// PushRelayFunction reached with Lambda Invoke (LambdaRelay) for the
// functions inside the VPC, which have no route to a public API. It links
// the AWS SDK, so only the functions that post to connections import it.
package pushaws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/push"
)

// ManagementRelay defaults.
const (
	// DefaultCallTimeout bounds one PostToConnection or DeleteConnection:
	// API Gateway answers in milliseconds, so this only cuts a stuck one.
	DefaultCallTimeout = 5 * time.Second
	// DefaultConcurrency is how many connections one Post or Close works
	// on at once.
	DefaultConcurrency = 8
)

// ManagementRelay posts to connections through the @connections management
// API of the WebSocket API's stage. Calls are never retried: a push that
// fails is dropped and the host covers the gap from GET /v1/inbox.
type ManagementRelay struct {
	Client      *apigatewaymanagementapi.Client
	Log         *slog.Logger
	CallTimeout time.Duration // per call (default DefaultCallTimeout)
	Concurrency int           // connections at once (default DefaultConcurrency)
}

var _ push.Relay = (*ManagementRelay)(nil)

// NewManagementRelay returns a relay to the management endpoint (the
// stage's URL, e.g. https://{api}.execute-api.{region}.amazonaws.com/push,
// or http://127.0.0.1:8080/push locally), signing with the default
// credential chain. For a loopback endpoint, which checks no signature,
// dummy credentials (and a region, when none is configured) stand in.
func NewManagementRelay(ctx context.Context, endpoint string, log *slog.Logger) (*ManagementRelay, error) {
	ac, err := awsConfig(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	cl := apigatewaymanagementapi.NewFromConfig(ac, func(o *apigatewaymanagementapi.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.Retryer = aws.NopRetryer{}
	})
	return &ManagementRelay{Client: cl, Log: log}, nil
}

// awsConfig loads the default SDK configuration; for a loopback endpoint
// it uses dummy credentials and, without a configured region, a dummy one.
func awsConfig(ctx context.Context, endpoint string) (aws.Config, error) {
	ac, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("pushaws: AWS SDK configuration: %w", err)
	}
	if endpoint == "" {
		return ac, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return aws.Config{}, fmt.Errorf("pushaws: push endpoint %q is not an http(s) URL", endpoint)
	}
	if !loopback(u.Hostname()) {
		return ac, nil
	}
	if ac.Region == "" {
		ac.Region = "us-east-1"
	}
	// The emulator checks no signature: never probe the credential chain
	// (IMDS takes seconds to fail off EC2) nor sign with real keys there.
	ac.Credentials = credentials.NewStaticCredentialsProvider("local", "local", "")
	return ac, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (r *ManagementRelay) log() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

func (r *ManagementRelay) timeout() time.Duration {
	if r.CallTimeout <= 0 {
		return DefaultCallTimeout
	}
	return r.CallTimeout
}

func (r *ManagementRelay) concurrency() int {
	if r.Concurrency <= 0 {
		return DefaultConcurrency
	}
	return r.Concurrency
}

// Post sends each connection its messages in order, connections in
// parallel. A connection answering 410 (GoneException) is reported gone and
// gets none of its later messages; any other failure is logged and that
// message dropped. The error is set only when ctx ended first.
func (r *ManagementRelay) Post(ctx context.Context, msgs []push.Message) ([]string, error) {
	order, byConn := groupByConnection(msgs)
	var (
		mu   sync.Mutex
		gone []string
	)
	r.each(ctx, order, func(conn string) {
		for _, m := range byConn[conn] {
			cctx, cancel := context.WithTimeout(ctx, r.timeout())
			_, err := r.Client.PostToConnection(cctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(conn), Data: m.Data})
			cancel()
			switch {
			case err == nil:
			case isGone(err):
				mu.Lock()
				gone = append(gone, conn)
				mu.Unlock()
				return
			case ctx.Err() != nil:
				return
			default:
				// The error names the connection and the API's answer,
				// never the data.
				r.log().Warn("push: posting to a connection failed; message dropped", "connection_id", conn, "bytes", len(m.Data), "err", err)
			}
		}
	})
	return gone, ctx.Err()
}

// Close deletes the connections, in parallel; one already gone is not an
// error. It returns the failures joined.
func (r *ManagementRelay) Close(ctx context.Context, connectionIDs []string) error {
	var (
		mu   sync.Mutex
		errs []error
	)
	r.each(ctx, push.UniqueIDs(connectionIDs), func(conn string) {
		cctx, cancel := context.WithTimeout(ctx, r.timeout())
		_, err := r.Client.DeleteConnection(cctx, &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(conn)})
		cancel()
		if err != nil && !isGone(err) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("closing connection %s: %w", conn, err))
			mu.Unlock()
		}
	})
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// each runs fn for every connection, at most concurrency at once, and
// starts none once ctx has ended.
func (r *ManagementRelay) each(ctx context.Context, conns []string, fn func(conn string)) {
	sem := make(chan struct{}, r.concurrency())
	var wg sync.WaitGroup
	for _, c := range conns {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(c)
		})
	}
	wg.Wait()
}

// isGone reports whether err is API Gateway's 410: the connection no
// longer exists.
func isGone(err error) bool {
	var g *types.GoneException
	if errors.As(err, &g) {
		return true
	}
	var re *smithyhttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusGone
}

// groupByConnection splits msgs per connection, keeping their order, with
// the connections in the order they first appear.
func groupByConnection(msgs []push.Message) ([]string, map[string][]push.Message) {
	var order []string
	by := map[string][]push.Message{}
	for _, m := range msgs {
		if _, ok := by[m.ConnectionID]; !ok {
			order = append(order, m.ConnectionID)
		}
		by[m.ConnectionID] = append(by[m.ConnectionID], m)
	}
	return order, by
}

// FromConfig returns the relay a function in this deployment posts
// through: LambdaRelay when cfg names a PushRelayFunction (functions in the
// VPC), else ManagementRelay when it names a PushEndpoint, else nil (no
// push channel configured).
func FromConfig(ctx context.Context, cfg config.Config) (push.Relay, error) {
	switch {
	case cfg.PushRelayFunction != "":
		ac, err := awsConfig(ctx, "")
		if err != nil {
			return nil, err
		}
		cl := lambda.NewFromConfig(ac, func(o *lambda.Options) { o.Retryer = aws.NopRetryer{} })
		return &LambdaRelay{Client: cl, Function: cfg.PushRelayFunction}, nil
	case cfg.PushEndpoint != "":
		r, err := NewManagementRelay(ctx, cfg.PushEndpoint, nil)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, nil
}
