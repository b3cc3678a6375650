// Package meshclient is the Go client of the Agent Mesh HTTP API (v1) used by
// meshd and by anything else that acts as an agent.
//
// It exchanges the agent's API key for a JWT and keeps it fresh (concurrent
// callers share one fetch, each bounded by its own context), and decodes
// every API error (application/problem+json) into a typed *APIError.
//
// Retries. A failed attempt is retried after a capped, jittered exponential
// pause (RetryPolicy) until MaxAttempts, the context's deadline or, when the
// context has none, MaxElapsed; a pause that would outlast the deadline is
// not taken and the last error is returned. What is retried:
//   - 429, always, after at least its Retry-After: the server refused the
//     request before doing anything;
//   - a connection that could not be made (a dial error): the request never
//     reached the server;
//   - 5xx (after at least any Retry-After) and every other transport error
//     (reset, cut answer, attempt timeout) only for a call that is safe to
//     repeat, which is every call except CreateGroup;
//   - 401 on an authenticated call, once, with a fresh token.
//
// Every other 4xx (408 included) and an answer that does not decode are
// returned at once.
//
// Writes are safe to repeat either by nature (a heartbeat, going offline,
// friend requests, blocks, group members) or by a message_id: Send, Reply,
// UpdateStatus, SendGroup and AddArtifact mint one before the first attempt
// (unless the caller gave one) and reuse it on every retry, and the server
// records one event per message_id, so a retried write never creates a
// second event. A caller that repeats such a call itself keeps that
// guarantee only by passing the same message_id again.
package meshclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/backoff"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/textlimit"
)

// DefaultUserAgent identifies the client to the API.
const DefaultUserAgent = "agentmesh-meshclient/1"

// Client talks to one mesh as one agent. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	apiKey    string
	http      *http.Client
	userAgent string
	retry     RetryPolicy
	clock     mesh.Clock
	log       *slog.Logger
	onRetry   func(RetryNotice)

	// mu guards the cached token and the fetch in flight; it is never held
	// across a network call.
	mu       sync.Mutex
	tok      *Token
	tokExp   time.Time
	tokTTL   time.Duration
	tokGen   uint64      // the generation of the fetch that stored tok
	fetching *tokenFetch // the fetch callers join, or nil
	fetches  uint64      // fetches started, numbering their generations
}

// RetryPolicy bounds retries of one call.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts including the first; 0 means
	// "until the context ends or MaxElapsed passes".
	MaxAttempts int
	// Base is the first backoff; each retry doubles it up to Max. The actual
	// sleep is drawn uniformly from [d/2, d] so many clients do not retry in
	// lockstep.
	Base, Max time.Duration
	// MaxElapsed caps the total time of one call (plus its long-poll wait)
	// when the context has no deadline, so a retrying call never hangs
	// forever.
	MaxElapsed time.Duration
	// AttemptTimeout bounds one attempt beyond its long-poll wait, so a
	// server that accepts a connection and never answers costs one retry,
	// not the whole budget. Default 30 s.
	AttemptTimeout time.Duration
}

// DefaultRetry is the policy New uses.
var DefaultRetry = RetryPolicy{Base: 200 * time.Millisecond, Max: 10 * time.Second, MaxElapsed: 2 * time.Minute, AttemptTimeout: 30 * time.Second}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient replaces the HTTP client (e.g. for custom TLS). Its Timeout
// should be zero or longer than the longest inbox long-poll (20 s).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithRetry replaces the retry policy.
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.retry = p } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithClock injects the clock used for token expiry.
func WithClock(clock mesh.Clock) Option { return func(c *Client) { c.clock = clock } }

// WithLogger sets where retries are logged (at debug/warn level; never
// credentials). Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// RetryNotice describes a failed attempt that is about to be retried.
type RetryNotice struct {
	Method, Path string
	Attempt      int           // the attempt that failed, from 1
	Wait         time.Duration // the pause before the next one
	Err          error
	// Unreachable: the attempt never got an HTTP answer (refused, reset,
	// timed out, name not found), as opposed to a 5xx or 429.
	Unreachable bool
}

// WithRetryNotify calls f before each retry pause, so a command line tool
// can tell its user at once that the API does not answer (and count the
// attempts) instead of staying silent through the whole retry budget.
func WithRetryNotify(f func(RetryNotice)) Option { return func(c *Client) { c.onRetry = f } }

