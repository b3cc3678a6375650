package meshclient

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

var testInboxKey = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))

// fakeAPI is a scripted HTTP API: tokens are "tok-1", "tok-2", ... and only
// the newest one is accepted unless acceptAny; route handlers are per test.
type fakeAPI struct {
	t         *testing.T
	mu        sync.Mutex
	issued    int
	ttl       int
	acceptAny bool
	reject    bool // reject every bearer token (revoked key)
	routes    map[string]http.HandlerFunc
	calls     map[string]int
	bodies    map[string][]string
	// tokenGate, when set, runs before a token is issued: a test holds
	// the fetch there.
	tokenGate func(r *http.Request)
}

func newFake(t *testing.T) *fakeAPI {
	return &fakeAPI{t: t, ttl: 3600, acceptAny: true, routes: map[string]http.HandlerFunc{}, calls: map[string]int{}, bodies: map[string][]string{}}
}

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	f := newFake(t)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// inProcess is a transport that serves each request with h in goroutines of
// the test, without a network, so the test can run under testing/synctest
// and its timing is exact.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	sreq := req.Clone(req.Context()) // as a server sees it: never a nil body
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.h.ServeHTTP(rec, sreq)
	}()
	select {
	case <-done:
		return rec.Result(), nil
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

// inProcessClient is a client of f through inProcess.
func inProcessClient(f *fakeAPI, opts ...Option) *Client {
	return New("http://mesh.test", "amk_good", append([]Option{WithHTTPClient(&http.Client{Transport: inProcess{f}})}, opts...)...)
}

// waitFor fails the test if ch yields nothing within a generous deadline:
// reaching it means the code under test is stuck.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("stuck: %s did not happen within 30 s", what)
		var zero T
		return zero
	}
}

// holdTokenFetches makes f hold every token request until open is called
// or the client gives up on the request, and reports each request's
// arrival on arrived. open is also a cleanup, registered after the
// server's, so it runs before the server closes (cleanups run last first).
func holdTokenFetches(t *testing.T, f *fakeAPI) (arrived <-chan struct{}, open func()) {
	in := make(chan struct{}, 8)
	release := make(chan struct{})
	var releaseOnce sync.Once
	open = func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(open)
	f.tokenGate = func(r *http.Request) {
		in <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	return in, open
}

// tokenAsync asks c for a token on ctx in a goroutine, so the test can
// hold the fetch at the server meanwhile, and returns where the error of
// that call arrives.
func tokenAsync(ctx context.Context, c *Client) <-chan error {
	got := make(chan error, 1)
	go func() {
		_, err := c.Token(ctx)
		got <- err
	}()
	return got
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Method + " " + r.URL.Path
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.calls[key]++
	f.bodies[key] = append(f.bodies[key], string(body))
	f.mu.Unlock()
	if key == "POST /v1/auth/token" {
		var req struct {
			APIKey string `json:"api_key"`
		}
		if json.Unmarshal(body, &req) != nil || req.APIKey != "amk_good" {
			problem(w, 401, "invalid_api_key", "bad key")
			return
		}
		f.mu.Lock()
		gate := f.tokenGate
		f.mu.Unlock()
		if gate != nil {
			gate(r)
		}
		f.mu.Lock()
		f.issued++
		tok := fmt.Sprintf("tok-%d", f.issued)
		ttl := f.ttl
		f.mu.Unlock()
		writeJSON(w, 200, Token{Token: tok, ExpiresIn: ttl, AgentID: "alice", RoutingID: "rt-alice", InboxKeys: []InboxKey{{KeyEpoch: 1, Key: testInboxKey}},
			Kafka: KafkaInfo{Brokers: []string{"b:9092"}, Topic: "inbox.events", Auth: "none"}})
		return
	}
	if r.URL.Path != "/v1/health" {
		f.mu.Lock()
		want := fmt.Sprintf("Bearer tok-%d", f.issued)
		ok := !f.reject && (r.Header.Get("Authorization") == want || (f.acceptAny && strings.HasPrefix(r.Header.Get("Authorization"), "Bearer tok-")))
		f.mu.Unlock()
		if !ok {
			problem(w, 401, "invalid_token", "expired")
			return
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if h, ok := f.routes[key]; ok {
		h(w, r)
		return
	}
	problem(w, 404, "not_found", "no route "+key)
}

func (f *fakeAPI) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[key]
}

func (f *fakeAPI) sent(key string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.bodies[key]...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func problem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "urn:agentmesh:problem:" + code, "title": http.StatusText(status), "status": status, "code": code, "detail": detail})
}

