package apigwlocal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

func loadURLTemplate(t *testing.T) *samtemplate.Template {
	t.Helper()
	tpl, err := samtemplate.Load("testdata/url.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// startURLGateway serves tpl (testdata/url.yaml or a template built in
// code) with h as StreamFunction until the test ends.
func startURLGateway(t *testing.T, tpl *samtemplate.Template, h URLHandler) *testGateway {
	t.Helper()
	reg := Registry{HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler}, URL: map[string]URLHandler{"StreamFunction": h}}
	if h == nil {
		reg.URL = nil
	}
	return serveGateway(t, tpl, reg, WebSocketOptions{})
}

// shortTemplate is testdata/url.yaml's StreamFunction with a timeout of d
// (the template's unit is the second).
func shortTemplate(d time.Duration) *samtemplate.Template {
	return &samtemplate.Template{Functions: []samtemplate.Function{
		{LogicalID: "HealthFunction", Routes: []samtemplate.Route{{Method: "GET", Path: "/v1/health"}}, Timeout: 10 * time.Second},
		{LogicalID: "StreamFunction", Timeout: d, URL: &samtemplate.FunctionURL{AuthType: "NONE", InvokeMode: "RESPONSE_STREAM", LocalPath: "/a2a/"}},
	}}
}

// do sends req under a 10 s bound, so that a stream the gateway holds back
// fails the test instead of hanging it.
func do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	t.Cleanup(cancel)
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

// readEvent reads one server-sent event (up to its blank line).
func readEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var ev strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading an event: %v (so far %q)", err, ev.String())
		}
		if line == "\n" {
			return ev.String()
		}
		ev.WriteString(line)
	}
}