// New returns a client for the API at baseURL (e.g. "http://127.0.0.1:8080")
// authenticating with apiKey. A malformed baseURL surfaces as an error on the
// first call.
func New(baseURL, apiKey string, opts ...Option) *Client {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || u.Scheme == "" || u.Host == "" {
		u = nil
	}
	c := &Client{
		base:      u,
		apiKey:    apiKey,
		http:      &http.Client{},
		userAgent: DefaultUserAgent,
		retry:     DefaultRetry,
		clock:     mesh.SystemClock,
		log:       slog.Default(),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL returns the API's base URL as configured.
func (c *Client) BaseURL() string {
	if c.base == nil {
		return ""
	}
	return c.base.String()
}

// KafkaInfo says where the agent's inbox topic is and how to authenticate.
type KafkaInfo = api.KafkaInfo

// Token is the answer of POST /v1/auth/token. Token and the inbox keys are
// secrets: the type's String and LogValue redact them.
type Token = api.TokenResponse

// InboxKey is the agent's AES-256-GCM key (base64 of 32 bytes) for the
// records sealed under KeyEpoch.
type InboxKey = api.InboxKey

// refreshMargin is how long before expiry a cached token is replaced.
const refreshMargin = 5 * time.Minute

// Token returns the cached token, fetching a new one when there is none or
// it expires within 5 minutes (or within half its lifetime, for short-lived
// tokens). Concurrent callers share one fetch; each waits only as long as its
// own ctx allows and then returns ctx.Err(), while the fetch goes on for the
// callers still waiting.
func (c *Client) Token(ctx context.Context) (Token, error) {
	c.mu.Lock()
	margin := min(refreshMargin, c.tokTTL/2)
	if c.tok != nil && c.clock().Add(margin).Before(c.tokExp) {
		t := *c.tok
		c.mu.Unlock()
		return t, nil
	}
	if err := ctx.Err(); err != nil {
		c.mu.Unlock()
		return Token{}, err
	}
	f := c.fetching
	if f == nil {
		f = c.startFetchLocked(ctx)
	}
	return c.awaitFetchLocked(ctx, f)
}

// RefreshToken drops the cached token and fetches a new one (e.g. after the
// agent's key epoch changed). It does not join a fetch already in flight,
// which may have been answered before the change; callers arriving later
// join this one.
func (c *Client) RefreshToken(ctx context.Context) (Token, error) {
	c.mu.Lock()
	c.tok = nil
	if err := ctx.Err(); err != nil {
		c.mu.Unlock()
		return Token{}, err
	}
	return c.awaitFetchLocked(ctx, c.startFetchLocked(ctx))
}

// tokenFetch is one POST /v1/auth/token shared by every caller waiting for
// it. It runs detached from any one caller's cancellation and is cancelled
// when its last waiter gives up, so a fetch nobody waits for does not retry
// on for minutes. golang.org/x/sync/singleflight shares a call the same way
// but cannot cancel it when every caller has left, hence this small copy.
type tokenFetch struct {
	gen     uint64
	done    chan struct{} // closed once tok and err are set
	tok     Token
	err     error
	waiters int // guarded by Client.mu
	cancel  context.CancelFunc
}

// startFetchLocked starts a fetch that callers arriving from now on join.
// ctx lends the fetch its values, not its cancellation or deadline. c.mu
// must be held.
func (c *Client) startFetchLocked(ctx context.Context) *tokenFetch {
	c.fetches++
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &tokenFetch{gen: c.fetches, done: make(chan struct{}), cancel: cancel}
	c.fetching = f
	go func() {
		defer cancel()
		tok, err := c.fetchToken(fctx)
		c.mu.Lock()
		// A refresh started after this fetch may have stored a newer token
		// already: an older answer must not replace it.
		if err == nil && f.gen > c.tokGen {
			c.tok, c.tokGen = &tok, f.gen
			c.tokTTL = time.Duration(tok.ExpiresIn) * time.Second
			c.tokExp = c.clock().Add(c.tokTTL)
		}
		if c.fetching == f {
			c.fetching = nil
		}
		f.tok, f.err = tok, err
		c.mu.Unlock()
		close(f.done)
	}()
	return f
}

// awaitFetchLocked waits for f or for ctx, whichever ends first. It is
// called with c.mu held and releases it before waiting.
func (c *Client) awaitFetchLocked(ctx context.Context, f *tokenFetch) (Token, error) {
	f.waiters++
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.tok, f.err
	case <-ctx.Done():
		c.mu.Lock()
		f.waiters--
		if f.waiters == 0 {
			// Nobody waits any more: stop the fetch, and let the next
			// caller start a fresh one rather than join a cancelled one.
			f.cancel()
			if c.fetching == f {
				c.fetching = nil
			}
		}
		c.mu.Unlock()
		return Token{}, ctx.Err()
	}
}

// fetchToken asks the API for a token; it touches no client state.
func (c *Client) fetchToken(ctx context.Context) (Token, error) {
	if c.apiKey == "" {
		return Token{}, errors.New("meshclient: no API key configured")
	}
	var t Token
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/auth/token", body: map[string]string{"api_key": c.apiKey}, retry: true}, &t)
	if err != nil {
		return Token{}, err
	}
	if t.Token == "" || t.AgentID == "" || t.RoutingID == "" || t.ExpiresIn <= 0 {
		return Token{}, errors.New("meshclient: token response lacks token, agent_id, routing_id or expires_in")
	}
	if _, err := t.Keys(); err != nil {
		return Token{}, err
	}
	return t, nil
}

func (c *Client) dropToken(stale string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Only drop the token the failed call used: another goroutine may have
	// refreshed it already.
	if c.tok != nil && c.tok.Token == stale {
		c.tok = nil
	}
}

// NewMessageID returns a random UUID v4, the form of client-minted
// message_ids.
func NewMessageID() string { return uuid.NewString() }

// SendRequest is POST /v1/messages. MessageID is minted by Send when empty.
type SendRequest = api.SendRequest

// SendResult identifies the message a write created (or, for a retried
// write, the one it had created).
type SendResult = api.SendResult

// Send sends a message to another agent (mesh_send_message). A retry reuses
// the same message_id, so the server creates at most one message.
func (c *Client) Send(ctx context.Context, req SendRequest) (SendResult, error) {
	if req.MessageID == "" {
		req.MessageID = NewMessageID()
	}
	var res SendResult
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/messages", body: req, auth: true, retry: true}, &res)
	if res.MessageID == "" && err == nil {
		res.MessageID = req.MessageID
	}
	return res, err
}

// postToTask posts body to the route suffix of task taskID and decodes the
// answer; op names the calling method in the error for a missing id. It is
// retried: body carries its message_id, so the server applies it once.
func postToTask[R any](ctx context.Context, c *Client, op, taskID, suffix string, body any) (R, error) {
	var res R
	if taskID == "" {
		return res, errors.New("meshclient: " + op + " needs a task id")
	}
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/tasks/" + url.PathEscape(taskID) + suffix, body: body, auth: true, retry: true}, &res)
	return res, err
}

// ReplyRequest is POST /v1/tasks/{id}/messages. MessageID is minted by Reply
// when empty.
type ReplyRequest = api.ReplyRequest

// Reply adds a message to a task the agent takes part in (mesh_reply),
// retried with one message_id like Send.
func (c *Client) Reply(ctx context.Context, taskID string, req ReplyRequest) (SendResult, error) {
	if req.MessageID == "" {
		req.MessageID = NewMessageID()
	}
	res, err := postToTask[SendResult](ctx, c, "Reply", taskID, "/messages", req)
	if res.MessageID == "" && err == nil {
		res.MessageID = req.MessageID
	}
	if res.TaskID == "" && err == nil {
		res.TaskID = taskID
	}
	return res, err
}

// StatusRequest is POST /v1/tasks/{id}/status. MessageID is minted by
// UpdateStatus when empty, so a retried move is applied once.
type StatusRequest = api.StatusRequest

// StatusMessage is the optional note of a status move.
type StatusMessage = api.StatusNote

// StatusResult is the answer of a status move.
type StatusResult = api.StatusResult

// UpdateStatus moves a task's state machine; an illegal move is an *APIError
// with status 409. Retried with one message_id like Send.
func (c *Client) UpdateStatus(ctx context.Context, taskID string, req StatusRequest) (StatusResult, error) {
	if req.MessageID == "" {
		req.MessageID = NewMessageID()
	}
	return postToTask[StatusResult](ctx, c, "UpdateStatus", taskID, "/status", req)
}

// InboxPage is one page of GET /v1/inbox: events in seq order with the body
// opened, the cursor for the next call and the oldest seq retention holds.
type InboxPage = api.InboxPage

// MaxInboxWait is the longest long-poll the API honors.
const MaxInboxWait = 20 * time.Second

// Inbox reads the agent's events with seq > after (at most limit; 0 = the
// server's default), long-polling up to wait (capped at 20 s) when there are
// none yet.
func (c *Client) Inbox(ctx context.Context, after int64, limit int, wait time.Duration) (InboxPage, error) {
	q := url.Values{}
	q.Set("after", strconv.FormatInt(after, 10))
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	wait = min(wait, MaxInboxWait)
	if wait > 0 {
		q.Set("wait", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	}
	var page InboxPage
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/inbox", query: q, auth: true, retry: true, longPoll: wait}, &page)
	return page, err
}

// HeartbeatResult is the answer of a heartbeat: the agent's presence, the
// newest seq of its inbox (lets meshd notice a missing newest event) and
// its inbox key epoch (when it moves, a new token brings the new key).
type HeartbeatResult = api.HeartbeatResult

// Heartbeat reports the agent alive from instanceID (random per meshd start);
// stats, when non-nil, is sent as the optional stats object.
func (c *Client) Heartbeat(ctx context.Context, instanceID string, stats any) (HeartbeatResult, error) {
	body := struct {
		InstanceID string `json:"instance_id"`
		Stats      any    `json:"stats,omitempty"`
	}{instanceID, stats}
	var res HeartbeatResult
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/agents/me/heartbeat", body: body, auth: true, retry: true}, &res)
	return res, err
}

// GoOffline marks the agent draining (meshd stop) and returns its presence.
// With a non-empty instanceID the server ignores the stop if another
// instance has replaced this one since (a late stop must not drain it).
func (c *Client) GoOffline(ctx context.Context, instanceID string) (string, error) {
	var q url.Values
	if instanceID != "" {
		q = url.Values{"instance_id": {instanceID}}
	}
	var res struct {
		Status string `json:"status"`
	}
	err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/agents/me/online", query: q, auth: true, retry: true}, &res)
	return res.Status, err
}

// Health checks GET /v1/health (no auth).
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, call{method: http.MethodGet, path: "/v1/health", retry: true}, nil)
}