// script answers successive calls of one route with the given steps.
func script(steps ...func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	var mu sync.Mutex
	i := 0
	return func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := steps[min(i, len(steps)-1)]
		i++
		mu.Unlock()
		s(w, r)
	}
}

func fastRetry() Option {
	return WithRetry(RetryPolicy{Base: time.Millisecond, Max: 5 * time.Millisecond, MaxElapsed: 10 * time.Second})
}

func TestSendMintsOneMessageIDAndReusesItOnEveryRetry(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.routes["POST /v1/messages"] = script(
		func(w http.ResponseWriter, r *http.Request) { problem(w, 503, "unavailable", "db down") },
		func(w http.ResponseWriter, r *http.Request) {
			// A connection cut mid-answer: the client cannot know whether
			// the write happened, so it must retry with the same id.
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
		},
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "1")
			problem(w, 429, "rate_limited", "slow down")
		},
		func(w http.ResponseWriter, r *http.Request) {
			var req SendRequest
			_ = json.NewDecoder(r.Body).Decode(&req)
			writeJSON(w, 202, SendResult{TaskID: "task-1", MessageID: req.MessageID, ContextID: "ctx-1"})
		},
	)
	var mu sync.Mutex
	var notices []RetryNotice
	c := New(srv.URL, "amk_good", fastRetry(), WithRetryNotify(func(n RetryNotice) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, n)
	}))
	res, err := c.Send(context.Background(), SendRequest{To: "bob", Parts: []mesh.Part{{Kind: "text", Text: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(notices) != 3 || !IsStatus(notices[2].Err, 429) || notices[2].Wait < time.Second {
		t.Errorf("Retry-After: 1 was not honored: the pause after the 429 was not at least 1 s: %+v", notices)
	}
	mu.Unlock()
	bodies := f.sent("POST /v1/messages")
	if len(bodies) != 4 {
		t.Fatalf("want 4 attempts, got %d", len(bodies))
	}
	var first SendRequest
	_ = json.Unmarshal([]byte(bodies[0]), &first)
	if first.MessageID == "" {
		t.Fatal("the first attempt carried no message_id")
	}
	for i, b := range bodies {
		var req SendRequest
		_ = json.Unmarshal([]byte(b), &req)
		if req.MessageID != first.MessageID {
			t.Errorf("attempt %d used message_id %q, want %q", i+1, req.MessageID, first.MessageID)
		}
	}
	if res.MessageID != first.MessageID || res.TaskID != "task-1" || res.ContextID != "ctx-1" {
		t.Errorf("result = %+v", res)
	}
}

func TestEveryWriteReusesItsMessageIDOnRetry(t *testing.T) {
	cases := []struct {
		name  string
		route string
		call  func(c *Client) (string, error)
	}{
		{"a reply", "POST /v1/tasks/t1/messages", func(c *Client) (string, error) {
			res, err := c.Reply(context.Background(), "t1", ReplyRequest{Parts: []mesh.Part{{Kind: "text", Text: "x"}}})
			return res.MessageID, err
		}},
		{"a status move", "POST /v1/tasks/t1/status", func(c *Client) (string, error) {
			res, err := c.UpdateStatus(context.Background(), "t1", StatusRequest{Status: mesh.TaskInputRequired,
				Message: &StatusMessage{Parts: []mesh.Part{{Kind: "text", Text: "which file?"}}}})
			return res.MessageID, err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, srv := newFakeAPI(t)
			f.routes[tc.route] = script(
				func(w http.ResponseWriter, r *http.Request) { problem(w, 502, "bad_gateway", "lambda timeout") },
				func(w http.ResponseWriter, r *http.Request) {
					var req struct {
						MessageID string `json:"message_id"`
					}
					_ = json.NewDecoder(r.Body).Decode(&req)
					writeJSON(w, 200, map[string]string{"task_id": "t1", "message_id": req.MessageID})
				},
			)
			id, err := tc.call(New(srv.URL, "amk_good", fastRetry()))
			if err != nil {
				t.Fatal(err)
			}
			bodies := f.sent(tc.route)
			if len(bodies) != 2 {
				t.Fatalf("attempts = %d, want 2", len(bodies))
			}
			for i, b := range bodies {
				if !strings.Contains(b, `"message_id":"`+id+`"`) || id == "" {
					t.Errorf("attempt %d body %s lacks message_id %q", i+1, b, id)
				}
			}
		})
	}
}

func TestGoOfflineNamesItsInstance(t *testing.T) {
	f, srv := newFakeAPI(t)
	var query string
	f.routes["DELETE /v1/agents/me/online"] = func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		writeJSON(w, 200, map[string]string{"status": "draining"})
	}
	status, err := New(srv.URL, "amk_good").GoOffline(context.Background(), "inst-7")
	if err != nil || status != "draining" || query != "instance_id=inst-7" {
		t.Errorf("status %q err %v query %q", status, err, query)
	}
}

func TestSendKeepsACallerMessageID(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.routes["POST /v1/messages"] = func(w http.ResponseWriter, r *http.Request) {
		var req SendRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		writeJSON(w, 202, SendResult{TaskID: "t", MessageID: req.MessageID})
	}
	res, err := New(srv.URL, "amk_good").Send(context.Background(), SendRequest{To: "bob", MessageID: "m-42", Parts: []mesh.Part{{Kind: "text", Text: "x"}}})
	if err != nil || res.MessageID != "m-42" {
		t.Fatalf("res=%+v err=%v", res, err)
	}
}

func TestErrorsAreTypedAndOnlySafeOnesRetried(t *testing.T) {
	cases := []struct {
		name         string
		route        string
		call         func(c *Client) error
		answer       func(w http.ResponseWriter, r *http.Request)
		wantStatus   int
		wantCode     string
		wantAttempts int
	}{
		{
			name: "a 403 problem is decoded and not retried", route: "POST /v1/messages",
			call: func(c *Client) error {
				_, err := c.Send(context.Background(), SendRequest{To: "eve", Parts: []mesh.Part{{Kind: "text", Text: "x"}}})
				return err
			},
			answer:     func(w http.ResponseWriter, r *http.Request) { problem(w, 403, "not_reachable", "not friends") },
			wantStatus: 403, wantCode: "not_reachable", wantAttempts: 1,
		},
		{
			name: "a 409 conflict is decoded and not retried", route: "POST /v1/tasks/t1/messages",
			call: func(c *Client) error {
				_, err := c.Reply(context.Background(), "t1", ReplyRequest{Parts: []mesh.Part{{Kind: "text", Text: "x"}}})
				return err
			},
			answer:     func(w http.ResponseWriter, r *http.Request) { problem(w, 409, "message_id_conflict", "other content") },
			wantStatus: 409, wantCode: "message_id_conflict", wantAttempts: 1,
		},
		{
			name: "a non-problem 502 page gets a synthetic code after the retries run out", route: "GET /v1/inbox",
			call: func(c *Client) error {
				_, err := c.Inbox(context.Background(), 0, 10, 0)
				return err
			},
			answer: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(502)
				_, _ = io.WriteString(w, "<html>bad gateway</html>")
			},
			wantStatus: 502, wantCode: "http_502", wantAttempts: 3,
		},
		{
			name: "a status move is retried after a 500 with the same message_id", route: "POST /v1/tasks/t1/status",
			call: func(c *Client) error {
				_, err := c.UpdateStatus(context.Background(), "t1", StatusRequest{Status: mesh.TaskWorking})
				return err
			},
			answer:     func(w http.ResponseWriter, r *http.Request) { problem(w, 500, "internal", "internal error") },
			wantStatus: 500, wantCode: "internal", wantAttempts: 3,
		},
		{
			name: "an illegal status move is a 409, not retried", route: "POST /v1/tasks/t1/status",
			call: func(c *Client) error {
				_, err := c.UpdateStatus(context.Background(), "t1", StatusRequest{Status: mesh.TaskCompleted})
				return err
			},
			answer: func(w http.ResponseWriter, r *http.Request) {
				problem(w, 409, "illegal_transition", "completed is terminal")
			},
			wantStatus: 409, wantCode: "illegal_transition", wantAttempts: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, srv := newFakeAPI(t)
			f.routes[tc.route] = tc.answer
			c := New(srv.URL, "amk_good", WithRetry(RetryPolicy{MaxAttempts: 3, Base: time.Millisecond, Max: 2 * time.Millisecond}))
			err := tc.call(c)
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("want *APIError, got %T %v", err, err)
			}
			if ae.Status != tc.wantStatus || ae.Code != tc.wantCode || ae.Detail == "" {
				t.Errorf("got %+v, want status %d code %s with a detail", ae, tc.wantStatus, tc.wantCode)
			}
			if n := f.count(tc.route); n != tc.wantAttempts {
				t.Errorf("attempts = %d, want %d", n, tc.wantAttempts)
			}
		})
	}
}

