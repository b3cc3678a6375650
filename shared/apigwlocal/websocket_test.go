package apigwlocal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
	"github.com/coder/websocket"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/samtemplate"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// wsFunctions are fake functions behind the three routes: each event goes
// to its route's channel (the test's signals), and $connect answers
// connect(ev).
type wsFunctions struct {
	connect                           func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error)
	connected, messages, disconnected chan events.APIGatewayWebsocketProxyRequest
	mu                                sync.Mutex
	disconnectsByID                   map[string]int
}

func newWSFunctions() *wsFunctions {
	return &wsFunctions{
		connect: func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
			return events.APIGatewayProxyResponse{StatusCode: 200}, nil
		},
		connected:       make(chan events.APIGatewayWebsocketProxyRequest, 100),
		messages:        make(chan events.APIGatewayWebsocketProxyRequest, 1000),
		disconnected:    make(chan events.APIGatewayWebsocketProxyRequest, 100),
		disconnectsByID: map[string]int{},
	}
}

func (f *wsFunctions) registry() Registry {
	return Registry{
		HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler},
		WebSocket: map[string]WebSocketHandler{
			"PushConnectFunction": func(_ context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
				f.connected <- ev
				return f.connect(ev)
			},
			"PushDefaultFunction": func(_ context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
				f.messages <- ev
				return events.APIGatewayProxyResponse{StatusCode: 200}, nil
			},
			"PushDisconnectFunction": func(_ context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
				f.mu.Lock()
				f.disconnectsByID[ev.RequestContext.ConnectionID]++
				f.mu.Unlock()
				f.disconnected <- ev
				return events.APIGatewayProxyResponse{StatusCode: 200}, nil
			},
		},
		Replaced: map[string]string{"PushRelayFunction": "invoked directly by in-VPC functions"},
	}
}

// wait returns the next event of ch, failing the test if none comes.
func wait(t *testing.T, ch chan events.APIGatewayWebsocketProxyRequest, what string) events.APIGatewayWebsocketProxyRequest {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s event", what)
		return events.APIGatewayWebsocketProxyRequest{}
	}
}

// startGateway serves testdata/push.yaml with f's functions until the test
// ends; the gateway's shutdown runs first, so that every $disconnect has
// run by then.
func startGateway(t *testing.T, f *wsFunctions, opts WebSocketOptions) *testGateway {
	t.Helper()
	tpl, err := samtemplate.Load("testdata/push.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg := f.registry()
	if err := reg.Check(tpl); err != nil {
		t.Fatal(err)
	}
	return serveGateway(t, tpl, reg, opts)
}

func (g *testGateway) dial(t *testing.T, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, WebSocketURL(g.url, "push"), opts)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	c.SetReadLimit(1 << 20)
	return c
}

