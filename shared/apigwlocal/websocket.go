package apigwlocal

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/coder/websocket"

	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

// WebSocketHandler is what a function behind a WebSocket API route runs:
// the Lambda handler of the aws-lambda-go binary, called in-process.
type WebSocketHandler func(context.Context, events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error)

// WebSocketIntegrationTimeout is API Gateway WebSocket API's longest Lambda
// integration timeout.
const WebSocketIntegrationTimeout = 29 * time.Second

// WebSocketOptions are API Gateway's WebSocket limits and the emulator's own
// bounds; the zero value of each field means the AWS default. Tests shorten
// them (a MaxConnAge of a second is "2 h passing").
type WebSocketOptions struct {
	// MaxFrameBytes: a client frame larger than this closes the connection
	// with 1009 (AWS: 32 KB).
	MaxFrameBytes int64
	// MaxMessageBytes: a client message larger than this closes with 1009,
	// and a POST to @connections larger than this is 413 (AWS: 128 KB).
	MaxMessageBytes int64
	// IdleTimeout: a connection from which no frame (pings included) has
	// come for this long is closed with 1001 (AWS: 10 min).
	IdleTimeout time.Duration
	// MaxConnAge: a connection is closed with 1001 at this age (AWS: 2 h).
	MaxConnAge time.Duration
	// SendQueue bounds the messages waiting for one connection; a POST
	// that finds it full waits for room within PostTimeout, then closes
	// the connection with 1008 as too slow (default 64).
	SendQueue int
	// WriteTimeout bounds how long one message may take to reach the
	// client; a client that does not take it in time is closed (default 5 s).
	// POSTs do not wait for writes: they answer once the message is queued.
	WriteTimeout time.Duration
	// PostTimeout bounds a whole POST to @connections, reading its body
	// and waiting for queue room included (default 2 s). Keep it below the
	// relay's per-call timeout (pushaws.DefaultCallTimeout, 5 s), so that a
	// stalled client is closed and answered 410 before the relay gives up.
	PostTimeout time.Duration
	// Now stamps connectedAt, requestTime and lastActiveAt (tests pin it);
	// the limits above run on the real clock.
	Now func() time.Time
}

