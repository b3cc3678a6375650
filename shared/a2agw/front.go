package a2agw

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// The front: every method call goes through, in this order,
//
//  1. authentication (Authorization: Bearer <mesh agent token>, failures
//     throttled per source address) and one unit of the caller's rate
//     budget: 401 with WWW-Authenticate, or 429 with Retry-After;
//  2. the body's shape, before any decoder: a JSON content type (415), the
//     size cap (413), one JSON value, not a batch, within the depth cap and
//     without repeated keys, a known JSON-RPC method;
//  3. the A2A-Version header: absent, 1.0 or 1.0.<patch>;
//  4. the gate: the caller is not the target, the target's card is
//     published and the two may talk (friends or group mates, no block).
//     A refused caller gets the deny handler, whose every method answers
//     TaskNotFound through the same a2a-go transport, so a stranger, an
//     unpublished agent and a nonexistent one look like a missing task.
//
// Answers of steps 1-3 are written here in the binding's own error form;
// none of them writes anything but the rate unit.

const (
	pathPrefix = "/a2a/agents/"
	cardPath   = ".well-known/agent-card.json"
	restPrefix = "/rest"
)

// versionPattern is the A2A-Version this gateway speaks.
var versionPattern = regexp.MustCompile(`^1\.0(\.[0-9]+)?$`)

// rpcMethods are the JSON-RPC methods of A2A 1.0 (a2a-go's names).
var rpcMethods = map[string]bool{
	"SendMessage": true, "SendStreamingMessage": true, "GetTask": true, "ListTasks": true,
	"CancelTask": true, "SubscribeToTask": true, "GetTaskPushNotificationConfig": true,
	"CreateTaskPushNotificationConfig": true, "ListTaskPushNotificationConfigs": true,
	"DeleteTaskPushNotificationConfig": true, "GetExtendedAgentCard": true,
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, pathPrefix)
	target, sub, _ := strings.Cut(rest, "/")
	if !ok || target == "" {
		writeREST(w, edgeError{status: http.StatusNotFound, kind: a2a.ErrMethodNotFound, msg: "no A2A route here; agents are at " + pathPrefix + "{agent_id}"})
		return
	}
	switch {
	case sub == cardPath:
		g.serveCard(w, r, target)
	case sub == "":
		g.serveMethod(w, r, target, false, "")
	case sub == restPrefix[1:] || strings.HasPrefix(sub, restPrefix[1:]+"/"):
		g.serveMethod(w, r, target, true, strings.TrimPrefix(sub, restPrefix[1:]))
	default:
		writeREST(w, edgeError{status: http.StatusNotFound, kind: a2a.ErrMethodNotFound,
			msg: "unknown A2A route: JSON-RPC is at the base, HTTP+JSON under " + restPrefix})
	}
}

// serveMethod runs one method call of either binding (restPath is the path
// below {base}/rest).
func (g *Gateway) serveMethod(w http.ResponseWriter, r *http.Request, target string, rest bool, restPath string) {
	ctx := r.Context()
	fail := func(id any, e edgeError) {
		if rest {
			writeREST(w, e)
		} else {
			writeRPC(w, id, e)
		}
	}
	if !rest && r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(nil, edgeError{status: http.StatusMethodNotAllowed, kind: a2a.ErrInvalidRequest, msg: "JSON-RPC requests are POSTed"})
		return
	}
	caller, e, ok := g.authenticate(ctx, r)
	if !ok {
		fail(nil, e)
		return
	}
	body, e, ok := g.readBody(r)
	if !ok {
		fail(nil, e)
		return
	}
	var id any
	if !rest {
		if id, e, ok = checkRPC(body); !ok {
			fail(id, e)
			return
		}
	} else if len(bytes.TrimSpace(body)) > 0 {
		if e, ok = checkJSON(body); !ok {
			fail(nil, e)
			return
		}
	}
	if v := r.Header.Get(a2a.SvcParamVersion); v != "" && !versionPattern.MatchString(v) {
		fail(id, edgeError{status: http.StatusOK, kind: a2a.ErrVersionNotSupported,
			msg: "A2A-Version " + quoteShort(v) + " is not supported; this agent speaks 1.0"})
		return
	}
	admitted, err := g.admits(ctx, caller, target)
	if err != nil {
		fail(id, fromMesh(ctx, g.log(), err))
		return
	}
	var h a2asrv.RequestHandler = denyHandler{}
	mh := &meshHandler{g: g, caller: caller, target: target}
	if admitted {
		h = mh
	}
	rw := &responseWriter{ResponseWriter: w, retryAfter: &mh.retryAfter}
	r2 := r.Clone(ctx)
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	if rest {
		r2.URL.Path, r2.URL.RawPath = restPath, ""
		if r2.URL.Path == "" {
			r2.URL.Path = "/"
		}
		a2asrv.NewRESTHandler(h).ServeHTTP(rw, r2)
		return
	}
	a2asrv.NewJSONRPCHandler(h).ServeHTTP(rw, r2)
}

// authenticate checks the bearer token and spends one unit of the caller's
// rate budget.
func (g *Gateway) authenticate(ctx context.Context, r *http.Request) (string, edgeError, bool) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", fromMesh(ctx, g.log(), errUnauthenticated), false
	}
	c, err := g.Identity.AuthenticateAgentFrom(ctx, token, sourceAddr(r))
	if err != nil {
		return "", fromMesh(ctx, g.log(), err), false
	}
	if err := identity.TakeRate(ctx, g.Tasks.DB, c.AgentID, g.Tasks.Clock()); err != nil {
		return "", fromMesh(ctx, g.log(), err), false
	}
	return c.AgentID, edgeError{}, true
}