// APIError is an error answer of the API, decoded from its
// application/problem+json document.
type APIError struct {
	Status int    // HTTP status
	Code   string // stable machine code, e.g. "not_reachable"; "http_<status>" when the answer was not a problem document
	Detail string // human explanation
	// RetryAfter is the server's Retry-After, when it sent one.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("mesh API %d %s: %s", e.Status, e.Code, e.Detail)
	}
	return fmt.Sprintf("mesh API %d %s", e.Status, e.Code)
}

// IsPermanent reports whether err is an answer that retrying cannot change:
// an *APIError with a 4xx status other than 408 and 429 (a refused key, a
// forbidden route, a finished task, bad input). Network errors, 5xx, 408 and
// 429 are transient.
func IsPermanent(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Status >= 400 && ae.Status < 500 && ae.Status != http.StatusRequestTimeout && ae.Status != http.StatusTooManyRequests
}

// IsStatus reports whether err is an *APIError with the given HTTP status.
func IsStatus(err error, status int) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == status
}

// call describes one API request.
type call struct {
	method, path string
	query        url.Values
	body         any
	auth         bool
	// retry: safe to repeat after an ambiguous failure (idempotent or
	// protected by message_id); every call but CreateGroup is. An unsafe
	// call is still retried on 429 and on connections that never reached
	// the server.
	retry bool
	// longPoll is how long the server may legitimately hold the request.
	longPoll time.Duration
}

