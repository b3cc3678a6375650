// Package pushws is the Lambda surface of the push channel: the handlers of
// the WebSocket API's $connect, $disconnect and $default routes and the push
// janitor's job, keyed by their functions' logical ids in template.yaml, and
// the service built from a function's env. Handlers read the API Gateway
// event, call push.Service and answer; a refusal at $connect is a non-2xx
// status with an application/problem+json body, which API Gateway returns
// as the answer to the upgrade request.
package pushws

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/push"
	"github.com/agentmesh/agentmesh/shared/push/pushaws"
)

// Handler is the signature aws-lambda-go calls for WebSocket API events.
type Handler func(ctx context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error)

// The handshake's names.
const (
	// Subprotocol is the push channel's WebSocket subprotocol; a client that
	// offers it gets it back in the $connect answer.
	Subprotocol = "mesh.v1"
	// BearerPrefix marks the subprotocol item carrying the token, the
	// fallback for clients that cannot set Authorization (the query string
	// would put the token into access logs).
	BearerPrefix = "bearer."
	// InstanceHeader carries meshd's instance id.
	InstanceHeader = "X-Mesh-Instance"
	// ProtocolHeader is the subprotocol header of the handshake.
	ProtocolHeader = "Sec-WebSocket-Protocol"
	// maxProtocols bounds the subprotocol items read from a handshake.
	maxProtocols = 16
)

// New builds the push service from a function's environment. relay may be
// nil (then closing a connection only forgets its row).
func New(env *app.Env, relay push.Relay) *push.Service {
	return &push.Service{
		DB: env.DB, Identity: env.Identity, Relay: relay, MaxConnAge: env.Config.PushMaxConnAge,
		Clock: mesh.SystemClock, Log: env.Log,
	}
}

// MustRelay is pushaws.FromConfig for a function's main: the relay of
// env's configuration (nil when the mesh has no push channel); a
// configuration that cannot make one stops the function at init, logged.
func MustRelay(env *app.Env) push.Relay {
	relay, err := pushaws.FromConfig(context.Background(), env.Config)
	if err != nil {
		env.Log.Error("push relay init failed", "err", err)
		panic(err)
	}
	return relay
}

// CloseOnRevocation makes every revocation through env.Identity close the
// revoked keys' push connections once it committed: the wiring of the
// functions that revoke keys.
func CloseOnRevocation(env *app.Env, relay push.Relay) {
	env.Identity.OnKeysRevoked = New(env, relay).OnKeysRevoked
}

// Handlers maps the template's WebSocket route functions to their handlers.
func Handlers(s *push.Service) map[string]Handler {
	return map[string]Handler{
		"PushConnectFunction":    Connect(s),
		"PushDisconnectFunction": Disconnect(s),
		"PushDefaultFunction":    Default(s),
	}
}

// Jobs maps the template's scheduled push functions to their jobs.
func Jobs(s *push.Service) app.Jobs {
	return app.Jobs{"PushJanitorFunction": Janitor(s)}
}

// Janitor is the push janitor's job: expire old connections and those of
// revoked keys.
func Janitor(s *push.Service) app.Job { return s.Expire }

// Connect is the $connect route: authenticate the handshake and record the
// connection, or refuse it (401 without or with a bad token, 429 while the
// address's failure budget is spent, 400 for a malformed handshake).
func Connect(s *push.Service) Handler {
	return func(ctx context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		hs, err := readHandshake(ev)
		if err != nil {
			return refuse(s, ev, err), nil
		}
		c, err := s.Connect(ctx, push.ConnectRequest{
			ConnectionID: ev.RequestContext.ConnectionID, Token: hs.token, InstanceID: hs.instance,
			SourceAddr: ev.RequestContext.Identity.SourceIP,
		})
		if err != nil {
			return refuse(s, ev, err), nil
		}
		logger(s).Info("push connected", "agent", c.AgentID, "connection", c.ConnectionID, "instance", c.InstanceID)
		resp := events.APIGatewayProxyResponse{StatusCode: http.StatusOK}
		if hs.offeredMesh {
			// A client that offers subprotocols fails the handshake unless
			// the server picks one.
			resp.Headers = map[string]string{ProtocolHeader: Subprotocol}
		}
		return resp, nil
	}
}

// Disconnect is the $disconnect route: forget the connection. API Gateway
// ignores the answer; a failure is logged and the janitor forgets the row.
func Disconnect(s *push.Service) Handler {
	return func(ctx context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		if err := s.Disconnect(ctx, ev.RequestContext.ConnectionID); err != nil {
			return refuse(s, ev, err), nil
		}
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK}, nil
	}
}