// recv waits (at most 10 s) for a value on ch.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestAFunctionURLGetsTheEventLambdaBuildsAndItsResponseReachesTheClient(t *testing.T) {
	events1 := make(chan events.LambdaFunctionURLRequest, 1)
	g := startURLGateway(t, loadURLTemplate(t), func(_ context.Context, ev *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
		events1 <- *ev
		return &events.LambdaFunctionURLStreamingResponse{
			StatusCode: http.StatusCreated,
			Headers:    map[string]string{"Content-Type": "application/json", "X-Thing": "a,b"},
			Cookies:    []string{"s=1; Path=/", "t=2"},
			Body:       strings.NewReader(`{"ok":true}`),
		}, nil
	})
	now := time.Date(2026, 3, 12, 19, 3, 58, 390e6, time.UTC)
	g.HTTP().Now = func() time.Time { return now }

	req, err := http.NewRequest(http.MethodPost, g.url+"/a2a/agents/alice/message:send?b=2&a=1&a=3", strings.NewReader(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", "a2a-test/1")
	req.Header.Add("X-Multi", "one")
	req.Header.Add("X-Multi", "two")
	req.Header.Set("Cookie", "c1=v1; c2=v2")
	resp := do(t, req)
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	ev := recv(t, events1, "the event")
	host := strings.TrimPrefix(g.url, "http://")

	t.Run("the event is the one Lambda builds for a Function URL, with the whole path", func(t *testing.T) {
		want := events.LambdaFunctionURLRequest{
			Version:        "2.0",
			RawPath:        "/a2a/agents/alice/message:send",
			RawQueryString: "b=2&a=1&a=3",
			Cookies:        []string{"c1=v1", "c2=v2"},
			Headers: map[string]string{
				"content-type": "application/json", "accept-encoding": "identity", "user-agent": "a2a-test/1",
				"x-multi": "one,two", "host": host, "content-length": "7",
				"x-forwarded-for": "127.0.0.1", "x-forwarded-proto": "http", "x-forwarded-port": strings.Split(host, ":")[1],
				"x-amzn-trace-id": ev.Headers["x-amzn-trace-id"],
			},
			QueryStringParameters: map[string]string{"a": "1,3", "b": "2"},
			RequestContext: events.LambdaFunctionURLRequestContext{
				AccountID: "anonymous", RequestID: ev.RequestContext.RequestID,
				APIID: "127", DomainName: host, DomainPrefix: "127",
				Time: "12/Mar/2026:19:03:58 +0000", TimeEpoch: now.UnixMilli(),
				HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{
					Method: "POST", Path: "/a2a/agents/alice/message:send", Protocol: "HTTP/1.1",
					SourceIP: "127.0.0.1", UserAgent: "a2a-test/1",
				},
			},
			Body: `{"x":1}`,
		}
		if !reflect.DeepEqual(ev, want) {
			t.Errorf("event:\n got %+v\nwant %+v", ev, want)
		}
		if !strings.HasPrefix(ev.Headers["x-amzn-trace-id"], "Root=1-") {
			t.Errorf("x-amzn-trace-id %q", ev.Headers["x-amzn-trace-id"])
		}
		if id := ev.RequestContext.RequestID; !uuidPattern.MatchString(id) || resp.Header.Get("X-Amzn-Requestid") != id {
			t.Errorf("requestId %q is not a UUID answered as X-Amzn-Requestid (%q)", id, resp.Header.Get("X-Amzn-Requestid"))
		}
	})
	t.Run("the client gets the function's status, headers, cookies and body", func(t *testing.T) {
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Thing") != "a,b" || resp.Header.Get("Content-Type") != "application/json" ||
			!reflect.DeepEqual(resp.Header.Values("Set-Cookie"), []string{"s=1; Path=/", "t=2"}) || string(body) != `{"ok":true}` {
			t.Errorf("response %d %v %q", resp.StatusCode, resp.Header, body)
		}
	})
	t.Run("the invocation is counted", func(t *testing.T) {
		if got := g.Invocations()["StreamFunction"]; got != 1 {
			t.Errorf("StreamFunction invoked %d times, want 1", got)
		}
	})
	t.Run("paths outside the Function URL's stay the HTTP API's", func(t *testing.T) {
		if r := get(t, g.url+"/v1/health"); r.StatusCode != http.StatusOK {
			t.Errorf("GET /v1/health: %d", r.StatusCode)
		}
		if r := get(t, g.url+"/a2a"); r.StatusCode != http.StatusNotFound {
			t.Errorf("GET /a2a (no trailing slash: not under /a2a/): %d, want the HTTP API's 404", r.StatusCode)
		}
		if got := g.Invocations()["StreamFunction"]; got != 1 {
			t.Errorf("StreamFunction invoked %d times, want still 1", got)
		}
	})
}

func TestALambdaurlHandlerSeesTheRequestAsSent(t *testing.T) {
	g := startURLGateway(t, loadURLTemplate(t), lambdaurl.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "%s %s %s %s", r.Method, r.URL.RequestURI(), r.Header.Get("X-Key"), b)
	})))
	req, err := http.NewRequest(http.MethodPut, g.url+"/a2a/agents/bob/tasks/t%2F1?x=%20y", strings.NewReader("héllo"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	req.Header.Set("X-Key", "v")
	resp := do(t, req)
	body, _ := io.ReadAll(resp.Body)
	if want := "PUT /a2a/agents/bob/tasks/t%2F1?x=%20y v héllo"; resp.StatusCode != http.StatusAccepted || string(body) != want {
		t.Errorf("got %d %q, want 202 %q", resp.StatusCode, body, want)
	}
}

func TestBodiesAreBase64EncodedUnlessTheyAreText(t *testing.T) {
	seen := make(chan events.LambdaFunctionURLRequest, 1)
	g := startURLGateway(t, loadURLTemplate(t), func(_ context.Context, ev *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
		seen <- *ev
		return &events.LambdaFunctionURLStreamingResponse{StatusCode: 200}, nil
	})
	tests := []struct {
		name, contentType, body, wantBody string
		wantBase64                        bool
	}{
		{"a JSON body arrives as text", "application/json", `{"a":1}`, `{"a":1}`, false},
		{"an A2A JSON body (+json) arrives as text", "application/a2a+json", `{"a":1}`, `{"a":1}`, false},
		{"a binary body arrives base64-encoded", "application/octet-stream", "\x00\xff\x10", "AP8Q", true},
		{"a form body arrives base64-encoded", "application/x-www-form-urlencoded", "a=1", "YT0x", true},
		{"a text body that is not UTF-8 arrives base64-encoded", "text/plain", "\xff\xfe", "//4=", true},
		{"a body without a content type arrives base64-encoded", "", "hi", "aGk=", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, g.url+"/a2a/x", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			do(t, req)
			ev := recv(t, seen, "the event")
			if ev.Body != tt.wantBody || ev.IsBase64Encoded != tt.wantBase64 {
				t.Errorf("body %q base64 %v, want %q %v", ev.Body, ev.IsBase64Encoded, tt.wantBody, tt.wantBase64)
			}
		})
	}
}