// do performs c with retries, decoding a 2xx JSON answer into out (if
// non-nil). A 401 on an authenticated call refreshes the token once.
func (c *Client) do(ctx context.Context, cl call, out any) error {
	if c.base == nil {
		return errors.New("meshclient: the API URL is not an absolute http(s) URL")
	}
	var body []byte
	if cl.body != nil {
		var err error
		if body, err = json.Marshal(cl.body); err != nil {
			return fmt.Errorf("meshclient: encode request: %w", err)
		}
	}
	if _, ok := ctx.Deadline(); !ok && c.retry.MaxElapsed > 0 {
		// A long-poll's own wait does not count against the retry budget.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.retry.MaxElapsed+cl.longPoll)
		defer cancel()
	}
	refreshed := false
	for attempt := 1; ; attempt++ {
		var bearer string
		if cl.auth {
			tok, err := c.Token(ctx)
			if err != nil {
				return err
			}
			bearer = tok.Token
		}
		err := c.once(ctx, cl, body, bearer, out)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err // the caller's deadline or cancellation, not the server's
		}
		var ae *APIError
		if cl.auth && !refreshed && errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			// The token may have been revoked or expired early (clock skew,
			// key rotation): one fresh token, one more try.
			refreshed = true
			c.dropToken(bearer)
			attempt--
			continue
		}
		wait, retryable := c.retryable(err, cl.retry)
		if !retryable || (c.retry.MaxAttempts > 0 && attempt >= c.retry.MaxAttempts) {
			return err
		}
		pause := max(c.backoff(attempt), wait)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < pause {
			return err // sleeping would outlive the caller's deadline
		}
		c.log.Debug("mesh API call will be retried", "method", cl.method, "path", cl.path, "attempt", attempt, "backoff", pause, "err", err)
		if c.onRetry != nil {
			var ae *APIError
			c.onRetry(RetryNotice{Method: cl.method, Path: cl.path, Attempt: attempt, Wait: pause, Err: err, Unreachable: !errors.As(err, &ae)})
		}
		if !backoff.Wait(ctx, pause) {
			return err
		}
	}
}