func (o WebSocketOptions) withDefaults() WebSocketOptions {
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = 32 << 10
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 128 << 10
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 10 * time.Minute
	}
	if o.MaxConnAge <= 0 {
		o.MaxConnAge = 2 * time.Hour
	}
	if o.SendQueue <= 0 {
		o.SendQueue = 64
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 5 * time.Second
	}
	if o.PostTimeout <= 0 {
		o.PostTimeout = 2 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Close codes and reasons of the gateway's own closes.
var (
	closeIdle     = closeStatus{websocket.StatusGoingAway, "Going away: idle timeout"}
	closeDeleted  = closeStatus{websocket.StatusNormalClosure, "Connection deleted through @connections"}
	closeShutdown = closeStatus{websocket.StatusGoingAway, "Going away: the local gateway is shutting down"}
	closeTooSlow  = closeStatus{websocket.StatusPolicyViolation, "Client too slow: it did not take its messages in time"}
)

func closeAged(age time.Duration) closeStatus {
	return closeStatus{websocket.StatusGoingAway, "Going away: connection reached its maximum age of " + age.String()}
}

// webSocketAPI serves one WebSocket API of the template at /<stage>, and its
// @connections management endpoint at /<stage>/@connections/{id}.
type webSocketAPI struct {
	api      samtemplate.WebSocketAPI
	handlers map[string]WebSocketHandler // by route key
	timeouts map[string]time.Duration    // by route key
	opts     WebSocketOptions
	log      *slog.Logger
	inv      *Invocations

	mu      sync.Mutex
	conns   map[string]*wsConn
	closing bool
	running sync.WaitGroup // every connection until its $disconnect returned
}

func newWebSocketAPI(t *samtemplate.Template, api samtemplate.WebSocketAPI, handlers map[string]WebSocketHandler, opts WebSocketOptions, log *slog.Logger, inv *Invocations) *webSocketAPI {
	a := &webSocketAPI{
		api: api, handlers: map[string]WebSocketHandler{}, timeouts: map[string]time.Duration{},
		opts: opts.withDefaults(), log: log, inv: inv, conns: map[string]*wsConn{},
	}
	for key, fn := range api.Routes {
		a.handlers[key] = handlers[fn]
		a.timeouts[key] = WebSocketIntegrationTimeout
		if f, ok := t.Function(fn); ok && f.Timeout > 0 {
			a.timeouts[key] = min(f.Timeout, WebSocketIntegrationTimeout)
		}
	}
	return a
}

// wsConn is one live connection.
type wsConn struct {
	id          string
	connectedAt time.Time
	sourceIP    string
	userAgent   string
	host        string

	ws      *websocket.Conn
	guard   *frameGuard
	send    chan []byte
	closing chan struct{} // closed once the gateway closes it: posts are 410 from then on
	done    chan struct{} // closed once the connection is over

	lastActive   atomic.Int64 // real clock, UnixNano: the idle timeout
	lastActiveAt atomic.Int64 // opts.Now, UnixMilli: GET @connections

	closeOnce sync.Once
	mu        sync.Mutex
	closedBy  *closeStatus // the gateway's own close, if it closed first
}

// close closes the connection with st, once. The writer first sends what
// is already queued (a bye posted just before a DELETE arrives before the
// close, as API Gateway delivers an accepted post), within WriteTimeout,
// then runs the close handshake (the library gives the client 5 s to
// answer); a client too slow to take its messages is closed at once.
// Before the upgrade completes, the close waits for it.
func (c *wsConn) close(st closeStatus) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closedBy = &st
		ws := c.ws
		c.mu.Unlock()
		close(c.closing)
		if ws != nil && st == closeTooSlow {
			go func() { _ = ws.Close(st.Code, st.Reason) }()
		}
	})
}

// upgraded records the accepted connection, and closes it at once if a
// close came before it.
func (c *wsConn) upgraded(ws *websocket.Conn, guard *frameGuard) {
	c.mu.Lock()
	c.ws, c.guard = ws, guard
	st := c.closedBy
	c.mu.Unlock()
	if st != nil {
		go func() { _ = ws.Close(st.Code, st.Reason) }()
	}
}

// cut ends the connection without a close handshake.
func (c *wsConn) cut() {
	c.mu.Lock()
	ws := c.ws
	c.mu.Unlock()
	if ws != nil {
		_ = ws.CloseNow()
	}
}

func (c *wsConn) closedByGateway() *closeStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.guard != nil {
		if st := c.guard.Tripped(); st != nil {
			return st
		}
	}
	return c.closedBy
}

// ServeHTTP serves the upgrade at /<stage> and @connections below it.
func (a *webSocketAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	stagePath := "/" + a.api.Stage
	p := r.URL.EscapedPath()
	if p == stagePath || p == stagePath+"/" {
		a.serveUpgrade(w, r)
		return
	}
	for _, prefix := range []string{stagePath + "/@connections/", stagePath + "/%40connections/"} {
		if rest, ok := strings.CutPrefix(p, prefix); ok {
			id, err := url.PathUnescape(rest)
			if err != nil || id == "" || strings.Contains(rest, "/") {
				writeAWSError(w, http.StatusBadRequest, "BadRequestException", "Invalid connectionId")
				return
			}
			a.serveManagement(w, r, id)
			return
		}
	}
	writeProblem(w, http.StatusNotFound, "route_not_found",
		fmt.Sprintf("the WebSocket API %s is served at %s and its management API at %s/@connections/{connectionId}", a.api.LogicalID, stagePath, stagePath), newRequestID())
}