func TestServerSentEventsReachTheClientOneByOneWhileTheFunctionRuns(t *testing.T) {
	release := make(chan struct{})
	g := startURLGateway(t, loadURLTemplate(t), lambdaurl.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: 2\n\n")
	})))
	resp := get(t, g.url+"/a2a/agents/alice/stream")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	r := bufio.NewReader(resp.Body)
	// The function is still blocked: event 1 arrives only if the gateway
	// streams what it writes.
	if ev := readEvent(t, r); ev != "data: 1\n" {
		t.Fatalf("first event %q", ev)
	}
	close(release)
	if ev := readEvent(t, r); ev != "data: 2\n" {
		t.Fatalf("second event %q", ev)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) > 0 {
		t.Errorf("after the function returned: %q, %v; want a clean end", rest, err)
	}
}

func TestARequestBodyOverSixMegabytesIsRefusedBeforeTheFunctionRuns(t *testing.T) {
	g := startURLGateway(t, loadURLTemplate(t), lambdaurl.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprint(w, len(b))
	})))
	tests := []struct {
		name        string
		size        int
		wantStatus  int
		invocations int64
	}{
		{"a body of exactly 6 MB reaches the function whole", MaxURLRequestBytes, http.StatusOK, 1},
		{"a body one byte over 6 MB is answered 413 and invokes nothing", MaxURLRequestBytes + 1, http.StatusRequestEntityTooLarge, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, g.url+"/a2a/big", strings.NewReader(strings.Repeat("a", tt.size)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "text/plain")
			resp := do(t, req)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusOK && string(body) != strconv.Itoa(tt.size) {
				t.Errorf("the function read %s bytes, want %d", body, tt.size)
			}
			if got := g.Invocations()["StreamFunction"]; got != tt.invocations {
				t.Errorf("invocations %d, want %d", got, tt.invocations)
			}
		})
	}
}

func TestAResponseStreamIsCutAtTwentyMegabytes(t *testing.T) {
	writeErr := make(chan error, 1)
	g := startURLGateway(t, loadURLTemplate(t), lambdaurl.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		chunk := make([]byte, 1<<20)
		for i := 0; i < 30; i++ {
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	})))
	resp := get(t, g.url+"/a2a/big")
	n, err := io.Copy(io.Discard, resp.Body)
	if n != MaxURLResponseBytes || err == nil {
		t.Errorf("the client read %d bytes and then %v; want %d then an error (a cut, not a clean end)", n, err, MaxURLResponseBytes)
	}
	if err := recv(t, writeErr, "the function's writes to fail"); err == nil {
		t.Error("the function wrote 30 MB without an error")
	}
	g.log.WaitFor(t, 10*time.Second, "response stream cut", "StreamFunction")
}