// management is the real AWS SDK client pointed at the gateway, with
// static credentials (the emulator takes any signature).
func (g *testGateway) management() *apigatewaymanagementapi.Client {
	return apigatewaymanagementapi.New(apigatewaymanagementapi.Options{
		BaseEndpoint:     aws.String(ManagementEndpoint(g.url, "push")),
		Region:           "eu-west-1",
		Credentials:      credentials.NewStaticCredentialsProvider("AKIDLOCAL", "local-secret", ""),
		RetryMaxAttempts: 1,
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readClose reads until the connection ends and returns its close status.
func readClose(t *testing.T, c *websocket.Conn) (websocket.StatusCode, string) {
	t.Helper()
	ctx := ctxT(t)
	for {
		_, _, err := c.Read(ctx)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("connection ended without a close frame: %v", err)
		}
		return ce.Code, ce.Reason
	}
}

func TestWebSocketRoutesGetTheEventsAPIGatewayBuilds(t *testing.T) {
	f := newWSFunctions()
	f.connect = func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{StatusCode: 200, Headers: map[string]string{"Sec-WebSocket-Protocol": "mesh.v1"}}, nil
	}
	pinned := time.Date(2025, 2, 3, 13, 37, 54, 123e6, time.UTC)
	g := startGateway(t, f, WebSocketOptions{Now: func() time.Time { return pinned }})

	h := http.Header{}
	h.Set("Authorization", "Bearer tok-1")
	h.Set("X-Mesh-Instance", "inst-1")
	h.Add("X-Multi", "one")
	h.Add("X-Multi", "two")
	h.Set("User-Agent", "meshd-test/1")
	u := WebSocketURL(g.url, "push") + "?a=1&a=2"
	ctx := ctxT(t)
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{"mesh.v1", "bearer.tok-2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if c.Subprotocol() != "mesh.v1" {
		t.Errorf("negotiated subprotocol %q, want the mesh.v1 the function named", c.Subprotocol())
	}

	conn := wait(t, f.connected, "$connect")
	id := conn.RequestContext.ConnectionID
	rc := conn.RequestContext
	checks := []struct {
		what      string
		got, want any
	}{
		{"routeKey", rc.RouteKey, "$connect"},
		{"eventType", rc.EventType, "CONNECT"},
		{"messageDirection", rc.MessageDirection, "IN"},
		{"stage", rc.Stage, "push"},
		{"apiId", rc.APIID, "local"},
		{"domainName", rc.DomainName, "127.0.0.1"},
		{"identity.sourceIp", rc.Identity.SourceIP, "127.0.0.1"},
		{"identity.userAgent", rc.Identity.UserAgent, "meshd-test/1"},
		{"connectedAt", rc.ConnectedAt, pinned.UnixMilli()},
		{"requestTimeEpoch", rc.RequestTimeEpoch, pinned.UnixMilli()},
		{"requestTime", rc.RequestTime, "03/Feb/2025:13:37:54 +0000"},
		{"Authorization header, case as sent", conn.Headers["Authorization"], "Bearer tok-1"},
		{"X-Mesh-Instance header", conn.Headers["X-Mesh-Instance"], "inst-1"},
		{"Sec-WebSocket-Protocol header", conn.Headers["Sec-WebSocket-Protocol"], "mesh.v1,bearer.tok-2"},
		{"Sec-WebSocket-Version header", conn.Headers["Sec-WebSocket-Version"], "13"},
		{"repeated header: the last value in headers", conn.Headers["X-Multi"], "two"},
		{"repeated header: every value in multiValueHeaders", conn.MultiValueHeaders["X-Multi"], []string{"one", "two"}},
		{"X-Forwarded-For", conn.Headers["X-Forwarded-For"], "127.0.0.1"},
		{"queryStringParameters", conn.QueryStringParameters, map[string]string{"a": "2"}},
		{"multiValueQueryStringParameters", conn.MultiValueQueryStringParameters, map[string][]string{"a": {"1", "2"}}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("$connect %s = %#v, want %#v", c.what, c.got, c.want)
		}
	}
	if raw, err := base64.StdEncoding.DecodeString(id); err != nil || len(raw) != 11 || strings.Contains(id, "/") {
		t.Errorf("connectionId %q is not like API Gateway's (11 bytes, base64, no /)", id)
	}
	if rc.RequestID == "" || rc.ExtendedRequestID == "" {
		t.Error("no requestId")
	}

	if err := c.Write(ctx, websocket.MessageText, []byte(`{"hello":1}`)); err != nil {
		t.Fatal(err)
	}
	msg := wait(t, f.messages, "$default")
	mc := msg.RequestContext
	if mc.RouteKey != "$default" || mc.EventType != "MESSAGE" || mc.ConnectionID != id || msg.Body != `{"hello":1}` ||
		mc.MessageID == nil || mc.ConnectedAt != pinned.UnixMilli() || mc.Stage != "push" {
		t.Errorf("$default event = %+v", msg)
	}
	if mc.RequestID == rc.RequestID {
		t.Error("the message has the $connect requestId; each invocation gets its own")
	}

	if err := c.Close(websocket.StatusNormalClosure, "bye now"); err != nil {
		t.Fatal(err)
	}
	disc := wait(t, f.disconnected, "$disconnect")
	dc := disc.RequestContext
	if dc.RouteKey != "$disconnect" || dc.EventType != "DISCONNECT" || dc.ConnectionID != id ||
		dc.DisconnectStatusCode != int64(websocket.StatusNormalClosure) || dc.DisconnectReason == nil || *dc.DisconnectReason != "bye now" {
		t.Errorf("$disconnect event = %+v", disc)
	}
	if got := g.Invocations(); !reflect.DeepEqual(got, map[string]int64{
		"PushConnectFunction": 1, "PushDefaultFunction": 1, "PushDisconnectFunction": 1,
	}) {
		t.Errorf("Invocations() = %v", got)
	}

	// The HTTP API is on the same port.
	resp, err := http.Get(g.url + "/v1/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/health on the same port: %v %v", resp, err)
	}
	resp.Body.Close()
	if got := g.Invocations()["HealthFunction"]; got != 1 {
		t.Errorf("HealthFunction invoked %d times, want the 1 HTTP request counted", got)
	}
}