// serveUpgrade runs $connect and, if the function accepts, the connection.
func (a *webSocketAPI) serveUpgrade(w http.ResponseWriter, r *http.Request) {
	requestID := newRequestID()
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeProblem(w, http.StatusMethodNotAllowed, "method_not_allowed", "a WebSocket API is reached with GET and Upgrade: websocket", requestID)
		return
	}
	if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") {
		w.Header().Set("Upgrade", "websocket")
		writeProblem(w, http.StatusUpgradeRequired, "upgrade_required", "this is a WebSocket API: send Connection: Upgrade and Upgrade: websocket", requestID)
		return
	}
	// Counted from the start, so that Shutdown waits for a $connect in
	// flight as well.
	a.mu.Lock()
	closing := a.closing
	if !closing {
		a.running.Add(1)
	}
	a.mu.Unlock()
	if closing {
		writeProblem(w, http.StatusServiceUnavailable, "shutting_down", "the local gateway is shutting down", requestID)
		return
	}
	defer a.running.Done()
	now := a.opts.Now()
	c := &wsConn{
		id: a.newConnectionID(), connectedAt: now, sourceIP: sourceIP(r), userAgent: r.UserAgent(), host: r.Host,
		send: make(chan []byte, a.opts.SendQueue), closing: make(chan struct{}), done: make(chan struct{}),
	}
	c.touch(a.opts.Now)

	subprotocol := ""
	if h := a.handlers["$connect"]; h != nil {
		ev := a.connectEvent(r, c, requestID, now)
		resp, err := a.invoke(r.Context(), "$connect", h, ev)
		if err != nil {
			a.log.Error("$connect failed", "api", a.api.LogicalID, "function", a.api.Routes["$connect"], "request_id", requestID, "err", err)
			writeAWSMessage(w, http.StatusInternalServerError, "Internal server error", c.id, requestID)
			return
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			if err := writeProxyResponse(w, resp); err != nil {
				a.log.Error("bad $connect response", "api", a.api.LogicalID, "request_id", requestID, "err", err)
			}
			return
		}
		subprotocol = responseHeader(resp, "Sec-WebSocket-Protocol")
	} else if _, routed := a.api.Routes["$connect"]; routed {
		writeProblem(w, http.StatusNotImplemented, "not_implemented",
			fmt.Sprintf("%s has no handler in this build of the local stack", a.api.Routes["$connect"]), requestID)
		return
	}

	gw := &guardWriter{ResponseWriter: w, newGuard: func(conn net.Conn, prefix []byte) *frameGuard {
		return newFrameGuard(conn, prefix, a.opts.MaxFrameBytes, a.opts.MaxMessageBytes, func() { c.touch(a.opts.Now) })
	}}
	opts := &websocket.AcceptOptions{InsecureSkipVerify: true} // API Gateway checks no Origin
	if subprotocol != "" {
		opts.Subprotocols = []string{subprotocol}
	}
	// Registered before the 101 goes out: a client that has its upgrade can
	// be posted to at once (posts wait in its queue for the writer).
	a.mu.Lock()
	a.conns[c.id] = c
	a.mu.Unlock()
	ws, err := websocket.Accept(gw, r, opts)
	if err != nil {
		a.mu.Lock()
		delete(a.conns, c.id)
		a.mu.Unlock()
		close(c.done)
		// The function was told the client connected; tell it that it left.
		a.log.Warn("WebSocket upgrade failed after $connect accepted", "api", a.api.LogicalID, "connection_id", c.id, "err", err)
		a.disconnect(c, websocket.StatusAbnormalClosure, "upgrade failed")
		return
	}
	ws.SetReadLimit(a.opts.MaxMessageBytes) // the guard counts first; this is a backstop
	c.upgraded(ws, gw.guard)
	a.mu.Lock()
	closing = a.closing
	a.mu.Unlock()
	if closing {
		c.close(closeShutdown)
	}
	a.run(c)
}