func TestA401RefreshesTheTokenOnceAndRetries(t *testing.T) {
	t.Run("a stale token is replaced and the call succeeds", func(t *testing.T) {
		f, srv := newFakeAPI(t)
		f.acceptAny = false
		f.routes["POST /v1/agents/me/heartbeat"] = func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, HeartbeatResult{Status: "active", LastSeq: 9})
		}
		c := New(srv.URL, "amk_good", fastRetry())
		if _, err := c.Token(context.Background()); err != nil {
			t.Fatal(err)
		}
		// The server rotates: tok-1 is no longer accepted.
		f.mu.Lock()
		f.issued++
		f.mu.Unlock()
		hb, err := c.Heartbeat(context.Background(), "inst-1", map[string]int{"handled": 3})
		if err != nil {
			t.Fatal(err)
		}
		if hb.LastSeq != 9 || hb.Status != "active" {
			t.Errorf("heartbeat = %+v", hb)
		}
		if n := f.count("POST /v1/auth/token"); n != 2 {
			t.Errorf("token fetches = %d, want 2", n)
		}
		var sent struct {
			InstanceID string         `json:"instance_id"`
			Stats      map[string]int `json:"stats"`
		}
		bodies := f.sent("POST /v1/agents/me/heartbeat")
		_ = json.Unmarshal([]byte(bodies[len(bodies)-1]), &sent)
		if sent.InstanceID != "inst-1" || sent.Stats["handled"] != 3 {
			t.Errorf("heartbeat body = %s", bodies[len(bodies)-1])
		}
	})
	t.Run("a revoked key fails after exactly one refresh", func(t *testing.T) {
		f, srv := newFakeAPI(t)
		f.reject = true
		c := New(srv.URL, "amk_good", fastRetry())
		_, err := c.GoOffline(context.Background(), "inst-1")
		if !IsStatus(err, 401) {
			t.Fatalf("want a 401 APIError, got %v", err)
		}
		if n := f.count("DELETE /v1/agents/me/online"); n != 2 {
			t.Errorf("attempts = %d, want 2 (one retry with a fresh token)", n)
		}
	})
	t.Run("a bad API key is a 401 from the token route, not retried", func(t *testing.T) {
		f, srv := newFakeAPI(t)
		_, err := New(srv.URL, "amk_bad", fastRetry()).Token(context.Background())
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != "invalid_api_key" {
			t.Fatalf("want invalid_api_key, got %v", err)
		}
		if n := f.count("POST /v1/auth/token"); n != 1 {
			t.Errorf("token attempts = %d, want 1", n)
		}
	})
}

