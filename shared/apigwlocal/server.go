package apigwlocal

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

// MaxPayloadBytes is API Gateway's request payload limit (10 MB).
const MaxPayloadBytes = 10 << 20

// IntegrationTimeout is API Gateway HTTP API's longest Lambda integration
// timeout: a function's own Timeout is capped by it.
const IntegrationTimeout = 30 * time.Second

// Server is an http.Handler that plays API Gateway HTTP API for the routes of
// a template: it turns each request into an events.APIGatewayV2HTTPRequest,
// invokes the function's handler and writes its events.APIGatewayV2HTTPResponse.
type Server struct {
	router   *Router
	handlers map[string]httpapi.LambdaHandler
	timeouts map[string]time.Duration
	log      *slog.Logger
	inv      *Invocations
	// Now is the clock stamped into requestContext.time (tests pin it).
	Now func() time.Time
}

// NewServer serves t's routes with handlers (keyed by logical ID). A route
// whose function has no handler answers 501; Stack refuses to start in that
// case unless told to run partially.
func NewServer(t *samtemplate.Template, handlers map[string]httpapi.LambdaHandler, log *slog.Logger) (*Server, error) {
	r, err := NewRouter(t)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeouts := map[string]time.Duration{}
	for _, f := range t.Functions {
		timeouts[f.LogicalID] = min(f.Timeout, IntegrationTimeout)
	}
	return &Server{router: r, handlers: handlers, timeouts: timeouts, log: log, inv: NewInvocations(), Now: time.Now}, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestID := newRequestID()
	w.Header().Set("Apigw-Requestid", requestID)
	m := s.router.Match(r.Method, r.URL.EscapedPath())
	if m.Function == "" {
		if len(m.Allow) > 0 {
			w.Header().Set("Allow", strings.Join(m.Allow, ", "))
			writeProblem(w, http.StatusMethodNotAllowed, "method_not_allowed",
				fmt.Sprintf("%s is not a route; this path supports %s", r.Method, strings.Join(m.Allow, ", ")), requestID)
			return
		}
		writeProblem(w, http.StatusNotFound, "route_not_found",
			fmt.Sprintf("no route of template.yaml matches %s %s", r.Method, r.URL.EscapedPath()), requestID)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxPayloadBytes+1))
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_body", "the request body could not be read", requestID)
		return
	}
	if len(body) > MaxPayloadBytes {
		writeProblem(w, http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("request payloads are limited to %d bytes, as in API Gateway", MaxPayloadBytes), requestID)
		return
	}
	h := s.handlers[m.Function]
	if h == nil {
		writeProblem(w, http.StatusNotImplemented, "not_implemented",
			fmt.Sprintf("%s has no handler in this build of the local stack", m.Function), requestID)
		return
	}
	ev := BuildEvent(r, body, m, requestID, s.Now())
	ctx, cancel := context.WithTimeout(r.Context(), s.timeouts[m.Function])
	defer cancel()
	s.inv.Add(m.Function)
	resp, err := s.invoke(ctx, h, ev)
	if err != nil {
		// What API Gateway answers when the integration fails: the cause is in
		// the function's log, the client sees a bare 500 (503 on timeout).
		status := http.StatusInternalServerError
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			status = http.StatusServiceUnavailable
		}
		s.log.Error("function invocation failed", "function", m.Function, "route", ev.RouteKey, "request_id", requestID, "err", err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"message":%q}`, http.StatusText(status))
		return
	}
	if err := WriteResponse(w, resp); err != nil {
		s.log.Error("bad function response", "function", m.Function, "route", ev.RouteKey, "request_id", requestID, "err", err)
	}
}

// Invocations counts the functions this server invoked.
func (s *Server) Invocations() map[string]int64 { return s.inv.Snapshot() }

// invoke calls h, turning a panic into an error as the Lambda runtime would.
func (s *Server) invoke(ctx context.Context, h httpapi.LambdaHandler, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return callHandler(ctx, h, ev)
}

// callHandler runs a Lambda handler as the runtime does: a panic is the
// invocation's error, not the emulator's crash.
func callHandler[E, R any](ctx context.Context, h func(context.Context, E) (R, error), ev E) (resp R, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(ctx, ev)
}

// BuildEvent turns an HTTP request into the payload 2.0 event API Gateway
// would send for route m: header names lower-cased and repeated values joined
// with commas, cookies moved out of the headers into Cookies, query values
// decoded and joined with commas, a non-text body base64-encoded.
func BuildEvent(r *http.Request, body []byte, m Match, requestID string, now time.Time) events.APIGatewayV2HTTPRequest {
	p := newPayload2(r, body, now)
	// API Gateway sends content-length even for an empty body.
	p.headers["content-length"] = strconv.Itoa(len(body))
	return events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              m.Route.Key(),
		RawPath:               r.URL.EscapedPath(),
		RawQueryString:        r.URL.RawQuery,
		Cookies:               p.cookies,
		Headers:               p.headers,
		QueryStringParameters: p.query,
		PathParameters:        m.PathParameters,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     m.Route.Key(),
			AccountID:    "local",
			Stage:        "$default",
			RequestID:    requestID,
			APIID:        "local",
			DomainName:   p.hostname,
			DomainPrefix: p.prefix,
			Time:         p.time,
			TimeEpoch:    p.timeEpoch,
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.EscapedPath(),
				Protocol:  r.Proto,
				SourceIP:  p.sourceIP,
				UserAgent: r.UserAgent(),
			},
		},
		Body:            p.body,
		IsBase64Encoded: p.isBase64,
	}
}

// payload2 is what API Gateway HTTP API's event and a Function URL's event
// (both payload version 2.0) build alike from a request; each event adds its
// own requestContext and content-length.
type payload2 struct {
	sourceIP string
	// headers have lower-cased names and repeated values joined with commas;
	// Cookie is moved out into cookies, Host put back in, and the
	// x-forwarded-* and x-amzn-trace-id headers the AWS front end adds set.
	headers  map[string]string
	cookies  []string
	query    map[string]string // nil without a query
	hostname string            // the Host without its port
	prefix   string            // the hostname up to its first dot
	time     string            // requestContext.time's format
	// timeEpoch is in milliseconds.
	timeEpoch int64
	body      string
	isBase64  bool
}

func newPayload2(r *http.Request, body []byte, now time.Time) payload2 {
	p := payload2{sourceIP: r.RemoteAddr, headers: map[string]string{}}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		p.sourceIP = host
	}
	for name, values := range r.Header {
		lname := strings.ToLower(name)
		if lname == "cookie" {
			for _, v := range values {
				for _, c := range strings.Split(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						p.cookies = append(p.cookies, c)
					}
				}
			}
			continue
		}
		p.headers[lname] = strings.Join(values, ",")
	}
	// Go moves Host out of the header map; AWS keeps it.
	p.headers["host"] = r.Host
	if prior := p.headers["x-forwarded-for"]; prior != "" {
		p.headers["x-forwarded-for"] = prior + ", " + p.sourceIP
	} else {
		p.headers["x-forwarded-for"] = p.sourceIP
	}
	proto, port := "http", "80"
	if r.TLS != nil {
		proto, port = "https", "443"
	}
	if _, pt, err := net.SplitHostPort(r.Host); err == nil {
		port = pt
	}
	p.headers["x-forwarded-proto"] = proto
	p.headers["x-forwarded-port"] = port
	p.headers["x-amzn-trace-id"] = newTraceID(now)

	if r.URL.RawQuery != "" {
		// ParseQuery returns what it could parse alongside an error for the
		// rest; AWS likewise passes the well-formed pairs on.
		values, _ := url.ParseQuery(r.URL.RawQuery)
		if len(values) > 0 {
			p.query = make(map[string]string, len(values))
			for k, v := range values {
				p.query[k] = strings.Join(v, ",")
			}
		}
	}

	p.hostname = r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		p.hostname = h
	}
	p.prefix, _, _ = strings.Cut(p.hostname, ".")
	p.time = now.UTC().Format("02/Jan/2006:15:04:05 -0700")
	p.timeEpoch = now.UnixMilli()
	if len(body) > 0 {
		if IsTextContent(r.Header.Get("Content-Type")) && utf8.Valid(body) {
			p.body = string(body)
		} else {
			p.body = base64.StdEncoding.EncodeToString(body)
			p.isBase64 = true
		}
	}
	return p
}

// IsTextContent reports whether API Gateway passes a body of this content
// type as text; every other body (form posts included) arrives base64-encoded.
func IsTextContent(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"):
		return true
	case mt == "application/json", mt == "application/xml", mt == "application/javascript",
		mt == "application/yaml", mt == "application/graphql":
		return true
	case strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	}
	return false
}

// WriteResponse writes a function's response as API Gateway would: headers
// (multi-value ones too), cookies as Set-Cookie, the status, and the body
// decoded from base64 when the function says so.
func WriteResponse(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) error {
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"message":"Internal Server Error"}`)
			return fmt.Errorf("isBase64Encoded body is not base64: %w", err)
		}
		body = b
	}
	status := resp.StatusCode
	if status < 100 || status > 599 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"message":"Internal Server Error"}`)
		return fmt.Errorf("function returned status %d", status)
	}
	h := w.Header()
	for k, v := range resp.Headers {
		h.Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	if h.Get("Content-Type") == "" && len(body) > 0 {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

// writeProblem answers for the gateway itself (no function involved) with
// the same problem document shape the functions use.
func writeProblem(w http.ResponseWriter, status int, code, detail, requestID string) {
	b, _ := json.Marshal(httpapi.Problem{
		Type: "urn:agentmesh:problem:" + code, Title: http.StatusText(status), Status: status,
		Code: code, Detail: detail, Instance: requestID,
	})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// newRequestID mimics API Gateway's request ids (e.g. "JKJaXmPLvHcESHA=").
func newRequestID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// newTraceID is an X-Ray trace header as API Gateway adds it.
func newTraceID(now time.Time) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return fmt.Sprintf("Root=1-%08x-%s", now.Unix(), hex.EncodeToString(b))
}