// run serves an accepted connection until it ends, then runs $disconnect.
func (a *webSocketAPI) run(c *wsConn) {
	var wg sync.WaitGroup
	wg.Go(func() { a.writeLoop(c) })
	wg.Go(func() { a.watch(c) })

	code, reason := a.readLoop(c)

	a.mu.Lock()
	delete(a.conns, c.id)
	a.mu.Unlock()
	close(c.done)
	c.cut()
	wg.Wait()
	a.disconnect(c, code, reason)
}

// readLoop invokes $default for each client message until the connection
// ends, and returns the close status to report to $disconnect.
func (a *webSocketAPI) readLoop(c *wsConn) (websocket.StatusCode, string) {
	ctx := context.Background()
	for {
		_, data, err := c.ws.Read(ctx)
		if err != nil {
			if st := c.closedByGateway(); st != nil {
				return st.Code, st.Reason
			}
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, ce.Reason
			}
			return websocket.StatusAbnormalClosure, "Connection closed abnormally"
		}
		h := a.handlers["$default"]
		if h == nil {
			continue // API Gateway drops a message no route takes
		}
		requestID := newRequestID()
		ev := a.event(c, "$default", "MESSAGE", requestID, a.opts.Now())
		ev.RequestContext.MessageID = newRequestID()
		ev.Body = string(data)
		if _, err := a.invoke(ctx, "$default", h, ev); err != nil {
			// What API Gateway tells the client when the integration fails.
			a.log.Error("$default failed", "api", a.api.LogicalID, "function", a.api.Routes["$default"], "request_id", requestID, "err", err)
			b, _ := json.Marshal(map[string]string{"message": "Internal server error", "connectionId": c.id, "requestId": requestID})
			select {
			case c.send <- b:
			default:
			}
		}
	}
}

// writeLoop writes the queued messages in order, each within WriteTimeout;
// a client that does not take one in time is closed.
func (a *webSocketAPI) writeLoop(c *wsConn) {
	for {
		select {
		case <-c.done:
			return
		case <-c.closing:
			a.flushAndClose(c)
			return
		case data := <-c.send:
			ctx, cancel := context.WithTimeout(context.Background(), a.opts.WriteTimeout)
			err := c.ws.Write(ctx, websocket.MessageText, data)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				c.close(closeTooSlow)
			}
			if err != nil {
				return // a broken connection: the read loop reports how it ended
			}
		}
	}
}

// flushAndClose writes what is still queued, all of it within one
// WriteTimeout, then closes with the gateway's status (unless the
// connection was closed as too slow: close did that already).
func (a *webSocketAPI) flushAndClose(c *wsConn) {
	st := c.closedByGateway()
	if st == nil || *st == closeTooSlow {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.WriteTimeout)
	defer cancel()
	for flushed := false; !flushed; {
		select {
		case data := <-c.send:
			if c.ws.Write(ctx, websocket.MessageText, data) != nil {
				flushed = true
			}
		default:
			flushed = true
		}
	}
	_ = c.ws.Close(st.Code, st.Reason)
}

// watch closes the connection when it idles out or reaches its maximum age.
func (a *webSocketAPI) watch(c *wsConn) {
	age := time.NewTimer(a.opts.MaxConnAge)
	defer age.Stop()
	idle := time.NewTimer(a.opts.IdleTimeout)
	defer idle.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-age.C:
			c.close(closeAged(a.opts.MaxConnAge))
			return
		case <-idle.C:
			quiet := time.Duration(time.Now().UnixNano() - c.lastActive.Load())
			if quiet >= a.opts.IdleTimeout {
				c.close(closeIdle)
				return
			}
			idle.Reset(a.opts.IdleTimeout - quiet)
		}
	}
}

func (c *wsConn) touch(now func() time.Time) {
	c.lastActive.Store(time.Now().UnixNano())
	c.lastActiveAt.Store(now().UnixMilli())
}