func TestTheFunctionsTimeoutEndsItsStream(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	tests := []struct {
		name    string
		handler func(ctxErr chan<- error) URLHandler
		// wantEvent: the client reads "data: 1" and then the end; else a 502.
		wantEvent bool
		// heeds: the function reports how its context ended.
		heeds bool
	}{
		{"a function that heeds its context is cancelled at the timeout and the stream ends",
			func(ctxErr chan<- error) URLHandler {
				return lambdaurl.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.WriteString(w, "data: 1\n\n")
					<-r.Context().Done()
					ctxErr <- r.Context().Err()
				}))
			}, true, true},
		{"a function that ignores its context still has its stream ended at the timeout",
			func(chan<- error) URLHandler {
				return lambdaurl.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.WriteString(w, "data: 1\n\n")
					<-hold
				}))
			}, true, false},
		{"a function that never answers is a 502 at the timeout",
			func(chan<- error) URLHandler {
				return func(context.Context, *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
					<-hold
					return nil, errors.New("too late")
				}
			}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctxErr := make(chan error, 1)
			g := startURLGateway(t, shortTemplate(300*time.Millisecond), tt.handler(ctxErr))
			resp := get(t, g.url+"/a2a/slow")
			if !tt.wantEvent {
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusBadGateway || string(body) != "Internal Server Error" {
					t.Errorf("%d %q, want 502 Internal Server Error", resp.StatusCode, body)
				}
				return
			}
			r := bufio.NewReader(resp.Body)
			if ev := readEvent(t, r); ev != "data: 1\n" {
				t.Fatalf("first event %q", ev)
			}
			if rest, err := io.ReadAll(r); err != nil || len(rest) > 0 {
				t.Errorf("after the timeout: %q, %v; want the stream's end", rest, err)
			}
			if tt.heeds {
				if err := recv(t, ctxErr, "the function's context to end"); !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("the function's context ended with %v, want DeadlineExceeded", err)
				}
			}
		})
	}
}

func TestAClientHangingUpCancelsTheFunctionAndClosesItsStream(t *testing.T) {
	ctxErr, writeErr := make(chan error, 1), make(chan error, 1)
	g := startURLGateway(t, loadURLTemplate(t), lambdaurl.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: 1\n\n")
		<-r.Context().Done()
		ctxErr <- r.Context().Err()
		// A write may still land in the gateway's read in flight; the
		// ones after it must fail.
		for range 100 {
			if _, err := io.WriteString(w, "data: 2\n\n"); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	})))
	ctx, hangUp := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url+"/a2a/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp := do(t, req)
	if ev := readEvent(t, bufio.NewReader(resp.Body)); ev != "data: 1\n" {
		t.Fatalf("first event %q", ev)
	}
	hangUp()
	if err := recv(t, ctxErr, "the function's context to end"); !errors.Is(err, context.Canceled) {
		t.Errorf("the function's context ended with %v, want Canceled", err)
	}
	if err := recv(t, writeErr, "the function's next write"); err == nil {
		t.Error("the function wrote 100 events after the hang-up; want the closed stream's error")
	}
}

func TestAFailingFunctionIsA502(t *testing.T) {
	tests := []struct {
		name string
		h    URLHandler
	}{
		{"a function returning an error", func(context.Context, *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
			return nil, errors.New("boom")
		}},
		{"a panicking function", func(context.Context, *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
			panic("boom")
		}},
		{"a function returning no response", func(context.Context, *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
			return nil, nil
		}},
		{"a function answering status 999", func(context.Context, *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
			return &events.LambdaFunctionURLStreamingResponse{StatusCode: 999, Body: strings.NewReader("x")}, nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is answered 502 Internal Server Error and logged", func(t *testing.T) {
			g := startURLGateway(t, loadURLTemplate(t), tt.h)
			resp := get(t, g.url+"/a2a/x")
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadGateway || string(body) != "Internal Server Error" {
				t.Errorf("%d %q, want 502 Internal Server Error", resp.StatusCode, body)
			}
			g.log.WaitFor(t, 10*time.Second, "StreamFunction", resp.Header.Get("X-Amzn-Requestid"))
		})
	}
	t.Run("a function's own error status is passed on", func(t *testing.T) {
		g := startURLGateway(t, loadURLTemplate(t), lambdaurl.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no such agent", http.StatusNotFound)
		})))
		resp := get(t, g.url+"/a2a/x")
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusNotFound || string(body) != "no such agent\n" {
			t.Errorf("%d %q", resp.StatusCode, body)
		}
	})
	t.Run("a Function URL without a handler answers 501 and invokes nothing", func(t *testing.T) {
		g := startURLGateway(t, loadURLTemplate(t), nil)
		resp := get(t, g.url+"/a2a/x")
		if resp.StatusCode != http.StatusNotImplemented || g.Invocations()["StreamFunction"] != 0 {
			t.Errorf("%d, %d invocations", resp.StatusCode, g.Invocations()["StreamFunction"])
		}
	})
}