func TestAConnectThatTheFunctionRefusesIsAnsweredWithItsStatusAndBody(t *testing.T) {
	problem := `{"type":"urn:agentmesh:problem:unauthorized","status":401,"code":"unauthorized"}`
	tests := []struct {
		name       string
		resp       events.APIGatewayProxyResponse
		err        error
		wantStatus int
		wantType   string
		wantBody   string
	}{
		{"a 401 problem reaches the client as the function wrote it",
			events.APIGatewayProxyResponse{StatusCode: 401, Headers: map[string]string{"Content-Type": "application/problem+json"}, Body: problem},
			nil, 401, "application/problem+json", problem},
		{"a 429 keeps its Retry-After",
			events.APIGatewayProxyResponse{StatusCode: 429, Headers: map[string]string{"Content-Type": "application/problem+json", "Retry-After": "3"}, Body: `{"code":"rate_limited"}`},
			nil, 429, "application/problem+json", `{"code":"rate_limited"}`},
		{"a failing function is API Gateway's bare 500",
			events.APIGatewayProxyResponse{}, errors.New("boom"), 500, "application/json", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newWSFunctions()
			f.connect = func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
				return tt.resp, tt.err
			}
			g := startGateway(t, f, WebSocketOptions{})
			_, resp, err := websocket.Dial(ctxT(t), WebSocketURL(g.url, "push"), nil)
			if err == nil {
				t.Fatal("the upgrade succeeded")
			}
			if resp == nil || resp.StatusCode != tt.wantStatus {
				t.Fatalf("response %v, want status %d", resp, tt.wantStatus)
			}
			body, _ := io.ReadAll(resp.Body)
			if ct := resp.Header.Get("Content-Type"); ct != tt.wantType {
				t.Errorf("Content-Type = %q", ct)
			}
			if tt.wantBody != "" && string(body) != tt.wantBody {
				t.Errorf("body = %s, want %s", body, tt.wantBody)
			}
			if tt.resp.Headers["Retry-After"] != "" && resp.Header.Get("Retry-After") != tt.resp.Headers["Retry-After"] {
				t.Errorf("Retry-After = %q", resp.Header.Get("Retry-After"))
			}
			if g.Connections() != 0 {
				t.Error("a refused connection is live")
			}
			// A refused connection never connected: no $disconnect.
			wait(t, f.connected, "$connect")
			if inv := g.Invocations(); inv["PushDisconnectFunction"] != 0 {
				t.Errorf("invocations %v: $disconnect ran for a refused connection", inv)
			}
		})
	}
}

func TestTheStageAnswersPlainHTTPRequestsWithoutInvokingAnything(t *testing.T) {
	tests := []struct {
		name, method, path string
		wantStatus         int
	}{
		{"a GET without Upgrade is 426", "GET", "/push", 426},
		{"a POST to the stage is 405", "POST", "/push", 405},
		{"@connections without an id is 400", "POST", "/push/@connections/", 400},
		{"an unknown path under the stage is 404", "GET", "/push/other", 404},
	}
	g := startGateway(t, newWSFunctions(), WebSocketOptions{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, g.url+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
		})
	}
	if inv := g.Invocations(); len(inv) != 0 {
		t.Errorf("invocations %v", inv)
	}
}