// disconnect runs $disconnect once for c, with the close status.
func (a *webSocketAPI) disconnect(c *wsConn, code websocket.StatusCode, reason string) {
	h := a.handlers["$disconnect"]
	if h == nil {
		return
	}
	requestID := newRequestID()
	ev := a.event(c, "$disconnect", "DISCONNECT", requestID, a.opts.Now())
	ev.Headers = map[string]string{"Host": c.host, "X-Forwarded-For": c.sourceIP}
	ev.MultiValueHeaders = map[string][]string{"Host": {c.host}, "X-Forwarded-For": {c.sourceIP}}
	ev.RequestContext.DisconnectStatusCode = int64(code)
	ev.RequestContext.DisconnectReason = &reason
	if _, err := a.invoke(context.Background(), "$disconnect", h, ev); err != nil {
		a.log.Error("$disconnect failed", "api", a.api.LogicalID, "function", a.api.Routes["$disconnect"], "connection_id", c.id, "err", err)
	}
}

// invoke calls h with the route's timeout, counting the invocation and
// turning a panic into an error as the Lambda runtime would.
func (a *webSocketAPI) invoke(ctx context.Context, routeKey string, h WebSocketHandler, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	a.inv.Add(a.api.Routes[routeKey])
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeouts[routeKey])
	defer cancel()
	return callHandler(ctx, h, ev)
}

// event is the part every route's event shares.
func (a *webSocketAPI) event(c *wsConn, routeKey, eventType, requestID string, now time.Time) events.APIGatewayWebsocketProxyRequest {
	domain := c.host
	if h, _, err := net.SplitHostPort(c.host); err == nil {
		domain = h
	}
	return events.APIGatewayWebsocketProxyRequest{
		RequestContext: events.APIGatewayWebsocketProxyRequestContext{
			RouteKey:          routeKey,
			EventType:         eventType,
			ExtendedRequestID: requestID,
			RequestTime:       now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			MessageDirection:  "IN",
			Stage:             a.api.Stage,
			ConnectedAt:       c.connectedAt.UnixMilli(),
			RequestTimeEpoch:  now.UnixMilli(),
			Identity:          events.APIGatewayRequestIdentity{SourceIP: c.sourceIP, UserAgent: c.userAgent},
			RequestID:         requestID,
			DomainName:        domain,
			ConnectionID:      c.id,
			APIID:             "local",
		},
	}
}

// connectEvent is the $connect event: the handshake's headers (last value
// in headers, every value in multiValueHeaders) and query string, with the
// headers API Gateway adds.
func (a *webSocketAPI) connectEvent(r *http.Request, c *wsConn, requestID string, now time.Time) events.APIGatewayWebsocketProxyRequest {
	ev := a.event(c, "$connect", "CONNECT", requestID, now)
	ev.Headers, ev.MultiValueHeaders = map[string]string{}, map[string][]string{}
	set := func(name string, values ...string) {
		ev.Headers[name] = values[len(values)-1]
		ev.MultiValueHeaders[name] = values
	}
	set("Host", r.Host)
	for name, values := range r.Header {
		if len(values) > 0 {
			set(wireHeaderName(name), values...)
		}
	}
	port := "80"
	if _, p, err := net.SplitHostPort(r.Host); err == nil {
		port = p
	}
	xff := c.sourceIP
	if prior := r.Header.Get("X-Forwarded-For"); prior != "" {
		xff = prior + ", " + c.sourceIP
	}
	set("X-Forwarded-For", xff)
	set("X-Forwarded-Port", port)
	set("X-Forwarded-Proto", "http")
	set("X-Amzn-Trace-Id", newTraceID(now))
	if r.URL.RawQuery != "" {
		values, _ := url.ParseQuery(r.URL.RawQuery)
		if len(values) > 0 {
			ev.QueryStringParameters, ev.MultiValueQueryStringParameters = map[string]string{}, map[string][]string{}
			for k, v := range values {
				ev.QueryStringParameters[k] = v[len(v)-1]
				ev.MultiValueQueryStringParameters[k] = v
			}
		}
	}
	return ev
}

