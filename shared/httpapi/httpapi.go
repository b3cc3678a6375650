// Package httpapi adapts API Gateway HTTP API (payload v2) events to the
// mesh's handlers: one middleware authenticates every request, decodes JSON
// strictly, and maps *mesh.Error to application/problem+json exactly once.
package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// AuthMode says who may call an endpoint.
type AuthMode int

// Authentication modes.
const (
	AuthAgent  AuthMode = iota // Bearer JWT of an agent
	AuthAdmin                  // Bearer admin key
	AuthPublic                 // no credentials (token exchange, health)
	// AuthAgentKeyInTx is AuthAgent for a route that checks the token's
	// API key is live inside its own transaction (one round trip fewer):
	// an Authenticator that is a KeyDeferrer verifies only the token and
	// marks the Caller KeyUnchecked; any other checks the key as AuthAgent.
	AuthAgentKeyInTx
)

// Caller is the authenticated principal of a request.
type Caller struct {
	AgentID string
	KeyID   string
	Admin   bool
	// KeyUnchecked says the token was verified but not its key's
	// liveness: the route must check it (AuthAgentKeyInTx).
	KeyUnchecked bool
}

// KeyDeferrer is an Authenticator that can verify an agent token without
// the database check of its API key, for AuthAgentKeyInTx routes.
type KeyDeferrer interface {
	// VerifyAgentToken verifies an agent JWT, not its key's liveness.
	VerifyAgentToken(ctx context.Context, token string) (Caller, error)
}

// Authenticator verifies bearer credentials. identityhttp.Authenticator
// implements it with the identity service.
type Authenticator interface {
	// AuthenticateAgent verifies an agent JWT.
	AuthenticateAgent(ctx context.Context, token string) (Caller, error)
	// AuthenticateAdmin verifies the admin key in constant time.
	AuthenticateAdmin(ctx context.Context, key string) error
}

// Request is what a handler sees.
type Request struct {
	Event  events.APIGatewayV2HTTPRequest
	Caller Caller
	body   []byte
}

// Response is what a handler returns on success.
type Response struct {
	Status  int
	Body    any
	Headers map[string]string
}

// Endpoint is one route's handler with its auth mode.
type Endpoint struct {
	Auth   AuthMode
	Handle func(ctx context.Context, r *Request) (Response, error)
}

// MaxBodyBytes caps a request body before any parsing. API Gateway allows
// 10 MB; the mesh needs far less (messages are limited to 256 KiB by default).
var MaxBodyBytes = 1 << 20

// MaxBodyDepth caps how deeply a request body nests, counting the outermost
// object as level 1 (see package jsonlimit). It is checked on the raw bytes
// before any decoding, on every route, and leaves room for the request's own
// structure around the free-form values the services cap themselves (a data
// part's value: 32 levels, at level 5 of a status note).
const MaxBodyDepth = 40

// MaxResponseBytes caps a response body as it travels inside the Lambda
// response (jsonlimit.WireSize), below Lambda's 6 MB with room for the
// headers: a larger answer would fail at API Gateway as a bare 502. Read
// routes bound their pages well below it; this is the last line.
var MaxResponseBytes = jsonlimit.LambdaResponseBytes - 64<<10

// UnavailableRetryAfter is the Retry-After, in seconds, of a 503 whose error
// names none (the database is unreachable).
const UnavailableRetryAfter = 2

// JSON builds a JSON response.
func JSON(status int, body any) Response { return Response{Status: status, Body: body} }

// Path returns a path parameter.
func (r *Request) Path(name string) string { return r.Event.PathParameters[name] }

// Query returns a query string parameter.
func (r *Request) Query(name string) string { return r.Event.QueryStringParameters[name] }

// Body returns the raw request body.
func (r *Request) Body() []byte { return r.body }

// Header returns a request header (API Gateway lower-cases names).
func (r *Request) Header(name string) string { return Header(r.Event.Headers, name) }

// Decode parses the JSON body into v strictly: unknown fields (field names
// match exactly, not by folding case), trailing data and a missing body are
// 400s with a clear message.
func (r *Request) Decode(v any) error {
	if len(bytes.TrimSpace(r.body)) == 0 {
		return mesh.Errorf(mesh.KindInvalid, "invalid_json", "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return mesh.Errorf(mesh.KindInvalid, "invalid_json", "request body is not valid: %s", jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return mesh.Errorf(mesh.KindInvalid, "invalid_json", "request body must hold exactly one JSON value")
	}
	if key := caseMismatch(r.body, v); key != "" {
		return mesh.Errorf(mesh.KindInvalid, "invalid_json", "request body is not valid: unknown field %.100q (field names are case-sensitive)", key)
	}
	return nil
}

func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be %s", te.Field, te.Type.String())
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	return "malformed JSON"
}