func TestPostsReachTheClientInOrderThroughTheAWSSDK(t *testing.T) {
	f := newWSFunctions()
	pinned := time.Date(2025, 2, 3, 13, 37, 54, 0, time.UTC)
	g := startGateway(t, f, WebSocketOptions{Now: func() time.Time { return pinned }})
	c := g.dial(t, &websocket.DialOptions{HTTPHeader: http.Header{"User-Agent": {"meshd-test/2"}}})
	id := wait(t, f.connected, "$connect").RequestContext.ConnectionID
	mgmt := g.management()
	ctx := ctxT(t)

	const n = 100
	done := make(chan error, 1)
	go func() {
		for i := range n {
			data := fmt.Appendf(nil, `{"v":2,"seq":%d}`, i+1)
			if i == n-1 {
				data = bytes.Repeat([]byte("x"), 128<<10) // exactly the message limit
			}
			if _, err := mgmt.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: &id, Data: data}); err != nil {
				done <- fmt.Errorf("post %d: %w", i+1, err)
				return
			}
		}
		done <- nil
	}()
	for i := range n {
		typ, data, err := c.Read(ctx)
		if err != nil {
			select {
			case perr := <-done:
				t.Fatalf("read %d: %v (posting: %v)", i+1, err, perr)
			default:
			}
			t.Fatalf("read %d: %v", i+1, err)
		}
		want := fmt.Sprintf(`{"v":2,"seq":%d}`, i+1)
		if i == n-1 {
			want = strings.Repeat("x", 128<<10)
		}
		if typ != websocket.MessageText || string(data) != want {
			t.Fatalf("message %d = %v %.40q, want %.40q", i+1, typ, data, want)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	out, err := mgmt.GetConnection(ctx, &apigatewaymanagementapi.GetConnectionInput{ConnectionId: &id})
	if err != nil {
		t.Fatal(err)
	}
	if !out.ConnectedAt.Equal(pinned) || !out.LastActiveAt.Equal(pinned) || *out.Identity.SourceIp != "127.0.0.1" || *out.Identity.UserAgent != "meshd-test/2" {
		t.Errorf("GetConnection = connectedAt %v lastActiveAt %v identity %v/%v", out.ConnectedAt, out.LastActiveAt, *out.Identity.SourceIp, *out.Identity.UserAgent)
	}

	// Over the limit: 413 PayloadTooLargeException, and nothing sent.
	_, err = mgmt.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: &id, Data: make([]byte, 128<<10+1)})
	var tooLarge *types.PayloadTooLargeException
	if !errors.As(err, &tooLarge) {
		t.Fatalf("posting 128 KB + 1: %v, want PayloadTooLargeException", err)
	}
	if _, err := mgmt.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: &id, Data: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	if _, data, err := c.Read(ctx); err != nil || string(data) != "after" {
		t.Fatalf("next message %q %v: the oversized post must not have been sent", data, err)
	}
}

func TestDeleteClosesTheConnectionAndRunsDisconnectOnce(t *testing.T) {
	f := newWSFunctions()
	g := startGateway(t, f, WebSocketOptions{})
	c := g.dial(t, nil)
	id := wait(t, f.connected, "$connect").RequestContext.ConnectionID
	mgmt := g.management()
	ctx := ctxT(t)

	if _, err := mgmt.DeleteConnection(ctx, &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: &id}); err != nil {
		t.Fatal(err)
	}
	// Closing already: a post is 410 and is not sent, though the close
	// handshake is still under way.
	_, err := mgmt.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: &id, Data: []byte("after delete")})
	if goneErr := (*types.GoneException)(nil); !errors.As(err, &goneErr) {
		t.Errorf("PostToConnection right after DeleteConnection = %v, want GoneException", err)
	}
	code, reason := readClose(t, c)
	if code != websocket.StatusNormalClosure || reason == "" {
		t.Errorf("close %d %q, want 1000 with a reason", code, reason)
	}
	disc := wait(t, f.disconnected, "$disconnect")
	if disc.RequestContext.ConnectionID != id || disc.RequestContext.DisconnectStatusCode != int64(websocket.StatusNormalClosure) {
		t.Errorf("$disconnect = %+v", disc.RequestContext)
	}

	// Gone now, and so is an id that never existed, for every operation.
	for _, gone := range []string{id, "Tm90QUNvbm5lY3Q="} {
		_, errPost := mgmt.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(gone), Data: []byte("x")})
		_, errGet := mgmt.GetConnection(ctx, &apigatewaymanagementapi.GetConnectionInput{ConnectionId: aws.String(gone)})
		_, errDel := mgmt.DeleteConnection(ctx, &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(gone)})
		for op, err := range map[string]error{"PostToConnection": errPost, "GetConnection": errGet, "DeleteConnection": errDel} {
			var goneErr *types.GoneException
			if !errors.As(err, &goneErr) {
				t.Errorf("%s(%s) = %v, want GoneException", op, gone, err)
			}
		}
	}

	ctxS, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctxS); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.disconnectsByID[id] != 1 {
		t.Errorf("$disconnect ran %d times for the deleted connection", f.disconnectsByID[id])
	}
}

