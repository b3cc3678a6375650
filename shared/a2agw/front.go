package a2agw

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"mime"
	"net"
	"net/http"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// The front: every method call goes through, in this order,
//
//  1. authentication (Authorization: Bearer <mesh agent token>, failures
//     throttled per source address): 401 with WWW-Authenticate;
//  2. the body's shape, before any decoder: a JSON content type (415), the
//     size cap (413), one JSON value, not a batch, within the depth cap and
//     without repeated keys, a known JSON-RPC method;
//  3. the A2A-Version header: absent, 1.0 or 1.0.<patch>;
//  4. the caller's rate budget, one unit per call as on the HTTP API: a
//     read spends it here; a write (SendMessage, SendStreamingMessage,
//     CancelTask) spends it inside its own transaction, as the mesh
//     routes' writes do, so here it is only checked (spent in a
//     transaction that is rolled back). Every caller meets the check,
//     refused ones too, so an exhausted budget answers every caller the
//     same 429 with Retry-After;
//  5. the gate: the caller is not the target, the target's card is
//     published and the two may talk (friends or group mates, no block).
//     A refused caller gets the deny handler, whose every method answers
//     TaskNotFound through the same a2a-go transport, so a stranger, an
//     unpublished agent and a nonexistent one look like a missing task;
//  6. the guard around either handler (waits.go): a waiting call takes
//     one of the caller's MaxWaits slots first, or answers 429; a call
//     that failed before its unit was spent (any error after step 1
//     other than the rate limit) spends it then.
//
// Answers of steps 1-4 are written here in the binding's own error form;
// none of them writes anything but the call's rate unit. An error a stream
// meets before its first event is answered like the same error of a
// non-streaming call (HTTP+JSON: see primed; JSON-RPC: see
// responseWriter.hold), request fields under their proto names are
// renamed to their JSON names (see names.go), and a panic anywhere ends
// as a 500 in the binding's form, never as the process's end (see
// recoverPanic).

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

