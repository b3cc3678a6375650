package apigwlocal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

// Gateway is the whole local API Gateway on one port: the template's HTTP
// API routes, each WebSocket API at /<stage> (ws://host/<stage>) with
// its @connections management endpoint at http://host/<stage>/@connections,
// mirroring AWS, where the stage is the path, and each Function URL under
// its function's LocalPath (on AWS it has a host of its own; the function
// sees the whole path either way).
type Gateway struct {
	http *Server
	ws   map[string]*webSocketAPI // by stage
	urls *urlFunctions
	inv  *Invocations
}

// NewGateway serves t with the handlers of reg (HTTP, WebSocket and
// Function URL; jobs are the Stack's business), under the WebSocket limits
// opts. A route whose function has no handler answers 501, as in NewServer.
// A Function URL path that shares paths with a route, a stage or another
// Function URL is an error naming the functions.
func NewGateway(t *samtemplate.Template, reg Registry, opts WebSocketOptions, log *slog.Logger) (*Gateway, error) {
	return newGateway(t, reg, opts, log, NewInvocations())
}

func newGateway(t *samtemplate.Template, reg Registry, opts WebSocketOptions, log *slog.Logger, inv *Invocations) (*Gateway, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv, err := NewServer(t, reg.HTTP, log)
	if err != nil {
		return nil, err
	}
	srv.inv = inv
	if err := t.CheckLocalPaths(); err != nil {
		return nil, err
	}
	g := &Gateway{http: srv, ws: map[string]*webSocketAPI{}, inv: inv}
	// The HTTP server's clock stamps the Function URL events too, so that
	// tests pin one clock.
	g.urls = newURLFunctions(t, reg.URL, inv, log, func() time.Time { return srv.Now() })
	for _, api := range t.WebSocketAPIs {
		for _, f := range t.Functions {
			for _, r := range f.Routes {
				if r.Path == "/"+api.Stage || strings.HasPrefix(r.Path, "/"+api.Stage+"/") {
					return nil, fmt.Errorf("route %s of %s is under /%s, where the WebSocket API %s is served", r.Key(), f.LogicalID, api.Stage, api.LogicalID)
				}
			}
		}
		g.ws[api.Stage] = newWebSocketAPI(t, api, reg.WebSocket, opts, log, inv)
	}
	return g, nil
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(g.ws) > 0 {
		p := r.URL.EscapedPath()
		stage, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
		if a := g.ws[stage]; a != nil {
			a.ServeHTTP(w, r)
			return
		}
	}
	if f := g.urls.match(r.URL.EscapedPath()); f != nil {
		g.urls.serve(w, r, f)
		return
	}
	g.http.ServeHTTP(w, r)
}

// HTTP is the gateway's HTTP API server (tests pin its clock).
func (g *Gateway) HTTP() *Server { return g.http }

// Invocations returns how many times each function was invoked so far, by
// logical ID, whatever invoked it.
func (g *Gateway) Invocations() map[string]int64 { return g.inv.Snapshot() }

// Connections is how many WebSocket connections are live, over every API.
func (g *Gateway) Connections() int {
	n := 0
	for _, a := range g.ws {
		n += a.Connections()
	}
	return n
}

// WebSocketURL is the URL clients connect to for the API at stage, given
// the gateway's base URL (http://127.0.0.1:8080 → ws://127.0.0.1:8080/push).
func WebSocketURL(baseURL, stage string) string {
	u := strings.TrimSuffix(baseURL, "/") + "/" + stage
	if rest, ok := strings.CutPrefix(u, "https://"); ok {
		return "wss://" + rest
	}
	if rest, ok := strings.CutPrefix(u, "http://"); ok {
		return "ws://" + rest
	}
	return u
}

// ManagementEndpoint is the @connections endpoint of the API at stage
// (what the AWS SDK takes as its BaseEndpoint): http://host/<stage>.
func ManagementEndpoint(baseURL, stage string) string {
	return strings.TrimSuffix(baseURL, "/") + "/" + stage
}

// Shutdown closes every WebSocket connection with 1001 (going away) and
// ends every open Function URL invocation (its context is cancelled, so its
// stream ends), and waits, until ctx is done, for each $disconnect and each
// invocation to return. The HTTP server's own shutdown does not see the
// WebSocket connections (they are hijacked), and would wait for streams
// that end only when their function does.
func (g *Gateway) Shutdown(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, a := range g.ws {
		wg.Go(func() {
			if err := a.Shutdown(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	if err := g.urls.shutdown(ctx); err != nil {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	wg.Wait()
	return errors.Join(errs...)
}