func TestTokenIsCachedAndRefreshedBeforeExpiry(t *testing.T) {
	f, srv := newFakeAPI(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(srv.URL, "amk_good", WithClock(func() time.Time { return now }))
	ctx := context.Background()
	for range 3 {
		if _, err := c.Token(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.count("POST /v1/auth/token"); n != 1 {
		t.Fatalf("three Token calls fetched %d times, want 1", n)
	}
	now = now.Add(54 * time.Minute) // 6 min left of the hour: still good
	if tok, _ := c.Token(ctx); tok.Token != "tok-1" {
		t.Errorf("token replaced too early: %s", tok.Token)
	}
	now = now.Add(2 * time.Minute) // 4 min left: refresh
	tok, err := c.Token(ctx)
	if err != nil || tok.Token != "tok-2" {
		t.Fatalf("token not refreshed 4 minutes before expiry: %v %v", tok.Token, err)
	}
	keys, err := tok.Keys()
	if err != nil || len(keys[1]) != 32 || tok.KeyEpoch() != 1 || tok.RoutingID != "rt-alice" || tok.AgentID != "alice" || tok.Kafka.Topic != "inbox.events" {
		t.Errorf("token decoded badly: %v key=%d err=%v", tok, len(keys[1]), err)
	}
}

func TestSecretsNeverReachLogs(t *testing.T) {
	_, srv := newFakeAPI(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := New(srv.URL, "amk_good", WithLogger(log))
	tok, err := c.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	log.Info("got token", "token", tok)
	log.Info("printed", "s", fmt.Sprint(tok), "v", fmt.Sprintf("%v %+v %s", tok, tok, tok))
	for _, secret := range []string{tok.Token, tok.InboxKeys[0].Key, "amk_good"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("log contains a secret %q: %s", secret, buf.String())
		}
	}
	if !strings.Contains(buf.String(), "alice") {
		t.Errorf("log lacks the agent id: %s", buf.String())
	}
}

func TestRetriesStopAtTheContextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.routes["GET /v1/inbox"] = func(w http.ResponseWriter, r *http.Request) { problem(w, 503, "unavailable", "down") }
		c := inProcessClient(f, WithRetry(RetryPolicy{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}))
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Inbox(ctx, 0, 0, 0)
		if !IsStatus(err, 503) {
			t.Fatalf("want the last 503, got %v", err)
		}
		// The bubble's clock is exact: the client stops before the
		// deadline, and not earlier than one longest pause before it.
		if elapsed := time.Since(start); elapsed > 400*time.Millisecond || elapsed < 350*time.Millisecond {
			t.Errorf("retries ended after %v, want within the last 50 ms before the 400 ms deadline", elapsed)
		}
		if n := f.count("GET /v1/inbox"); n < 3 {
			t.Errorf("only %d attempts before the deadline", n)
		}
	})
}