func (g *Gateway) serve(hw http.ResponseWriter, r *http.Request) {
	w := &responseWriter{ResponseWriter: hw, rest: true}
	defer g.recoverPanic(w, r)
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
func (g *Gateway) serveMethod(w *responseWriter, r *http.Request, target string, rest bool, restPath string) {
	ctx := r.Context()
	w.rest = rest
	streaming := rest && r.Method == http.MethodPost && isRESTStream(restPath)
	var mh *meshHandler // the call's state, once the caller is known
	fail := func(id any, e edgeError) {
		if mh != nil && e.status != http.StatusTooManyRequests {
			mh.charge(ctx) // a refused call pays its unit too
		}
		if rest {
			writeREST(w, e)
			return
		}
		// A stream's early error too is a plain JSON-RPC error response
		// (see holdStream).
		writeRPC(w, id, e)
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
	mh = &meshHandler{g: g, caller: caller, target: target}
	body, e, ok := g.readBody(r)
	if !ok {
		fail(nil, e)
		return
	}
	var id any
	write := rest && r.Method == http.MethodPost && isRESTWrite(restPath)
	if !rest {
		var method string
		if id, method, e, ok = checkRPC(body); !ok {
			fail(id, e)
			return
		}
		w.id = id
		streaming = rpcStreams[method]
		write = rpcWrites[method]
		var msg string
		if body, msg = renameRPC(body, method); msg != "" {
			fail(id, edgeError{status: http.StatusOK, kind: a2a.ErrInvalidParams, msg: msg})
			return
		}
	} else if len(bytes.TrimSpace(body)) > 0 {
		if e, ok = checkJSON(body); !ok {
			fail(nil, e)
			return
		}
		var msg string
		if r.Method == http.MethodPost {
			if body, msg = renameREST(body, restPath); msg != "" {
				fail(nil, edgeError{status: http.StatusBadRequest, kind: a2a.ErrInvalidParams, msg: msg})
				return
			}
		}
	}
	if v := r.Header.Get(a2a.SvcParamVersion); v != "" && !versionPattern.MatchString(v) {
		fail(id, edgeError{status: http.StatusOK, kind: a2a.ErrVersionNotSupported,
			msg: "A2A-Version " + quoteShort(v) + " is not supported; this agent speaks 1.0"})
		return
	}
	if err := g.rate(ctx, caller, write); err != nil {
		fail(id, fromMesh(ctx, g.log(), err))
		return
	}
	if !write {
		mh.spent.Store(true)
	}
	if write && g.afterRateCheck != nil {
		g.afterRateCheck(caller)
	}
	admitted, err := g.admits(ctx, caller, target)
	if err != nil {
		fail(id, fromMesh(ctx, g.log(), err))
		return
	}
	h := guarded{RequestHandler: denyHandler{}, h: mh}
	if admitted {
		h.RequestHandler = mh
	}
	w.limited = &mh.limited
	r2 := r.Clone(ctx)
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	panics := a2asrv.WithTransportPanicHandler(func(v any) error {
		g.logPanic(r, v)
		return a2a.NewError(a2a.ErrInternalError, "internal error")
	})
	if rest {
		r2.URL.Path, r2.URL.RawPath = restPath, ""
		if r2.URL.Path == "" {
			r2.URL.Path = "/"
		}
		a2asrv.NewRESTHandler(primed{RequestHandler: h, w: w, r: r2}, panics).ServeHTTP(w, r2)
		mh.charge(ctx) // a write that failed, whoever refused it
		return
	}
	// a2a-go's JSON-RPC binding writes a stream's SSE headers before it
	// calls the method: the writer holds them until the first event.
	w.hold = streaming
	a2asrv.NewJSONRPCHandler(h, panics).ServeHTTP(w, r2)
	mh.charge(ctx) // a write that failed, whoever refused it
	w.release()
}

// The methods by their effect: a write spends its rate unit in its own
// transaction; a stream answers with SSE.
var (
	rpcWrites  = map[string]bool{"SendMessage": true, "SendStreamingMessage": true, "CancelTask": true}
	rpcStreams = map[string]bool{"SendStreamingMessage": true, "SubscribeToTask": true}
)

// isRESTWrite reports whether the POST to restPath is a write (a2a-go's
// routes: /message:send, /message:stream, /tasks/{id}:cancel).
func isRESTWrite(restPath string) bool {
	return restPath == "/message:send" || restPath == "/message:stream" ||
		(strings.HasPrefix(restPath, "/tasks/") && strings.HasSuffix(restPath, ":cancel"))
}

// isRESTStream reports whether the POST to restPath answers with SSE.
func isRESTStream(restPath string) bool {
	return restPath == "/message:stream" || (strings.HasPrefix(restPath, "/tasks/") && strings.HasSuffix(restPath, ":subscribe"))
}

// rate spends the call's one unit of caller's budget, or, for a write
// (which spends it in its own transaction), checks that one is there
// without spending it.
func (g *Gateway) rate(ctx context.Context, caller string, write bool) error {
	if !write {
		return identity.TakeRate(ctx, g.Tasks.DB, caller, g.Tasks.Clock())
	}
	tx, err := g.Tasks.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // the check spends nothing
	return identity.TakeRate(ctx, tx, caller, g.Tasks.Clock())
}

// authenticate checks the bearer token.
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
// or it cannot be read) and method. Protocol errors travel with HTTP 200, as
// a2a-go's own do.
func checkRPC(body []byte) (any, string, edgeError, bool) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' && json.Valid(trimmed) {
		return nil, "", edgeError{status: http.StatusOK, kind: a2a.ErrInvalidRequest, msg: "batch requests are not supported"}, false
	}
	if e, ok := checkJSON(body); !ok {
		e.status = http.StatusOK
		return nil, "", e, false
	}
	var env struct {
		JSONRPC string          `json:"jsonrpc"`
		Method  string          `json:"method"`
		ID      json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, "", edgeError{status: http.StatusOK, kind: a2a.ErrInvalidRequest, msg: "a JSON-RPC request is an object with jsonrpc, method and id"}, false
	}
	var id any
	if len(env.ID) > 0 {
		if err := json.Unmarshal(env.ID, &id); err != nil {
			id = nil
		}
		switch id.(type) {
		case string, float64, nil:
		default:
			return nil, "", edgeError{status: http.StatusOK, kind: a2a.ErrInvalidRequest, msg: "id must be a string, a number or null"}, false
		}
	}
	switch {
	case env.JSONRPC != "2.0":
		return id, "", edgeError{status: http.StatusOK, kind: a2a.ErrInvalidRequest, msg: `jsonrpc must be "2.0"`}, false
	case env.Method == "":
		return id, "", edgeError{status: http.StatusOK, kind: a2a.ErrInvalidRequest, msg: "method is required"}, false
	case !rpcMethods[env.Method]:
		return id, "", edgeError{status: http.StatusOK, kind: a2a.ErrMethodNotFound, msg: "method " + quoteShort(env.Method) + " is not an A2A 1.0 method"}, false
	}
	return id, env.Method, edgeError{}, true
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
// (lambdaurl's writer has none: its io.Pipe sends each write at once),
// answers a method that met the caller's rate limit with the front's 429
// (see WriteHeader), holds a JSON-RPC stream's start until its first event
// (see hold), and remembers what a panic's answer needs: whether anything
// was written, the binding and the JSON-RPC id.
type responseWriter struct {
	http.ResponseWriter
	limited *atomic.Pointer[edgeError] // nil until a method runs
	wrote   bool
	// closed: the answer is complete (a stream's early error, a rate
	// limit); what a2a-go still writes is dropped.
	closed bool
	rest   bool
	id     any
	// hold: a JSON-RPC stream whose status (heldCode) and bytes (held)
	// wait for its first event to be complete. The TCK's JSON-RPC client
	// sees an error only in a response that is not text/event-stream
	// (its SSE reader skips error events), so an error that is the
	// stream's first event is answered as the plain JSON-RPC error
	// response of a non-streaming call (a2a-go's own body: code, message,
	// ErrorInfo). a2a-sdk reads both forms; a2a-go v2.3.1's JSON-RPC
	// client reads a plain JSON answer to a stream as an empty stream.
	hold     bool
	heldCode int
	held     []byte
}

// maxHeld bounds what a held stream keeps before it is released anyway
// (a first event larger than this streams as it is).
const maxHeld = 8 << 20

// Header implements http.ResponseWriter.
func (w *responseWriter) Header() http.Header {
	if w.closed {
		return http.Header{}
	}
	return w.ResponseWriter.Header()
}

// WriteHeader implements http.ResponseWriter. The error answer of a method
// that met the caller's rate limit (HTTP 200 in JSON-RPC, 4xx/5xx in
// HTTP+JSON, whatever a2a-go made of the error) is replaced by the front's
// own answer to a spent budget: one form of a 429 whichever path met it.
func (w *responseWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	if w.hold {
		w.heldCode = code
		return
	}
	w.wrote = true
	if w.limited != nil && (code == http.StatusOK || code >= 400) {
		if e := w.limited.Load(); e != nil {
			h := w.ResponseWriter.Header()
			h.Del("Connection")
			h.Del("X-Accel-Buffering")
			if w.rest {
				writeREST(w.ResponseWriter, *e)
			} else {
				writeRPC(w.ResponseWriter, w.id, *e)
			}
			w.closed = true
			return
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *responseWriter) Write(b []byte) (int, error) {
	if w.closed {
		return len(b), nil
	}
	if w.hold {
		w.held = append(w.held, b...)
		if bytes.Contains(w.held, []byte("\n\n")) || len(w.held) > maxHeld {
			w.release()
		}
		return len(b), nil
	}
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
		if w.closed {
			return len(b), nil
		}
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the underlying writer when it can.
func (w *responseWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); !w.closed && !w.hold && ok {
		f.Flush()
	}
}

// release ends a hold: a first event that is a JSON-RPC error becomes the
// whole answer, as application/json; anything else goes out as it was
// written, and the stream flows from here.
func (w *responseWriter) release() {
	if !w.hold {
		return
	}
	w.hold = false
	held, code := w.held, w.heldCode
	w.held = nil
	if code == 0 {
		if len(held) == 0 {
			return // nothing was written
		}
		code = http.StatusOK
	}
	if body, ok := firstEventError(held); ok {
		h := w.Header()
		h.Del("Connection")
		h.Del("X-Accel-Buffering")
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_, _ = w.Write(append(body, '\n'))
		w.closed = true
		return
	}
	w.WriteHeader(code)
	if len(held) > 0 {
		_, _ = w.Write(held)
	}
	w.Flush()
}

// firstEventError returns the data of the first SSE event in b when it is
// a JSON-RPC error response.
func firstEventError(b []byte) ([]byte, bool) {
	frame, _, _ := bytes.Cut(b, []byte("\n\n"))
	for _, line := range bytes.Split(frame, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		var resp struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(data, &resp) == nil && len(resp.Error) > 0 && string(resp.Error) != "null" {
			return data, true
		}
		return nil, false
	}
	return nil, false
}

// recoverPanic ends a call whose handling panicked: logged with the
// request id, answered 500 in the binding's form when nothing was written
// yet. Under lambdaurl the handler runs on lambdaurl's goroutine, where an
// unrecovered panic ends the whole process and every call it serves.
func (g *Gateway) recoverPanic(w *responseWriter, r *http.Request) {
	v := recover()
	if v == nil {
		return
	}
	if v != http.ErrAbortHandler { //nolint:errorlint // net/http's own sentinel, compared as net/http does
		g.logPanic(r, v)
	}
	w.hold = false
	if w.wrote || w.closed {
		return
	}
	e := edgeError{status: http.StatusInternalServerError, kind: a2a.ErrInternalError, msg: "internal error"}
	if w.rest {
		writeREST(w, e)
	} else {
		writeRPC(w, w.id, e)
	}
}

// logPanic logs a recovered panic with its stack and the call's request
// id (the Lambda request's; "" outside Lambda).
func (g *Gateway) logPanic(r *http.Request, v any) {
	id := ""
	if ev, ok := lambdaurl.RequestFromContext(r.Context()); ok {
		id = ev.RequestContext.RequestID
	}
	g.log().ErrorContext(r.Context(), "a2a gateway: panic", "request_id", id, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
}

// primed is the handler the HTTP+JSON binding sees: a stream's first item
// is pulled before a2a-go writes the SSE headers, so an error known before
// the stream starts (a refused caller, a missing or terminal task, bad
// params, a rate limit) is answered with the status and body a
// non-streaming route gives it. a2a-sdk's REST client sees stream errors
// only as a non-2xx status (or an "event: error" frame, which a2a-go does
// not write): a 200 stream carrying an error is an empty stream to it.
// a2a-go calls the REST streaming methods on the request's goroutine
// before it starts the stream, which is what makes this possible; its
// JSON-RPC binding calls them after it has written the SSE headers, which
// the response writer holds instead (responseWriter.hold).
type primed struct {
	a2asrv.RequestHandler
	w *responseWriter
	r *http.Request
}

// SendStreamingMessage implements a2asrv.RequestHandler.
func (p primed) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return p.prime(p.RequestHandler.SendStreamingMessage(ctx, req))
}

// SubscribeToTask implements a2asrv.RequestHandler.
func (p primed) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return p.prime(p.RequestHandler.SubscribeToTask(ctx, req))
}

func (p primed) prime(seq iter.Seq2[a2a.Event, error]) iter.Seq2[a2a.Event, error] {
	next, stop := iter.Pull2(seq)
	first, err, ok := next()
	if !ok || err != nil {
		stop()
		if err != nil {
			// a2a-go's own REST error answer, as its non-streaming routes
			// write it: the same status, body and ErrorInfo.
			r, _ := http.NewRequestWithContext(p.r.Context(), http.MethodGet, "/tasks", nil) // a constant URL: cannot fail
			a2asrv.NewRESTHandler(failing{err: err}).ServeHTTP(p.w, r)
			p.w.closed = true
		}
		return func(func(a2a.Event, error) bool) {}
	}
	return func(yield func(a2a.Event, error) bool) {
		defer stop()
		if !yield(first, nil) {
			return
		}
		for {
			ev, err, ok := next()
			if !ok || !yield(ev, err) {
				return
			}
		}
	}
}

// ListTasks implements a2asrv.RequestHandler. a2a-go v2.3.1's HTTP+JSON
// binding drops the statusTimestampAfter query parameter (it parses into a
// **time.Time, a type its parser does not know), so it is read here.
func (p primed) ListTasks(ctx context.Context, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	if v := p.r.URL.Query().Get("statusTimestampAfter"); v != "" && req.StatusTimestampAfter == nil {
		at, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, a2a.NewError(a2a.ErrInvalidParams, "statusTimestampAfter is not an RFC 3339 time")
		}
		req.StatusTimestampAfter = &at
	}
	return p.RequestHandler.ListTasks(ctx, req)
}

// failing answers ListTasks with its error (primed's way to have a2a-go
// write it).
type failing struct {
	denyHandler
	err error
}

// ListTasks implements a2asrv.RequestHandler.
func (f failing) ListTasks(context.Context, *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	return nil, f.err
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