func TestTheGatewayClosesWhatBreaksAPIGatewaysLimits(t *testing.T) {
	opts := WebSocketOptions{MaxFrameBytes: 1024, MaxMessageBytes: 4096}
	tests := []struct {
		name       string
		send       func(ctx context.Context, c *websocket.Conn) error
		wantCode   websocket.StatusCode
		wantReason string
	}{
		{"a frame over the frame limit closes 1009",
			func(ctx context.Context, c *websocket.Conn) error {
				return c.Write(ctx, websocket.MessageText, bytes.Repeat([]byte("a"), 1025))
			}, websocket.StatusMessageTooBig, "frame too big: the limit is 1024 bytes"},
		{"a message over the message limit, in frames within the frame limit, closes 1009",
			func(ctx context.Context, c *websocket.Conn) error {
				w, err := c.Writer(ctx, websocket.MessageText)
				if err != nil {
					return err
				}
				for range 5 {
					if _, err := w.Write(bytes.Repeat([]byte("a"), 1000)); err != nil {
						return err
					}
				}
				return w.Close()
			}, websocket.StatusMessageTooBig, "message too big: the limit is 4096 bytes"},
		{"a binary frame closes 1003",
			func(ctx context.Context, c *websocket.Conn) error {
				return c.Write(ctx, websocket.MessageBinary, []byte("bin"))
			}, websocket.StatusUnsupportedData, "binary frames are not supported; send text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newWSFunctions()
			g := startGateway(t, f, opts)
			c := g.dial(t, nil)
			ctx := ctxT(t)
			// Within the limits first: a frame of exactly 1024 bytes passes.
			if err := c.Write(ctx, websocket.MessageText, bytes.Repeat([]byte("b"), 1024)); err != nil {
				t.Fatal(err)
			}
			if ev := wait(t, f.messages, "$default"); len(ev.Body) != 1024 {
				t.Fatalf("body of %d bytes", len(ev.Body))
			}
			_ = tt.send(ctx, c)
			code, reason := readClose(t, c)
			if code != tt.wantCode || reason != tt.wantReason {
				t.Errorf("close %d %q, want %d %q", code, reason, tt.wantCode, tt.wantReason)
			}
			disc := wait(t, f.disconnected, "$disconnect")
			if disc.RequestContext.DisconnectStatusCode != int64(tt.wantCode) || *disc.RequestContext.DisconnectReason != tt.wantReason {
				t.Errorf("$disconnect status %d %q", disc.RequestContext.DisconnectStatusCode, *disc.RequestContext.DisconnectReason)
			}
			if n := len(f.messages); n != 0 {
				t.Errorf("the offending message reached $default (%d events)", n)
			}
		})
	}
}

func TestPingsAreAnsweredByTheGatewayAndInvokeNothing(t *testing.T) {
	f := newWSFunctions()
	clock := testenv.NewClock()
	g := startGateway(t, f, WebSocketOptions{Now: clock.Now})
	c := g.dial(t, nil)
	id := wait(t, f.connected, "$connect").RequestContext.ConnectionID
	ctx := ctxT(t)
	c.CloseRead(ctx) // the client reads in the background, so that pongs arrive
	before := g.Invocations()

	clock.Advance(time.Minute)
	for range 10 {
		if err := c.Ping(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
	}
	if after := g.Invocations(); !reflect.DeepEqual(before, after) {
		t.Errorf("pings invoked functions: %v → %v", before, after)
	}
	// A ping is activity: it resets the idle clock.
	out, err := g.management().GetConnection(ctx, &apigatewaymanagementapi.GetConnectionInput{ConnectionId: &id})
	if err != nil {
		t.Fatal(err)
	}
	if want := clock.Now(); !out.LastActiveAt.Equal(want.Truncate(time.Millisecond)) {
		t.Errorf("lastActiveAt = %v after a ping at %v", out.LastActiveAt, want)
	}
}

func TestIdleAndAgedConnectionsAreClosedWith1001(t *testing.T) {
	tests := []struct {
		name       string
		opts       WebSocketOptions
		wantReason string
	}{
		{"an idle connection is closed at the idle timeout", WebSocketOptions{IdleTimeout: 100 * time.Millisecond},
			"Going away: idle timeout"},
		{"a connection is closed at its maximum age", WebSocketOptions{MaxConnAge: 100 * time.Millisecond},
			"Going away: connection reached its maximum age of 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newWSFunctions()
			g := startGateway(t, f, tt.opts)
			c := g.dial(t, nil)
			code, reason := readClose(t, c)
			if code != websocket.StatusGoingAway || reason != tt.wantReason {
				t.Errorf("close %d %q, want 1001 %q", code, reason, tt.wantReason)
			}
			disc := wait(t, f.disconnected, "$disconnect")
			if disc.RequestContext.DisconnectStatusCode != int64(websocket.StatusGoingAway) {
				t.Errorf("$disconnect status %d", disc.RequestContext.DisconnectStatusCode)
			}
		})
	}
}