// Default is the $default route: a data frame from the client. meshd sends
// none, so each one spends the connection's small frame budget; a flood or
// an oversized frame closes the connection.
func Default(s *push.Service) Handler {
	return func(ctx context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		size := len(ev.Body)
		if ev.IsBase64Encoded {
			size = base64.StdEncoding.DecodedLen(len(ev.Body))
		}
		if err := s.Received(ctx, ev.RequestContext.ConnectionID, size); err != nil {
			return refuse(s, ev, err), nil
		}
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK}, nil
	}
}

// handshake is what $connect reads from the upgrade request.
type handshake struct {
	token, instance string
	offeredMesh     bool
}

var (
	errBadAuthorization = mesh.Errorf(mesh.KindUnauthorized, "invalid_authorization", "the Authorization header must be Bearer <agent token>")
	errBadSubprotocol   = mesh.Errorf(mesh.KindInvalid, "invalid_subprotocol",
		"the token travels as the subprotocols %q: %s with one %s<token>", Subprotocol+", "+BearerPrefix+"<token>", Subprotocol, BearerPrefix)
)

// readHandshake takes the token from Authorization (Bearer) or, failing
// that, from the subprotocol list "mesh.v1, bearer.<token>". A handshake
// without either leaves the token empty (push.Service answers 401).
func readHandshake(ev events.APIGatewayWebsocketProxyRequest) (handshake, error) {
	var hs handshake
	hs.instance = strings.TrimSpace(header(ev, InstanceHeader))
	var bearers []string
	protocols := strings.Split(header(ev, ProtocolHeader), ",")
	if len(protocols) > maxProtocols {
		return hs, errBadSubprotocol
	}
	for _, p := range protocols {
		p = strings.TrimSpace(p)
		switch {
		case p == Subprotocol:
			hs.offeredMesh = true
		case strings.HasPrefix(strings.ToLower(p), BearerPrefix):
			bearers = append(bearers, p[len(BearerPrefix):])
		}
	}
	if auth := strings.TrimSpace(header(ev, "Authorization")); auth != "" {
		scheme, tok, ok := strings.Cut(auth, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			return hs, errBadAuthorization
		}
		hs.token = strings.TrimSpace(tok)
		return hs, nil
	}
	switch {
	case len(bearers) == 0:
		return hs, nil
	case len(bearers) > 1 || !hs.offeredMesh || bearers[0] == "":
		return hs, errBadSubprotocol
	}
	hs.token = bearers[0]
	return hs, nil
}

// header reads a handshake header by name, case-insensitively, from Headers
// or else MultiValueHeaders (repeated lines joined with ", ", as HTTP
// allows for list headers).
func header(ev events.APIGatewayWebsocketProxyRequest, name string) string {
	for k, v := range ev.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	for k, vs := range ev.MultiValueHeaders {
		if strings.EqualFold(k, name) {
			return strings.Join(vs, ", ")
		}
	}
	return ""
}

func logger(s *push.Service) *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// refuse answers err as a problem document with the status of its kind, as
// the HTTP API does; an unreachable database is a 503, never a 500.
func refuse(s *push.Service, ev events.APIGatewayWebsocketProxyRequest, err error) events.APIGatewayProxyResponse {
	me := mesh.AsError(err)
	if me.Kind == mesh.KindInternal && mysql.IsUnavailable(err) {
		me = &mesh.Error{Kind: mesh.KindUnavailable, Code: "unavailable", Message: "the database is unreachable; retry later", Err: err, RetryAfter: httpapi.UnavailableRetryAfter}
	}
	status := httpapi.StatusOf(me.Kind)
	if status >= 500 {
		logger(s).Error("push route failed", "route", ev.RequestContext.RouteKey, "request_id", ev.RequestContext.RequestID, "err", err)
	} else {
		// Never the token: only what was refused and why.
		logger(s).Info("push refused", "route", ev.RequestContext.RouteKey, "status", status, "code", me.Code,
			"source", ev.RequestContext.Identity.SourceIP)
	}
	b, _ := json.Marshal(api.Problem{
		Type: "urn:agentmesh:problem:" + me.Code, Title: http.StatusText(status), Status: status,
		Code: me.Code, Detail: me.Message, Instance: ev.RequestContext.RequestID,
	})
	headers := map[string]string{"Content-Type": "application/problem+json", "Cache-Control": "no-store"}
	if me.RetryAfter > 0 {
		headers["Retry-After"] = strconv.Itoa(me.RetryAfter)
	}
	return events.APIGatewayProxyResponse{StatusCode: status, Headers: headers, Body: string(b)}
}
