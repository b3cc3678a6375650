package apigwlocal

import (
	"context"

	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"

	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

// URLHandler is the handler of a function invoked through its Function URL
// with InvokeMode RESPONSE_STREAM: the signature lambdaurl.Wrap returns.
//
// A panic inside the http.Handler that lambdaurl.Wrap wraps happens on
// lambdaurl's own goroutine, out of the local stack's reach: it ends the
// process, as it ends the Lambda runtime on AWS. Only a panic of the
// URLHandler itself becomes the invocation's error (502).
type URLHandler func(context.Context, *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error)

// Function URL limits the local stack enforces, as Lambda does.
const (
	// MaxURLRequestBytes is a Function URL's request payload limit (6 MB):
	// a longer body is refused with 413 before the function is invoked.
	MaxURLRequestBytes = 6 << 20
	// MaxURLResponseBytes is the response stream's limit (20 MB, Lambda's
	// documented streaming limit): the stream is cut there, the connection
	// closed without the final chunk so the client sees it truncated.
	MaxURLResponseBytes = 20 << 20
	// MaxURLTimeout is Lambda's longest function timeout; a Function URL
	// has no shorter integration timeout of its own.
	MaxURLTimeout = 15 * time.Minute
	// defaultURLTimeout is Lambda's default timeout, for a function of a
	// template built in code without one.
	defaultURLTimeout = 3 * time.Second
	// urlReadSize is how much of the response body is read, then written
	// and flushed, at a time.
	urlReadSize = 32 << 10
)

// urlFunction is one function served through its Function URL.
type urlFunction struct {
	id      string
	prefix  string // its LocalPath, e.g. /a2a/
	timeout time.Duration
	h       URLHandler
}

// urlFunctions serves every Function URL of a template under its LocalPath,
// and keeps the open invocations so that Shutdown can end their streams.
type urlFunctions struct {
	fns []urlFunction // longest prefix first
	inv *Invocations
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	closing bool
	open    map[*context.CancelFunc]struct{}
	wg      sync.WaitGroup
}

func newURLFunctions(t *samtemplate.Template, handlers map[string]URLHandler, inv *Invocations, log *slog.Logger, now func() time.Time) *urlFunctions {
	u := &urlFunctions{inv: inv, log: log, now: now, open: map[*context.CancelFunc]struct{}{}}
	for _, f := range t.URLFunctions() {
		timeout := f.Timeout
		if timeout <= 0 {
			timeout = defaultURLTimeout
		}
		u.fns = append(u.fns, urlFunction{id: f.LogicalID, prefix: f.URL.LocalPath, timeout: min(timeout, MaxURLTimeout), h: handlers[f.LogicalID]})
	}
	return u
}

// match returns the function whose LocalPath starts path, nil if none.
func (u *urlFunctions) match(path string) *urlFunction {
	for i := range u.fns {
		if strings.HasPrefix(path, u.fns[i].prefix) {
			return &u.fns[i]
		}
	}
	return nil
}

// track registers an invocation's cancel until done is called; it
// reports false once Shutdown has begun.
func (u *urlFunctions) track(cancel context.CancelFunc) (done func(), ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closing {
		return nil, false
	}
	key := &cancel
	u.open[key] = struct{}{}
	u.wg.Add(1)
	return func() {
		u.mu.Lock()
		delete(u.open, key)
		u.mu.Unlock()
		u.wg.Done()
	}, true
}

// shutdown ends every open invocation (its context is cancelled, so its
// stream ends) and waits, until ctx is done, for them to return. Requests
// arriving afterwards are answered 503.
func (u *urlFunctions) shutdown(ctx context.Context) error {
	u.mu.Lock()
	u.closing = true
	for cancel := range u.open {
		(*cancel)()
	}
	u.mu.Unlock()
	done := make(chan struct{})
	go func() { u.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("apigwlocal: Function URL invocations still open at shutdown: %w", ctx.Err())
	}
}

// serve invokes f for r as its Function URL would: the request buffered
// (at most MaxURLRequestBytes) into a LambdaFunctionURLRequest, the
// function run under its timeout and the client's connection, and its
// response streamed back as it is written.
func (u *urlFunctions) serve(w http.ResponseWriter, r *http.Request, f *urlFunction) {
	requestID := uuid.NewString() // a random UUID, the form of Lambda's request ids
	w.Header().Set("X-Amzn-Requestid", requestID)
	// The client going away or the timeout passing cancels the function,
	// as does Shutdown.
	ctx, cancel := context.WithTimeout(r.Context(), f.timeout)
	defer cancel()
	done, ok := u.track(cancel)
	if !ok {
		writeURLError(w, http.StatusServiceUnavailable, "Service Unavailable")
		return
	}
	defer done()
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxURLRequestBytes+1))
	if err != nil {
		writeURLError(w, http.StatusBadRequest, "Bad Request")
		return
	}
	if len(body) > MaxURLRequestBytes {
		writeURLError(w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("Request must be smaller than %d bytes for the InvokeFunction operation", MaxURLRequestBytes))
		return
	}
	if f.h == nil {
		writeProblem(w, http.StatusNotImplemented, "not_implemented",
			fmt.Sprintf("%s has no handler in this build of the local stack", f.id), requestID)
		return
	}
	ev := BuildURLEvent(r, body, requestID, u.now())
	u.inv.Add(f.id)
	resp, err := invokeURL(ctx, f.h, ev)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone: nobody to answer
		}
		// As on AWS, the cause is in the function's log and the client gets
		// a bare 502.
		u.log.Error("function invocation failed", "function", f.id, "request_id", requestID, "err", err)
		writeURLError(w, http.StatusBadGateway, "Internal Server Error")
		return
	}
	u.stream(ctx, w, f, requestID, resp)
}