// A client that never reads fills its TCP buffers and then its send queue;
// posts to it wait on it alone, and posts to everyone else go through while
// they wait (PostTimeout is long here, so that they wait throughout).
func TestAClientThatNeverReadsDoesNotHoldUpPostsToOthers(t *testing.T) {
	f := newWSFunctions()
	g := startGateway(t, f, WebSocketOptions{SendQueue: 2, WriteTimeout: time.Minute, PostTimeout: time.Minute})
	stuck := g.dial(t, nil)
	stuckID := wait(t, f.connected, "$connect").RequestContext.ConnectionID
	reader := g.dial(t, nil)
	readerID := wait(t, f.connected, "$connect").RequestContext.ConnectionID
	mgmt := g.management()
	ctx := ctxT(t)

	var posters sync.WaitGroup
	var stuckEnded atomic.Int32
	for range 8 {
		posters.Go(func() {
			for {
				_, err := mgmt.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: &stuckID, Data: make([]byte, 128<<10)})
				if err != nil {
					stuckEnded.Add(1)
					return
				}
			}
		})
	}
	// The signal that the stuck client's writer is blocked and its queue full.
	g.log.WaitFor(t, 20*time.Second, "send queue full", stuckID)

	for i := range 50 {
		postCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := mgmt.PostToConnection(postCtx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: &readerID, Data: fmt.Appendf(nil, "m%d", i)})
		cancel()
		if err != nil {
			t.Fatalf("post %d to the reading client while the other is stuck: %v", i, err)
		}
		if _, data, err := reader.Read(ctx); err != nil || string(data) != fmt.Sprintf("m%d", i) {
			t.Fatalf("read %d: %q %v", i, data, err)
		}
	}
	if n := stuckEnded.Load(); n != 0 || g.Connections() != 2 {
		t.Fatalf("%d posts to the stuck client ended and %d connections are live: the posts to the other did not go through while it was stuck", n, g.Connections())
	}

	// The stuck client goes away: its pending posts end (410), and it gets
	// its $disconnect.
	_ = stuck.CloseNow()
	posters.Wait()
	disc := wait(t, f.disconnected, "$disconnect")
	if disc.RequestContext.ConnectionID != stuckID {
		t.Errorf("$disconnect for %s, want %s", disc.RequestContext.ConnectionID, stuckID)
	}
}

// seqMessage is message seq of a test: 128 KB, its seq in its first 8 bytes.
func seqMessage(seq int) []byte {
	b := bytes.Repeat([]byte("x"), 128<<10)
	copy(b, fmt.Sprintf("%08d", seq))
	return b
}