func TestAttemptTimeoutsAndLongPolls(t *testing.T) {
	t.Run("an attempt the server never answers is abandoned and retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFake(t)
			f.routes["POST /v1/agents/me/heartbeat"] = script(
				func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
				func(w http.ResponseWriter, r *http.Request) {
					writeJSON(w, 200, HeartbeatResult{Status: "active", LastSeq: 1})
				},
			)
			c := inProcessClient(f, WithRetry(RetryPolicy{Base: time.Millisecond, Max: time.Millisecond, MaxElapsed: 10 * time.Second, AttemptTimeout: 200 * time.Millisecond}))
			start := time.Now()
			hb, err := c.Heartbeat(context.Background(), "i", nil)
			if err != nil || hb.LastSeq != 1 {
				t.Fatalf("hb %+v err %v", hb, err)
			}
			if n := f.count("POST /v1/agents/me/heartbeat"); n != 2 {
				t.Errorf("attempts = %d, want 2", n)
			}
			if elapsed := time.Since(start); elapsed < 200*time.Millisecond || elapsed > 210*time.Millisecond {
				t.Errorf("the silent attempt was abandoned after %v, want its 200 ms timeout", elapsed)
			}
		})
	})
	t.Run("a long-poll may outlast the retry budget and the attempt timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFake(t)
			f.routes["GET /v1/inbox"] = func(w http.ResponseWriter, r *http.Request) {
				<-time.After(700 * time.Millisecond) // the server holds the poll (the bubble's clock)
				writeJSON(w, 200, InboxPage{Events: []mesh.Envelope{}, NextAfter: 0, OldestSeq: 1})
			}
			c := inProcessClient(f, WithRetry(RetryPolicy{Base: time.Millisecond, MaxElapsed: 300 * time.Millisecond, AttemptTimeout: 300 * time.Millisecond}))
			if _, err := c.Inbox(context.Background(), 0, 10, time.Second); err != nil {
				t.Fatalf("the long-poll was cut short: %v", err)
			}
			if n := f.count("GET /v1/inbox"); n != 1 {
				t.Errorf("attempts = %d, want 1", n)
			}
		})
	})
}