// wireHeaderNames spell the handshake headers as clients send them;
// net/http canonicalises names (Sec-Websocket-Key), and API Gateway passes
// them as sent. Functions should look headers up case-insensitively anyway.
var wireHeaderNames = map[string]string{
	"Sec-Websocket-Key":        "Sec-WebSocket-Key",
	"Sec-Websocket-Version":    "Sec-WebSocket-Version",
	"Sec-Websocket-Extensions": "Sec-WebSocket-Extensions",
	"Sec-Websocket-Protocol":   "Sec-WebSocket-Protocol",
}

func wireHeaderName(canonical string) string {
	if n, ok := wireHeaderNames[canonical]; ok {
		return n
	}
	return canonical
}

// serveManagement is the @connections API: POST sends, GET describes,
// DELETE closes. It takes any credentials, as a local emulator may.
func (a *webSocketAPI) serveManagement(w http.ResponseWriter, r *http.Request, id string) {
	a.mu.Lock()
	c := a.conns[id]
	a.mu.Unlock()
	switch r.Method {
	case http.MethodPost:
		// One bound for the whole POST, body included, so that the answer
		// comes before the relay's per-call timeout whatever stalls.
		deadline := time.Now().Add(a.opts.PostTimeout)
		_ = http.NewResponseController(w).SetReadDeadline(deadline) // not every writer supports it; the queue wait is bounded anyway
		body, err := io.ReadAll(io.LimitReader(r.Body, a.opts.MaxMessageBytes+1))
		if err != nil {
			writeAWSError(w, http.StatusBadRequest, "BadRequestException", fmt.Sprintf("the request body could not be read; it must arrive within %s", a.opts.PostTimeout))
			return
		}
		if int64(len(body)) > a.opts.MaxMessageBytes {
			writeAWSError(w, http.StatusRequestEntityTooLarge, "PayloadTooLargeException",
				fmt.Sprintf("Message too long: the limit is %d bytes", a.opts.MaxMessageBytes))
			return
		}
		if c == nil {
			writeGone(w)
			return
		}
		ctx, cancel := context.WithDeadlineCause(r.Context(), deadline, errPostTimeout)
		defer cancel()
		switch err := a.post(ctx, c, body); {
		case err == nil:
			w.WriteHeader(http.StatusOK)
		case errors.Is(err, net.ErrClosed):
			writeGone(w)
		default:
			// The caller hung up: nobody reads an answer, and the message
			// was not queued, so it is not sent either.
			a.log.Info("POST to @connections abandoned by its caller before the message was queued", "api", a.api.LogicalID, "connection_id", c.id, "err", err)
		}
	case http.MethodGet:
		if c == nil {
			writeGone(w)
			return
		}
		const iso = "2006-01-02T15:04:05.000Z"
		b, _ := json.Marshal(map[string]any{
			"connectedAt":  c.connectedAt.UTC().Format(iso),
			"identity":     map[string]string{"sourceIp": c.sourceIP, "userAgent": c.userAgent},
			"lastActiveAt": time.UnixMilli(c.lastActiveAt.Load()).UTC().Format(iso),
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	case http.MethodDelete:
		if c == nil {
			writeGone(w)
			return
		}
		c.close(closeDeleted)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "POST, GET, DELETE")
		writeAWSError(w, http.StatusMethodNotAllowed, "MethodNotAllowedException", "@connections takes POST, GET and DELETE")
	}
}

// errPostTimeout is the cause of a POST's context when PostTimeout passed.
var errPostTimeout = errors.New("PostTimeout passed")

// post queues data for c and returns once it is queued, as API Gateway
// answers once it has taken a message; c's writer sends it. Posts to c
// queue in the order they arrive, and only they wait on c: when its queue
// is full they wait for room until ctx ends. If PostTimeout ended it, the
// client is too slow and is closed with 1008. net.ErrClosed means c is
// closing or gone (410); any other error, that the caller hung up.
func (a *webSocketAPI) post(ctx context.Context, c *wsConn, data []byte) error {
	// A closing connection takes nothing more: a post that follows one
	// refused must not reach the client after a gap.
	select {
	case <-c.closing:
		return net.ErrClosed
	case <-c.done:
		return net.ErrClosed
	default:
	}
	select {
	case c.send <- data:
		return nil
	default:
	}
	a.log.Warn("WebSocket client not taking its messages: send queue full", "api", a.api.LogicalID, "connection_id", c.id, "queued", cap(c.send), "bytes", len(data))
	select {
	case c.send <- data:
		return nil
	case <-c.closing:
		return net.ErrClosed
	case <-c.done:
		return net.ErrClosed
	case <-ctx.Done():
		if context.Cause(ctx) == errPostTimeout {
			c.close(closeTooSlow)
			return net.ErrClosed
		}
		return ctx.Err()
	}
}

// Shutdown closes every connection with 1001 and waits, until ctx is done,
// for their $disconnect to return. New upgrades are refused from now on.
func (a *webSocketAPI) Shutdown(ctx context.Context) error {
	a.mu.Lock()
	a.closing = true
	conns := make([]*wsConn, 0, len(a.conns))
	for _, c := range a.conns {
		conns = append(conns, c)
	}
	a.mu.Unlock()
	for _, c := range conns {
		c.close(closeShutdown)
	}
	done := make(chan struct{})
	go func() { a.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// Connections whose client ignores the close are cut.
		for _, c := range conns {
			c.cut()
		}
		return fmt.Errorf("WebSocket connections of %s still closing: %w", a.api.LogicalID, ctx.Err())
	}
}

// Connections is how many connections are live.
func (a *webSocketAPI) Connections() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns)
}