func TestShutdownEndsOpenStreamsAndRefusesNewOnes(t *testing.T) {
	ctxErr := make(chan error, 1)
	g := startURLGateway(t, loadURLTemplate(t), lambdaurl.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: 1\n\n")
		<-r.Context().Done()
		ctxErr <- r.Context().Err()
	})))
	resp := get(t, g.url+"/a2a/stream")
	r := bufio.NewReader(resp.Body)
	if ev := readEvent(t, r); ev != "data: 1\n" {
		t.Fatalf("first event %q", ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, ctxErr, "the function's context to end"); !errors.Is(err, context.Canceled) {
		t.Errorf("the function's context ended with %v, want Canceled", err)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) > 0 {
		t.Errorf("after shutdown: %q, %v; want the stream's clean end", rest, err)
	}
	if resp := get(t, g.url+"/a2a/stream"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a request after shutdown: %d, want 503", resp.StatusCode)
	}
}

func TestNewGatewayRefusesAFunctionURLPathSomethingElseServes(t *testing.T) {
	url := &samtemplate.FunctionURL{AuthType: "NONE", InvokeMode: "RESPONSE_STREAM", LocalPath: "/a2a/"}
	tests := []struct {
		name    string
		tpl     *samtemplate.Template
		wantErr string
	}{
		{"a route under the path is refused, naming both functions", &samtemplate.Template{Functions: []samtemplate.Function{
			{LogicalID: "StreamFunction", URL: url},
			{LogicalID: "ThingFunction", Routes: []samtemplate.Route{{Method: "GET", Path: "/a2a/{id}"}}},
		}}, "StreamFunction: route GET /a2a/{id} of ThingFunction matches paths under /a2a/"},
		{"a path under a WebSocket stage is refused", &samtemplate.Template{
			Functions:     []samtemplate.Function{{LogicalID: "StreamFunction", URL: &samtemplate.FunctionURL{LocalPath: "/push/a2a/"}}},
			WebSocketAPIs: []samtemplate.WebSocketAPI{{LogicalID: "PushApi", Stage: "push"}},
		}, "StreamFunction: Function URL path /push/a2a/ is under /push"},
		{"a path of / is refused", &samtemplate.Template{Functions: []samtemplate.Function{
			{LogicalID: "StreamFunction", URL: &samtemplate.FunctionURL{LocalPath: "/"}},
		}}, `StreamFunction: Function URL path "/" must be literal path segments`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewGateway(tt.tpl, Registry{}, WebSocketOptions{}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckRequiresAURLHandlerForEveryFunctionURLAndNoOther(t *testing.T) {
	tpl := loadURLTemplate(t)
	h := lambdaurl.Wrap(http.NotFoundHandler())
	http1 := map[string]httpapi.LambdaHandler{"HealthFunction": okHandler}
	tests := []struct {
		name    string
		reg     Registry
		wantErr string
	}{
		{"a registry with the Function URL's handler passes", Registry{HTTP: http1, URL: map[string]URLHandler{"StreamFunction": h}}, ""},
		{"a Function URL without a handler is named", Registry{HTTP: http1}, "no Function URL handler registered for: StreamFunction"},
		{"a nil handler counts as none", Registry{HTTP: http1, URL: map[string]URLHandler{"StreamFunction": nil}}, "no Function URL handler registered for: StreamFunction"},
		{"a handler for a function without a Function URL is named", Registry{HTTP: http1, URL: map[string]URLHandler{"StreamFunction": h, "HealthFunction": h}},
			"Function URL handler registered for a function without FunctionUrlConfig in template.yaml: HealthFunction"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.reg.Check(tpl)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}