func TestConcurrentTokenCallersShareOneFetchAndKeepTheirOwnContexts(t *testing.T) {
	f, srv := newFakeAPI(t)
	arrived, open := holdTokenFetches(t, f)
	c := New(srv.URL, "amk_good", fastRetry())
	type result struct {
		tok Token
		err error
	}
	first := make(chan result, 1)
	go func() {
		tok, err := c.Token(context.Background())
		first <- result{tok, err}
	}()
	waitFor(t, arrived, "the first caller's fetch reaching the server")

	t.Run("a caller whose context is already cancelled returns its error at once", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		got := tokenAsync(ctx, c)
		if err := waitFor(t, got, "Token with a cancelled context returning"); !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want context.Canceled", err)
		}
	})
	t.Run("a caller whose deadline passes while it waits for the shared fetch returns its error", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		got := tokenAsync(ctx, c)
		if err := waitFor(t, got, "Token returning at its deadline"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("the fetch goes on for the caller still waiting, and is the only one", func(t *testing.T) {
		open()
		r := waitFor(t, first, "the first caller's token")
		if r.err != nil || r.tok.Token != "tok-1" {
			t.Fatalf("first caller: %v %v", r.tok.Token, r.err)
		}
		if tok, err := c.Token(context.Background()); err != nil || tok.Token != "tok-1" {
			t.Errorf("a later caller got %v %v, want the cached tok-1", tok.Token, err)
		}
		if n := f.count("POST /v1/auth/token"); n != 1 {
			t.Errorf("token fetches = %d, want 1 shared by every caller", n)
		}
	})
}

func TestATokenFetchNobodyWaitsForIsCancelled(t *testing.T) {
	f, srv := newFakeAPI(t)
	arrived := make(chan struct{}, 8)
	abandoned := make(chan struct{}, 8)
	f.tokenGate = func(r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // holds until the client gives up on the request
		abandoned <- struct{}{}
	}
	c := New(srv.URL, "amk_good", fastRetry())
	ctx, cancel := context.WithCancel(context.Background())
	got := tokenAsync(ctx, c)
	waitFor(t, arrived, "the fetch reaching the server")
	cancel()
	if err := waitFor(t, got, "Token returning after its cancel"); !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want context.Canceled", err)
	}
	waitFor(t, abandoned, "the fetch's request being cancelled once its only caller left")

	f.mu.Lock()
	f.tokenGate = nil
	f.mu.Unlock()
	// The server finished the abandoned request as tok-1 into a closed
	// connection; the next caller starts its own fetch, not joins that one.
	if tok, err := c.Token(context.Background()); err != nil || tok.Token != "tok-2" || f.count("POST /v1/auth/token") != 2 {
		t.Errorf("the next caller got %v %v after %d fetches, want a fresh fetch's tok-2", tok.Token, err, f.count("POST /v1/auth/token"))
	}
}