// A POST answers once its message is queued, not once the client took it;
// a client that leaves its queue full for PostTimeout is closed with 1008,
// that post is 410 and so is every later one, and the client got what it
// got in order.
func TestAClientThatDoesNotDrainItsQueueIsClosedWith1008(t *testing.T) {
	f := newWSFunctions()
	g := startGateway(t, f, WebSocketOptions{SendQueue: 4, WriteTimeout: time.Minute, PostTimeout: 500 * time.Millisecond})
	c := g.dial(t, nil)
	id := wait(t, f.connected, "$connect").RequestContext.ConnectionID
	mgmt := g.management()
	ctx := ctxT(t)

	// The client reads nothing: its TCP buffers fill, then its queue.
	accepted := 0
	for {
		if accepted == 1000 {
			t.Fatal("1000 posts of 128 KB accepted for a client that reads nothing")
		}
		postCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := mgmt.PostToConnection(postCtx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: &id, Data: seqMessage(accepted + 1)})
		cancel()
		if err == nil {
			accepted++
			continue
		}
		if goneErr := (*types.GoneException)(nil); !errors.As(err, &goneErr) {
			t.Fatalf("post %d: %v, want 200 once queued, or 410 once the queue stayed full", accepted+1, err)
		}
		break
	}
	_, err := mgmt.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: &id, Data: []byte("late")})
	if goneErr := (*types.GoneException)(nil); !errors.As(err, &goneErr) {
		t.Fatalf("a post after the too-slow close: %v, want GoneException", err)
	}

	// Now it reads: a prefix of the accepted messages, in order, then 1008.
	next := 1
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != closeTooSlow.Reason {
				t.Fatalf("after %d messages: %v, want close 1008 %q", next-1, err, closeTooSlow.Reason)
			}
			break
		}
		if want := fmt.Sprintf("%08d", next); next > accepted || len(data) < 8 || string(data[:8]) != want {
			t.Fatalf("message %d starts %.8q, want %s of the %d accepted", next, data, want, accepted)
		}
		next++
	}
	disc := wait(t, f.disconnected, "$disconnect")
	if rc := disc.RequestContext; rc.ConnectionID != id || rc.DisconnectStatusCode != int64(websocket.StatusPolicyViolation) {
		t.Errorf("$disconnect %s status %d, want %s 1008", rc.ConnectionID, rc.DisconnectStatusCode, id)
	}
}

// A caller that hangs up while its post waits for queue room is not
// answered, and its message is not sent: the caller was told it failed.
func TestAPostWhoseCallerHangsUpIsNotSent(t *testing.T) {
	const huge = 32 << 20 // more than the TCP buffers hold: the writer blocks on it
	f := newWSFunctions()
	g := startGateway(t, f, WebSocketOptions{MaxMessageBytes: huge, SendQueue: 2, WriteTimeout: time.Minute, PostTimeout: time.Minute})
	c := g.dial(t, nil)
	c.SetReadLimit(huge)
	id := wait(t, f.connected, "$connect").RequestContext.ConnectionID
	mgmt := g.management()
	ctx := ctxT(t)

	// The writer takes the huge message 1 and blocks on it; 2 and 3 fill
	// the queue; 4 (4444 bytes) waits for room until its caller hangs up.
	postCtx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	posted := make(chan error, 1)
	go func() {
		for seq, data := range [][]byte{bytes.Repeat([]byte("1"), huge), []byte("2"), []byte("3"), bytes.Repeat([]byte("4"), 4444)} {
			if _, err := mgmt.PostToConnection(postCtx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: &id, Data: data}); err != nil {
				posted <- fmt.Errorf("post %d: %w", seq+1, err)
				return
			}
		}
		posted <- nil
	}()
	g.log.WaitLine(t, 20*time.Second, "send queue full", id, "bytes=4444")
	hangUp()
	if err := <-posted; !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "post 4:") {
		t.Fatalf("posting: %v, want post 4 cancelled", err)
	}
	g.log.WaitLine(t, 20*time.Second, "abandoned by its caller", id)

	// The client drains its queue; the next post follows 3.
	end := make(chan error, 1)
	go func() {
		_, err := mgmt.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: &id, Data: []byte("end")})
		end <- err
	}()
	for _, want := range []string{"1", "2", "3", "end"} {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading %s: %v", want, err)
		}
		if len(data) == 0 || (want == "1") != (len(data) == huge) || (want != "1" && string(data) != want) {
			t.Fatalf("got %d bytes %.10q, want message %s", len(data), data, want)
		}
	}
	if err := <-end; err != nil {
		t.Fatal(err)
	}
}

// The relay gives each @connections call 5 s (pushaws.DefaultCallTimeout):
// by default a post is answered, 410 for a stalled client, before that.
func TestTheDefaultPostTimeoutIsBelowTheRelaysCallTimeout(t *testing.T) {
	const relayCallTimeout = 5 * time.Second
	if d := (WebSocketOptions{}).withDefaults().PostTimeout; d <= 0 || d >= relayCallTimeout {
		t.Errorf("default PostTimeout %v, want within (0, %v)", d, relayCallTimeout)
	}
}