// retryable decides whether err may be retried and the minimum wait.
func (c *Client) retryable(err error, safe bool) (time.Duration, bool) {
	var ae *APIError
	if errors.As(err, &ae) {
		switch {
		case ae.Status == http.StatusTooManyRequests:
			// Rejected before anything was written: always safe.
			return ae.RetryAfter, true
		case ae.Status >= 500:
			return ae.RetryAfter, safe
		}
		return 0, false
	}
	var derr *decodeError
	if errors.As(err, &derr) {
		return 0, false
	}
	// Transport error. A failed dial never reached the server.
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return 0, true
	}
	return 0, safe
}

func (c *Client) backoff(attempt int) time.Duration {
	base := c.retry.Base
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	// Half of each wait is random, so clients cut off together do not come
	// back together.
	return backoff.Policy{Base: base, Max: c.retry.Max, Jitter: 0.5}.Delay(attempt)
}

type decodeError struct{ err error }

func (e *decodeError) Error() string { return "meshclient: decode response: " + e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

// maxBody bounds how much of an answer is read (an inbox page of large
// messages fits; a runaway answer does not exhaust memory).
const maxBody = 64 << 20

func (c *Client) once(ctx context.Context, cl call, body []byte, bearer string, out any) error {
	timeout := c.retry.AttemptTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+cl.longPoll)
	defer cancel()
	u := *c.base
	// cl.path is already escaped (ids go through url.PathEscape): set the
	// raw form so an id with a space or a slash stays one path segment
	// instead of being escaped twice.
	raw := strings.TrimRight(u.EscapedPath(), "/") + cl.path
	p, err := url.PathUnescape(raw)
	if err != nil {
		return err
	}
	u.Path, u.RawPath = p, raw
	u.RawQuery = cl.query.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u.String(), rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return decodeProblem(resp, data)
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &decodeError{err}
	}
	return nil
}

func decodeProblem(resp *http.Response, data []byte) *APIError {
	ae := &APIError{Status: resp.StatusCode, RetryAfter: ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var p struct {
		Code   string `json:"code"`
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(data, &p) == nil && p.Code != "" {
		ae.Code, ae.Detail = p.Code, p.Detail
		if ae.Detail == "" {
			ae.Detail = p.Title
		}
		return ae
	}
	// Not a problem document (a proxy's error page, say): keep a short,
	// printable excerpt for the operator.
	ae.Code = "http_" + strconv.Itoa(resp.StatusCode)
	excerpt := strings.TrimSpace(strings.ToValidUTF8(string(data), "?"))
	if len(excerpt) > 200 {
		excerpt = textlimit.Truncate(excerpt, 200) + "..."
	}
	ae.Detail = excerpt
	return ae
}

// MaxRetryAfter bounds what a Retry-After header is read as: callers cap
// their waits anyway, and it keeps the arithmetic far from overflow.
const MaxRetryAfter = 24 * time.Hour

// ParseRetryAfter reads a Retry-After header, delta-seconds or an HTTP
// date, as the wait it asks for at now: 0 when it is absent, malformed or
// in the past, at most MaxRetryAfter.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		return time.Duration(min(secs, uint64(MaxRetryAfter/time.Second))) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return min(at.Sub(now), MaxRetryAfter)
	}
	return 0
}