func TestRefreshTokenDoesNotJoinAFetchStartedBeforeIt(t *testing.T) {
	f, srv := newFakeAPI(t)
	arrived, open := holdTokenFetches(t, f)
	c := New(srv.URL, "amk_good", fastRetry())
	old := make(chan error, 1)
	go func() {
		_, err := c.Token(context.Background())
		old <- err
	}()
	waitFor(t, arrived, "the first fetch reaching the server")
	fresh := make(chan Token, 1)
	go func() {
		tok, _ := c.RefreshToken(context.Background())
		fresh <- tok
	}()
	waitFor(t, arrived, "the refresh's own fetch reaching the server")
	open()
	waitFor(t, old, "the first fetch ending")
	waitFor(t, fresh, "the refresh ending")
	if n := f.count("POST /v1/auth/token"); n != 2 {
		t.Errorf("token fetches = %d, want 2", n)
	}
	// Whichever answer came last, the cached token is the refresh's: the
	// server issues tok-1 and tok-2 in the order it answers, so check the
	// cache holds the newest generation's answer, not an older one.
	tok, err := c.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	gen := c.tokGen
	c.mu.Unlock()
	if gen != 2 || tok.Token == "" {
		t.Errorf("cached token %q from fetch %d, want the refresh's (fetch 2)", tok.Token, gen)
	}
}

func TestInboxSendsTheCursorAndDecodesEnvelopes(t *testing.T) {
	f, srv := newFakeAPI(t)
	var gotQuery string
	f.routes["GET /v1/inbox"] = func(w http.ResponseWriter, r *http.Request) {
		gotQuery = r.URL.RawQuery
		writeJSON(w, 200, map[string]any{
			"events": []mesh.Envelope{
				{V: 1, EventID: "e8", Seq: 8, Type: "message", To: "alice", From: "bob", TaskID: "t", Body: json.RawMessage(`{"parts":[]}`), Delivery: "sent"},
				{V: 1, EventID: "e9", Seq: 9, Type: "status", To: "alice", From: "bob", TaskID: "t", Body: json.RawMessage(`{"status":"working"}`), Delivery: "pending"},
			},
			"next_after": 9, "oldest_seq": 3,
		})
	}
	page, err := New(srv.URL, "amk_good").Inbox(context.Background(), 7, 2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if gotQuery != "after=7&limit=2&wait=5" {
		t.Errorf("query = %q", gotQuery)
	}
	if len(page.Events) != 2 || page.Events[1].Seq != 9 || string(page.Events[1].Body) != `{"status":"working"}` || page.NextAfter != 9 || page.OldestSeq != 3 {
		t.Errorf("page = %+v", page)
	}
}

func TestHealthNeedsNoToken(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.routes["GET /v1/health"] = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			t.Error("health sent credentials")
		}
		writeJSON(w, 200, map[string]string{"status": "ok"})
	}
	if err := New(srv.URL, "").Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.count("POST /v1/auth/token"); n != 0 {
		t.Errorf("health fetched a token %d times", n)
	}
}

func TestABadBaseURLIsAClearError(t *testing.T) {
	err := New("127.0.0.1:8080", "k").Health(context.Background())
	if err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Fatalf("want a clear URL error, got %v", err)
	}
}