// sourceAddr is the client's address: lambdaurl sets RemoteAddr to the
// Function URL's source IP, a plain server to host:port.
func sourceAddr(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

func (g *Gateway) maxBody() int {
	if g.MaxBodyBytes > 0 {
		return g.MaxBodyBytes
	}
	return httpapi.MaxBodyBytes
}

// readBody reads the request body up to the cap, after checking that a
// body that is there says it is JSON (a missing Content-Type is taken as
// JSON; application/json and any +json type are).
func (g *Gateway) readBody(r *http.Request) ([]byte, edgeError, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" && r.ContentLength != 0 {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, edgeError{status: http.StatusUnsupportedMediaType, kind: a2a.ErrUnsupportedContentType,
				msg: "the request body must be JSON (Content-Type: application/json)"}, false
		}
	}
	if r.Body == nil {
		return nil, edgeError{}, true
	}
	limit := g.maxBody()
	b, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	if err != nil {
		return nil, edgeError{status: http.StatusBadRequest, kind: a2a.ErrInvalidRequest, msg: "the request body could not be read"}, false
	}
	if len(b) > limit {
		return nil, edgeError{status: http.StatusRequestEntityTooLarge, kind: a2a.ErrInvalidRequest,
			msg: "the request body exceeds " + itoa(limit) + " bytes"}, false
	}
	return b, edgeError{}, true
}

// checkJSON refuses a body that is not one JSON value within the depth cap
// and without repeated keys.
func checkJSON(body []byte) (edgeError, bool) {
	if !json.Valid(body) {
		return edgeError{status: http.StatusBadRequest, kind: a2a.ErrParseError, msg: "the request body is not valid JSON"}, false
	}
	if c := jsonlimit.Strict(body, httpapi.MaxBodyDepth); c.Depth > httpapi.MaxBodyDepth {
		return edgeError{status: http.StatusBadRequest, kind: a2a.ErrInvalidRequest,
			msg: "the request body nests deeper than " + itoa(httpapi.MaxBodyDepth) + " levels"}, false
	} else if c.Duplicate {
		return edgeError{status: http.StatusBadRequest, kind: a2a.ErrInvalidRequest,
			msg: "the request body repeats the key " + quoteShort(c.DuplicateKey) + " in one object"}, false
	}
	return edgeError{}, true
}

// checkRPC checks a JSON-RPC body and returns its id (nil when it has none
// or it cannot be read). Protocol errors travel with HTTP 200, as a2a-go's
// own do.
func checkRPC(body []byte) (any, edgeError, bool) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' && json.Valid(trimmed) {
		return nil, edgeError{status: http.StatusOK, kind: a2a.ErrInvalidRequest, msg: "batch requests are not supported"}, false
	}
	if e, ok := checkJSON(body); !ok {
		e.status = http.StatusOK
		return nil, e, false
	}
	var env struct {
		JSONRPC string          `json:"jsonrpc"`
		Method  string          `json:"method"`
		ID      json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, edgeError{status: http.StatusOK, kind: a2a.ErrInvalidRequest, msg: "a JSON-RPC request is an object with jsonrpc, method and id"}, false
	}
	var id any
	if len(env.ID) > 0 {
		if err := json.Unmarshal(env.ID, &id); err != nil {
			id = nil
		}
		switch id.(type) {
		case string, float64, nil:
		default:
			return nil, edgeError{status: http.StatusOK, kind: a2a.ErrInvalidRequest, msg: "id must be a string, a number or null"}, false
		}
	}
	switch {
	case env.JSONRPC != "2.0":
		return id, edgeError{status: http.StatusOK, kind: a2a.ErrInvalidRequest, msg: `jsonrpc must be "2.0"`}, false
	case env.Method == "":
		return id, edgeError{status: http.StatusOK, kind: a2a.ErrInvalidRequest, msg: "method is required"}, false
	case !rpcMethods[env.Method]:
		return id, edgeError{status: http.StatusOK, kind: a2a.ErrMethodNotFound, msg: "method " + quoteShort(env.Method) + " is not an A2A 1.0 method"}, false
	}
	return id, edgeError{}, true
}

// admits reports whether caller may use target's endpoint: not itself, the
// target's card published, and the two may talk. One card read and one
// reachability check per call.
func (g *Gateway) admits(ctx context.Context, caller, target string) (bool, error) {
	if caller == target {
		return false, nil
	}
	_, ok, err := g.published(ctx, target)
	if err != nil || !ok {
		return false, err
	}
	return identity.CanCommunicate(ctx, g.Tasks.DB, caller, target)
}

// responseWriter gives a2a-go's SSE writer the http.Flusher it requires
// (lambdaurl's writer has none: its io.Pipe sends each write at once), and
// turns the status of an answer whose method met a rate limit into 429
// with Retry-After.
type responseWriter struct {
	http.ResponseWriter
	retryAfter *atomic.Int64
	wrote      bool
}

func (w *responseWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	if s := w.retryAfter.Load(); s > 0 && (code == http.StatusOK || code >= 500) {
		w.Header().Set("Retry-After", itoa(int(s)))
		code = http.StatusTooManyRequests
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the underlying writer when it can.
func (w *responseWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// errUnauthenticated is the answer to a call without a bearer token.
var errUnauthenticated = mesh.ErrUnauthorized

func itoa(n int) string { return strconv.Itoa(n) }

func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	b, _ := json.Marshal(s)
	return string(b)
}