// Header is the value of header name in an API Gateway event's headers h,
// whatever its case: API Gateway lower-cases names, a test's event may not.
// Handlers that httpapi.Lambda does not wrap (the OAuth token endpoint) use
// it too.
func Header(h map[string]string, name string) string {
	if v, ok := h[strings.ToLower(name)]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

type sourceKey struct{}

// SourceAddr is the client address of the request being served (API
// Gateway's sourceIp), or "" outside a request. Authentication uses it to
// throttle failures per address.
func SourceAddr(ctx context.Context) string {
	s, _ := ctx.Value(sourceKey{}).(string)
	return s
}

// LambdaHandler is the signature aws-lambda-go calls for HTTP API events.
type LambdaHandler func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Lambda wraps an endpoint with authentication, body limits, error mapping
// and one structured log line per request. It never returns a Go error: every
// failure becomes a problem document, so API Gateway never answers a bare 502.
func Lambda(auth Authenticator, log *slog.Logger, ep Endpoint) LambdaHandler {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, _ error) {
		start := time.Now()
		req := &Request{Event: ev}
		ctx = context.WithValue(ctx, sourceKey{}, ev.RequestContext.HTTP.SourceIP)
		defer func() {
			if p := recover(); p != nil {
				resp = problem(log, ev, mesh.Internal(fmt.Errorf("panic: %v", p)))
			}
			log.LogAttrs(ctx, slog.LevelInfo, "request",
				slog.String("route", ev.RouteKey),
				slog.String("request_id", ev.RequestContext.RequestID),
				slog.String("caller", req.Caller.AgentID),
				slog.Int("status", resp.StatusCode),
				slog.Duration("took", time.Since(start)))
		}()
		body, err := ReadBody(ev, MaxBodyBytes)
		if err != nil {
			return problem(log, ev, err), nil
		}
		req.body = body
		if err := checkBody(ev, body); err != nil {
			return problem(log, ev, err), nil
		}
		if req.Caller, err = authenticate(ctx, auth, ep.Auth, ev); err != nil {
			return problem(log, ev, err), nil
		}
		out, err := ep.Handle(ctx, req)
		if err != nil {
			return problem(log, ev, err), nil
		}
		return encode(log, ev, out), nil
	}
}

// ReadBody returns ev's body, base64-decoded when API Gateway encoded it,
// refusing one over max bytes before and after decoding (a KindTooLarge
// error) and one that is not valid base64 (KindInvalid, invalid_body).
func ReadBody(ev events.APIGatewayV2HTTPRequest, max int) ([]byte, error) {
	if len(ev.Body) > max*4/3+4 {
		return nil, tooLarge(max)
	}
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
			return nil, mesh.Errorf(mesh.KindInvalid, "invalid_body", "body is not valid base64")
		}
	}
	if len(body) > max {
		return nil, tooLarge(max)
	}
	return body, nil
}

// checkBody refuses, before any decoding and on every route, a body that
// is not declared as JSON or that no handler should ever see: nested past
// MaxBodyDepth, or with an object that repeats a key (encoding/json would
// let the last one win, so {"to":"nobody","to":"bob"} would reach bob while
// a proxy or log reading the first saw "nobody"). One pass over the bytes.
func checkBody(ev events.APIGatewayV2HTTPRequest, body []byte) error {
	if len(body) == 0 {
		return nil
	}
	if ct := Header(ev.Headers, "Content-Type"); !IsJSONMediaType(ct) {
		if ct == "" {
			ct = "none"
		}
		return mesh.Errorf(mesh.KindUnsupportedMedia, "unsupported_media_type", "a request body must be sent as Content-Type: application/json (got %.100q)", ct)
	}
	c := jsonlimit.Strict(body, MaxBodyDepth)
	switch {
	case c.Depth > MaxBodyDepth:
		return mesh.Errorf(mesh.KindInvalid, "too_deep", "request body nests deeper than %d levels", MaxBodyDepth)
	case c.Duplicate:
		return mesh.Errorf(mesh.KindInvalid, "duplicate_key", "an object of the request body repeats the key %.100q", c.DuplicateKey)
	}
	return nil
}

// IsJSONMediaType reports whether a Content-Type header names JSON as the
// mesh reads it: application/json, with parameters allowed as long as a
// charset, if any, is UTF-8 (the only encoding the mesh decodes).
func IsJSONMediaType(ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return false
	}
	cs, ok := params["charset"]
	return !ok || strings.EqualFold(cs, "utf-8")
}

func tooLarge(max int) error {
	return mesh.Errorf(mesh.KindTooLarge, "body_too_large", "request body exceeds %d bytes", max)
}