// A caller that trickles its body is answered within PostTimeout.
func TestAPostWhoseBodyDoesNotArriveIsAnsweredWithinPostTimeout(t *testing.T) {
	g := startGateway(t, newWSFunctions(), WebSocketOptions{PostTimeout: 200 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second)) // the test's own bound, not the one under test
	if _, err := io.WriteString(conn, "POST /push/@connections/Tm90QUNvbm5lY3Q= HTTP/1.1\r\nHost: local\r\nContent-Length: 10\r\n\r\nab"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Amzn-ErrorType") != "BadRequestException" {
		t.Errorf("status %d %q, want 400 BadRequestException", resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"))
	}
}

func TestShutdownClosesEveryConnectionWith1001AndRunsTheirDisconnect(t *testing.T) {
	f := newWSFunctions()
	g := startGateway(t, f, WebSocketOptions{})
	var conns []*websocket.Conn
	for range 3 {
		conns = append(conns, g.dial(t, nil))
		wait(t, f.connected, "$connect")
	}
	for _, c := range conns {
		c.CloseRead(context.Background())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Shutdown returned: every $disconnect has run.
	if n := len(f.disconnected); n != 3 {
		t.Fatalf("%d $disconnect events after Shutdown, want 3", n)
	}
	for range 3 {
		ev := <-f.disconnected
		if ev.RequestContext.DisconnectStatusCode != int64(websocket.StatusGoingAway) {
			t.Errorf("$disconnect status %d, want 1001", ev.RequestContext.DisconnectStatusCode)
		}
	}
	if _, resp, err := websocket.Dial(ctx, WebSocketURL(g.url, "push"), nil); err == nil || resp == nil || resp.StatusCode != 503 {
		t.Errorf("a connection after shutdown: %v %v, want 503", resp, err)
	}
}

func TestWebSocketURLsDeriveFromTheBaseURL(t *testing.T) {
	tests := []struct{ base, ws, mgmt string }{
		{"http://127.0.0.1:8080", "ws://127.0.0.1:8080/push", "http://127.0.0.1:8080/push"},
		{"https://api.example/", "wss://api.example/push", "https://api.example/push"},
	}
	for _, tt := range tests {
		t.Run(tt.base+" serves "+tt.ws, func(t *testing.T) {
			if got := WebSocketURL(tt.base, "push"); got != tt.ws {
				t.Errorf("WebSocketURL = %q", got)
			}
			if got := ManagementEndpoint(tt.base, "push"); got != tt.mgmt {
				t.Errorf("ManagementEndpoint = %q", got)
			}
		})
	}
}

// A post answered 200 is delivered, also when a DELETE follows at once (the
// server says bye, then closes): the writer sends what was queued before
// the close frame.
func TestPostsAcceptedBeforeADeleteReachTheClientBeforeTheClose(t *testing.T) {
	const huge = 32 << 20 // more than the TCP buffers hold: the writer blocks on it
	f := newWSFunctions()
	g := startGateway(t, f, WebSocketOptions{MaxMessageBytes: huge, SendQueue: 64, WriteTimeout: time.Minute, PostTimeout: time.Minute})
	c := g.dial(t, nil)
	c.SetReadLimit(huge)
	id := wait(t, f.connected, "$connect").RequestContext.ConnectionID
	mgmt := g.management()
	ctx := ctxT(t)

	// The writer blocks on the huge first message while 20 more queue up
	// behind it; then the connection is deleted.
	want := []string{"huge"}
	for i := 1; i <= 20; i++ {
		want = append(want, fmt.Sprint(i))
	}
	for i, w := range want {
		data := []byte(w)
		if i == 0 {
			data = bytes.Repeat([]byte("h"), huge)
		}
		if _, err := mgmt.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: &id, Data: data}); err != nil {
			t.Fatalf("post %s: %v", w, err)
		}
	}
	if _, err := mgmt.DeleteConnection(ctx, &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: &id}); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading %s: %v", w, err)
		}
		if (w == "huge") != (len(data) == huge) || (w != "huge" && string(data) != w) {
			t.Fatalf("got %d bytes %.10q, want message %s", len(data), data, w)
		}
	}
	if code, _ := readClose(t, c); code != websocket.StatusNormalClosure {
		t.Errorf("close %d after the queued messages, want 1000", code)
	}
}