// newConnectionID mimics API Gateway's connection ids ("L0SM9cOFvHcCIhw="),
// without "/" so that a caller that forgets to escape the id in a URL path
// still reaches it.
func (a *webSocketAPI) newConnectionID() string {
	b := make([]byte, 11)
	for {
		_, _ = rand.Read(b)
		id := base64.StdEncoding.EncodeToString(b)
		if strings.Contains(id, "/") {
			continue
		}
		a.mu.Lock()
		_, taken := a.conns[id]
		a.mu.Unlock()
		if !taken {
			return id
		}
	}
}

func sourceIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// responseHeader looks name up case-insensitively in a proxy response.
func responseHeader(resp events.APIGatewayProxyResponse, name string) string {
	for k, v := range resp.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	for k, vs := range resp.MultiValueHeaders {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

// writeProxyResponse answers an upgrade request the function refused, as
// API Gateway does: its status, headers and body, and no upgrade.
func writeProxyResponse(w http.ResponseWriter, resp events.APIGatewayProxyResponse) error {
	return WriteResponse(w, events.APIGatewayV2HTTPResponse{
		StatusCode: resp.StatusCode, Headers: resp.Headers, MultiValueHeaders: resp.MultiValueHeaders,
		Body: resp.Body, IsBase64Encoded: resp.IsBase64Encoded,
	})
}

// writeAWSError answers as the AWS management API does: a JSON message and
// the error type in x-amzn-ErrorType, which the SDK maps to its error types.
func writeAWSError(w http.ResponseWriter, status int, errorType, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", errorType)
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"message": message})
	_, _ = w.Write(b)
}

func writeGone(w http.ResponseWriter) {
	writeAWSError(w, http.StatusGone, "GoneException", "the connection is gone")
}

// writeAWSMessage is API Gateway's own answer when the integration fails.
func writeAWSMessage(w http.ResponseWriter, status int, message, connectionID, requestID string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"message": message, "connectionId": connectionID, "requestId": requestID})
	_, _ = w.Write(b)
}