func authenticate(ctx context.Context, auth Authenticator, mode AuthMode, ev events.APIGatewayV2HTTPRequest) (Caller, error) {
	if mode == AuthPublic {
		return Caller{}, nil
	}
	h := Header(ev.Headers, "Authorization")
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(cred) == "" {
		return Caller{}, mesh.Errorf(mesh.KindUnauthorized, "missing_token", "send Authorization: Bearer <token>")
	}
	cred = strings.TrimSpace(cred)
	if mode == AuthAdmin {
		if err := auth.AuthenticateAdmin(ctx, cred); err != nil {
			return Caller{}, err
		}
		return Caller{Admin: true}, nil
	}
	if d, ok := auth.(KeyDeferrer); ok && mode == AuthAgentKeyInTx {
		c, err := d.VerifyAgentToken(ctx, cred)
		c.KeyUnchecked = err == nil
		return c, err
	}
	return auth.AuthenticateAgent(ctx, cred)
}

// encode renders a handler's answer. A body that cannot be encoded or is
// too large for Lambda is a bug of the route: logged like every 5xx.
func encode(log *slog.Logger, ev events.APIGatewayV2HTTPRequest, out Response) events.APIGatewayV2HTTPResponse {
	status := out.Status
	if status == 0 {
		status = http.StatusOK
	}
	headers := map[string]string{"Cache-Control": "no-store"}
	if out.Body != nil {
		headers["Content-Type"] = "application/json"
	}
	for k, v := range out.Headers {
		headers[k] = v
	}
	var body string
	if out.Body != nil {
		b, err := json.Marshal(out.Body)
		if err != nil {
			return problem(log, ev, fmt.Errorf("encode response: %w", err))
		}
		if n := jsonlimit.WireSize(b); n > MaxResponseBytes {
			return problem(log, ev, fmt.Errorf("response of %d bytes (%d on the wire) exceeds %d", len(b), n, MaxResponseBytes))
		}
		body = string(b)
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: headers, Body: body}
}

// StatusOf maps an error kind to its HTTP status; the one place this happens.
func StatusOf(k mesh.Kind) int {
	switch k {
	case mesh.KindInvalid:
		return http.StatusBadRequest
	case mesh.KindUnauthorized:
		return http.StatusUnauthorized
	case mesh.KindForbidden:
		return http.StatusForbidden
	case mesh.KindNotFound:
		return http.StatusNotFound
	case mesh.KindConflict:
		return http.StatusConflict
	case mesh.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case mesh.KindUnprocessable:
		return http.StatusUnprocessableEntity
	case mesh.KindRateLimited:
		return http.StatusTooManyRequests
	case mesh.KindUnavailable:
		return http.StatusServiceUnavailable
	case mesh.KindUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	}
	return http.StatusInternalServerError
}

// Problem is an RFC 9457 problem document with the mesh's stable code: the
// wire type of shared/api, which clients decode it with.
type Problem = api.Problem

// problem maps err to its problem document: the one place where an error
// becomes a status. An unreachable database is a 503 with Retry-After, not a
// 500 (which stays for bugs), wherever in the route it surfaced.
func problem(log *slog.Logger, ev events.APIGatewayV2HTTPRequest, err error) events.APIGatewayV2HTTPResponse {
	me := mesh.AsError(err)
	if me.Kind == mesh.KindInternal && mysql.IsUnavailable(err) {
		me = &mesh.Error{Kind: mesh.KindUnavailable, Code: "unavailable", Message: "the database is unreachable; retry later", Err: err}
	}
	if me.Kind == mesh.KindUnavailable && me.RetryAfter <= 0 {
		cp := *me
		cp.RetryAfter = UnavailableRetryAfter
		me = &cp
	}
	if StatusOf(me.Kind) >= 500 {
		// The cause is logged for operators; the client sees only the code.
		log.Error("request failed", "route", ev.RouteKey, "request_id", ev.RequestContext.RequestID, "err", err)
	}
	return encodeProblem(me, ev.RequestContext.RequestID)
}

func encodeProblem(me *mesh.Error, requestID string) events.APIGatewayV2HTTPResponse {
	status := StatusOf(me.Kind)
	p := Problem{
		Type:     "urn:agentmesh:problem:" + me.Code,
		Title:    http.StatusText(status),
		Status:   status,
		Code:     me.Code,
		Detail:   me.Message,
		Instance: requestID,
	}
	b, _ := json.Marshal(p)
	headers := map[string]string{"Content-Type": "application/problem+json", "Cache-Control": "no-store"}
	if me.RetryAfter > 0 {
		headers["Retry-After"] = strconv.Itoa(me.RetryAfter)
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: headers, Body: string(b)}
}

// Endpoints maps a template function's logical ID (e.g. "HeartbeatFunction")
// to its endpoint. Each service package exports one such map, so the Lambda
// binary and the local stack pick the very same handler by name.
type Endpoints map[string]Endpoint

// Must returns the endpoint named name or panics at init, so a wiring typo
// fails the function's start instead of its first request.
func (e Endpoints) Must(name string) Endpoint {
	ep, ok := e[name]
	if !ok || ep.Handle == nil {
		panic("httpapi: no endpoint named " + name)
	}
	return ep
}