// invokeURL calls h and returns its response once it has one (the function
// has written its status and headers): a handler that neither answers nor
// heeds ctx is given up on when ctx is done, and its late response closed.
func invokeURL(ctx context.Context, h URLHandler, ev events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
	type result struct {
		resp *events.LambdaFunctionURLStreamingResponse
		err  error
	}
	answered := make(chan result, 1)
	go func() {
		resp, err := callHandler(ctx, h, &ev)
		answered <- result{resp, err}
	}()
	select {
	case res := <-answered:
		if res.err == nil && res.resp == nil {
			res.err = errors.New("handler returned no response")
		}
		if res.err != nil && res.resp != nil {
			closeURLBody(res.resp)
		}
		return res.resp, res.err
	case <-ctx.Done():
		go func() {
			if res := <-answered; res.resp != nil {
				closeURLBody(res.resp)
			}
		}()
		return nil, fmt.Errorf("the function did not answer: %w", context.Cause(ctx))
	}
}

// stream writes resp's status, headers and cookies, then copies its body to
// the client as it arrives, flushing after every read so that each
// server-sent event reaches the client when written. It stops when the body
// ends, when ctx is done (timeout, client gone, shutdown) and, cutting the
// connection, at MaxURLResponseBytes.
func (u *urlFunctions) stream(ctx context.Context, w http.ResponseWriter, f *urlFunction, requestID string, resp *events.LambdaFunctionURLStreamingResponse) {
	defer closeURLBody(resp)
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusOK // what Lambda assumes, as the prelude does
	}
	if status < 100 || status > 599 {
		u.log.Error("bad function response", "function", f.id, "request_id", requestID, "err", fmt.Sprintf("status %d", status))
		writeURLError(w, http.StatusBadGateway, "Internal Server Error")
		return
	}
	h := w.Header()
	for k, v := range resp.Headers {
		h.Set(k, v)
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	if _, ok := h["Content-Type"]; !ok {
		// Pass on what the function said, nothing more: no sniffing.
		h["Content-Type"] = nil
	}
	rc := http.NewResponseController(w)
	w.WriteHeader(status)
	if err := rc.Flush(); err != nil {
		return
	}
	if resp.Body == nil {
		return
	}

	// The body is read on a goroutine of its own so that a function that
	// stops writing cannot hold the stream past ctx.
	chunks := make(chan []byte)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			buf := make([]byte, urlReadSize)
			n, err := resp.Body.Read(buf)
			if n > 0 {
				select {
				case chunks <- buf[:n]:
				case <-stop:
					return
				}
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()
	sent := 0
	for {
		select {
		case b := <-chunks:
			cut := sent+len(b) > MaxURLResponseBytes
			if cut {
				b = b[:MaxURLResponseBytes-sent]
			}
			if _, err := w.Write(b); err != nil {
				return // the client is gone
			}
			sent += len(b)
			if err := rc.Flush(); err != nil {
				return
			}
			if cut {
				u.log.Error("response stream cut", "function", f.id, "request_id", requestID, "limit_bytes", MaxURLResponseBytes)
				// Closes the connection without the final chunk: the
				// client must not take a truncated stream for a whole one.
				panic(http.ErrAbortHandler)
			}
		case err := <-readErr:
			if !errors.Is(err, io.EOF) {
				u.log.Error("response stream failed", "function", f.id, "request_id", requestID, "err", err)
			}
			return
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				u.log.Warn("function timed out while streaming", "function", f.id, "request_id", requestID, "timeout", f.timeout)
			}
			return
		}
	}
}

// closeURLBody closes the response's body, which tells a lambdaurl handler
// still writing that nobody reads any more.
func closeURLBody(resp *events.LambdaFunctionURLStreamingResponse) {
	if c, ok := resp.Body.(io.Closer); ok {
		_ = c.Close()
	}
}

// writeURLError answers for the Function URL itself, in its plain form.
func writeURLError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

// BuildURLEvent turns an HTTP request into the event Lambda builds for a
// Function URL: version 2.0, the whole path (a Function URL sees every path
// of its host), header names lower-cased and repeated values joined with
// commas, cookies moved out of the headers, query values decoded and joined
// with commas, a non-text body base64-encoded, and the requestContext of an
// AuthType NONE URL (accountId "anonymous") whose domain is the request's
// Host.
func BuildURLEvent(r *http.Request, body []byte, requestID string, now time.Time) events.LambdaFunctionURLRequest {
	p := newPayload2(r, body, now)
	// Unlike API Gateway, Lambda sends no content-length for an empty body.
	if len(body) > 0 {
		p.headers["content-length"] = strconv.Itoa(len(body))
	}
	return events.LambdaFunctionURLRequest{
		Version:               "2.0",
		RawPath:               r.URL.EscapedPath(),
		RawQueryString:        r.URL.RawQuery,
		Cookies:               p.cookies,
		Headers:               p.headers,
		QueryStringParameters: p.query,
		RequestContext: events.LambdaFunctionURLRequestContext{
			AccountID: "anonymous",
			RequestID: requestID,
			// On AWS the domain is <url-id>.lambda-url.<region>.on.aws, and
			// the url-id is both the prefix and the apiId.
			APIID:        p.prefix,
			DomainName:   r.Host,
			DomainPrefix: p.prefix,
			Time:         p.time,
			TimeEpoch:    p.timeEpoch,
			HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{
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
