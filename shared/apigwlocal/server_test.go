package apigwlocal

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

// recorder is a handler that keeps the event it got and answers resp.
type recorder struct {
	got  []events.APIGatewayV2HTTPRequest
	resp events.APIGatewayV2HTTPResponse
	err  error
}

func (r *recorder) handle(_ context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	r.got = append(r.got, ev)
	return r.resp, r.err
}

func serverTemplate() *samtemplate.Template {
	return &samtemplate.Template{Functions: []samtemplate.Function{
		{LogicalID: "ReplyFunction", Timeout: 25 * time.Second, Routes: []samtemplate.Route{{Method: "POST", Path: "/v1/tasks/{id}/messages"}}},
		{LogicalID: "InboxFunction", Timeout: 25 * time.Second, Routes: []samtemplate.Route{{Method: "GET", Path: "/v1/inbox"}}},
		{LogicalID: "MissingFunction", Timeout: 25 * time.Second, Routes: []samtemplate.Route{{Method: "GET", Path: "/v1/missing"}}},
	}}
}

func newTestServer(t *testing.T, handlers map[string]httpapi.LambdaHandler) *Server {
	t.Helper()
	s, err := NewServer(serverTemplate(), handlers, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Now = func() time.Time { return time.Date(2025, 2, 3, 13, 37, 54, 123e6, time.UTC) }
	return s
}

func TestServerBuildsThePayload2EventAPIGatewayWould(t *testing.T) {
	rec := &recorder{resp: events.APIGatewayV2HTTPResponse{StatusCode: 202, Body: `{"ok":true}`}}
	s := newTestServer(t, map[string]httpapi.LambdaHandler{"ReplyFunction": rec.handle})

	req := httptest.NewRequest("POST", "http://mesh.example:8080/v1/tasks/t-42/messages?a=1&b=x%20y&a=2", strings.NewReader(`{"parts":[]}`))
	req.RemoteAddr = "192.0.2.7:51000"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Add("X-Multi", "one")
	req.Header.Add("X-Multi", "two")
	req.Header.Set("User-Agent", "test-agent/1")
	req.Header.Add("Cookie", "a=1; b=2")
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)

	if w.Code != 202 || w.Body.String() != `{"ok":true}` {
		t.Fatalf("response = %d %q", w.Code, w.Body.String())
	}
	if len(rec.got) != 1 {
		t.Fatalf("handler called %d times", len(rec.got))
	}
	ev := rec.got[0]
	requestID := w.Header().Get("Apigw-Requestid")
	checks := []struct {
		what      string
		got, want any
	}{
		{"version", ev.Version, "2.0"},
		{"routeKey", ev.RouteKey, "POST /v1/tasks/{id}/messages"},
		{"rawPath", ev.RawPath, "/v1/tasks/t-42/messages"},
		{"rawQueryString", ev.RawQueryString, "a=1&b=x%20y&a=2"},
		{"queryStringParameters (decoded, repeats joined by commas)", ev.QueryStringParameters, map[string]string{"a": "1,2", "b": "x y"}},
		{"pathParameters", ev.PathParameters, map[string]string{"id": "t-42"}},
		{"lower-cased header", ev.Headers["authorization"], "Bearer tok"},
		{"repeated header joined by commas", ev.Headers["x-multi"], "one,two"},
		{"host header kept", ev.Headers["host"], "mesh.example:8080"},
		{"content-length", ev.Headers["content-length"], "12"},
		{"x-forwarded-for", ev.Headers["x-forwarded-for"], "192.0.2.7"},
		{"x-forwarded-port", ev.Headers["x-forwarded-port"], "8080"},
		{"no cookie header", ev.Headers["cookie"], ""},
		{"cookies", ev.Cookies, []string{"a=1", "b=2"}},
		{"body as text", ev.Body, `{"parts":[]}`},
		{"isBase64Encoded", ev.IsBase64Encoded, false},
		{"requestContext.routeKey", ev.RequestContext.RouteKey, "POST /v1/tasks/{id}/messages"},
		{"requestContext.accountId", ev.RequestContext.AccountID, "local"},
		{"requestContext.apiId", ev.RequestContext.APIID, "local"},
		{"requestContext.stage", ev.RequestContext.Stage, "$default"},
		{"requestContext.domainName", ev.RequestContext.DomainName, "mesh.example"},
		{"requestContext.domainPrefix", ev.RequestContext.DomainPrefix, "mesh"},
		{"requestContext.requestId is the response's apigw-requestid", ev.RequestContext.RequestID, requestID},
		{"requestContext.time", ev.RequestContext.Time, "03/Feb/2025:13:37:54 +0000"},
		{"requestContext.timeEpoch", ev.RequestContext.TimeEpoch, int64(1738589874123)},
		{"http.method", ev.RequestContext.HTTP.Method, "POST"},
		{"http.path", ev.RequestContext.HTTP.Path, "/v1/tasks/t-42/messages"},
		{"http.protocol", ev.RequestContext.HTTP.Protocol, "HTTP/1.1"},
		{"http.sourceIp", ev.RequestContext.HTTP.SourceIP, "192.0.2.7"},
		{"http.userAgent", ev.RequestContext.HTTP.UserAgent, "test-agent/1"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.what, c.got, c.want)
		}
	}
	if requestID == "" {
		t.Error("no apigw-requestid header")
	}
	if !strings.HasPrefix(ev.Headers["x-amzn-trace-id"], "Root=1-") {
		t.Errorf("x-amzn-trace-id = %q", ev.Headers["x-amzn-trace-id"])
	}
	for name := range ev.Headers {
		if name != strings.ToLower(name) {
			t.Errorf("header %q is not lower-case", name)
		}
	}

	// The event survives the JSON trip the Lambda runtime puts it through.
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var back events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, ev) {
		t.Fatalf("JSON round trip changed the event (err %v):\n%+v\n%+v", err, back, ev)
	}
}

func TestServerEncodesBodiesLikeAPIGateway(t *testing.T) {
	binary := []byte{0x00, 0xff, 0x10, 'a'}
	tests := []struct {
		name        string
		contentType string
		body        []byte
		wantBody    string
		wantB64     bool
	}{
		{"JSON passes as text", "application/json; charset=utf-8", []byte(`{"a":"é"}`), `{"a":"é"}`, false},
		{"text/plain passes as text", "text/plain", []byte("hi"), "hi", false},
		{"a +json media type passes as text", "application/problem+json", []byte(`{}`), `{}`, false},
		{"octet-stream is base64", "application/octet-stream", binary, base64.StdEncoding.EncodeToString(binary), true},
		{"a form post is base64", "application/x-www-form-urlencoded", []byte("a=1"), base64.StdEncoding.EncodeToString([]byte("a=1")), true},
		{"no content type is base64", "", []byte("x"), base64.StdEncoding.EncodeToString([]byte("x")), true},
		{"invalid UTF-8 labelled JSON is base64", "application/json", binary, base64.StdEncoding.EncodeToString(binary), true},
		{"an empty body is empty and not base64", "application/octet-stream", nil, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{resp: events.APIGatewayV2HTTPResponse{StatusCode: 200}}
			s := newTestServer(t, map[string]httpapi.LambdaHandler{"ReplyFunction": rec.handle})
			req := httptest.NewRequest("POST", "/v1/tasks/t/messages", bytes.NewReader(tt.body))
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			s.ServeHTTP(httptest.NewRecorder(), req)
			if len(rec.got) != 1 {
				t.Fatal("handler not called")
			}
			ev := rec.got[0]
			if ev.Body != tt.wantBody || ev.IsBase64Encoded != tt.wantB64 {
				t.Fatalf("body = %q (base64 %v), want %q (base64 %v)", ev.Body, ev.IsBase64Encoded, tt.wantBody, tt.wantB64)
			}
		})
	}
}

func TestServerWritesTheFunctionsResponse(t *testing.T) {
	rec := &recorder{resp: events.APIGatewayV2HTTPResponse{
		StatusCode:        201,
		Headers:           map[string]string{"Content-Type": "image/png", "X-One": "1"},
		MultiValueHeaders: map[string][]string{"X-Many": {"a", "b"}},
		Cookies:           []string{"s=1; HttpOnly", "t=2"},
		Body:              base64.StdEncoding.EncodeToString([]byte{0x89, 'P', 'N', 'G'}),
		IsBase64Encoded:   true,
	}}
	s := newTestServer(t, map[string]httpapi.LambdaHandler{"InboxFunction": rec.handle})
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", "/v1/inbox", nil))
	if w.Code != 201 {
		t.Errorf("status = %d", w.Code)
	}
	if got := w.Body.Bytes(); !bytes.Equal(got, []byte{0x89, 'P', 'N', 'G'}) {
		t.Errorf("body = %q, want the base64-decoded bytes", got)
	}
	h := w.Result().Header
	if h.Get("Content-Type") != "image/png" || h.Get("X-One") != "1" {
		t.Errorf("headers = %v", h)
	}
	if !reflect.DeepEqual(h.Values("X-Many"), []string{"a", "b"}) {
		t.Errorf("X-Many = %v", h.Values("X-Many"))
	}
	if !reflect.DeepEqual(h.Values("Set-Cookie"), []string{"s=1; HttpOnly", "t=2"}) {
		t.Errorf("Set-Cookie = %v", h.Values("Set-Cookie"))
	}
}

func TestServerAnswersForTheGatewayWhenNoFunctionCan(t *testing.T) {
	failing := &recorder{err: errors.New("boom")}
	panicking := func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		panic("kaboom")
	}
	tests := []struct {
		name        string
		handlers    map[string]httpapi.LambdaHandler
		method      string
		path        string
		body        io.Reader
		wantStatus  int
		wantCode    string
		wantAllow   string
		wantMessage string
	}{
		{"an unknown path is 404 route_not_found", nil, "GET", "/v1/nope", nil, 404, "route_not_found", "", ""},
		{"a known path with another method is 405 with Allow", nil, "DELETE", "/v1/inbox", nil, 405, "method_not_allowed", "GET", ""},
		{"a body over 10 MB is 413", map[string]httpapi.LambdaHandler{"ReplyFunction": failing.handle},
			"POST", "/v1/tasks/t/messages", bytes.NewReader(make([]byte, MaxPayloadBytes+1)), 413, "body_too_large", "", ""},
		{"a route without a handler is 501", nil, "GET", "/v1/missing", nil, 501, "not_implemented", "", ""},
		{"a handler error is a bare 500 as API Gateway gives", map[string]httpapi.LambdaHandler{"InboxFunction": failing.handle},
			"GET", "/v1/inbox", nil, 500, "", "", "Internal Server Error"},
		{"a handler panic is a bare 500", map[string]httpapi.LambdaHandler{"InboxFunction": panicking},
			"GET", "/v1/inbox", nil, 500, "", "", "Internal Server Error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, tt.handlers)
			w := httptest.NewRecorder()
			s.ServeHTTP(w, httptest.NewRequest(tt.method, tt.path, tt.body))
			if w.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %s)", w.Code, tt.wantStatus, w.Body.String())
			}
			if tt.wantCode != "" {
				if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("Content-Type = %q", ct)
				}
				var p httpapi.Problem
				if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Code != tt.wantCode || p.Status != tt.wantStatus {
					t.Errorf("problem = %+v (%v), want code %q", p, err, tt.wantCode)
				}
			}
			if got := w.Header().Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
			}
			if tt.wantMessage != "" {
				var m struct{ Message string }
				if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil || m.Message != tt.wantMessage {
					t.Errorf("body = %s, want message %q", w.Body.String(), tt.wantMessage)
				}
			}
		})
	}
}

func TestServerGivesTheHandlerTheFunctionTimeout(t *testing.T) {
	var left time.Duration
	h := func(ctx context.Context, _ events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		dl, ok := ctx.Deadline()
		if ok {
			left = time.Until(dl)
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: 204}, nil
	}
	s := newTestServer(t, map[string]httpapi.LambdaHandler{"InboxFunction": h})
	s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/inbox", nil))
	if left <= 20*time.Second || left > 25*time.Second {
		t.Fatalf("handler deadline in %v, want the function's 25 s timeout", left)
	}
}

// The 413 above must come from the gateway, before any handler runs.
func TestOversizedBodyNeverReachesTheHandler(t *testing.T) {
	rec := &recorder{resp: events.APIGatewayV2HTTPResponse{StatusCode: 200}}
	s := newTestServer(t, map[string]httpapi.LambdaHandler{"ReplyFunction": rec.handle})
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("POST", "/v1/tasks/t/messages", bytes.NewReader(make([]byte, MaxPayloadBytes+1))))
	if w.Code != http.StatusRequestEntityTooLarge || len(rec.got) != 0 {
		t.Fatalf("status %d, handler calls %d", w.Code, len(rec.got))
	}
	w = httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("POST", "/v1/tasks/t/messages", bytes.NewReader(make([]byte, MaxPayloadBytes))))
	if w.Code != 200 || len(rec.got) != 1 {
		t.Fatalf("a body of exactly 10 MB: status %d, handler calls %d", w.Code, len(rec.got))
	}
}

func TestOnlyAPIGatewaySendsContentLengthForAnEmptyBody(t *testing.T) {
	now := time.Date(2026, 3, 12, 19, 3, 58, 0, time.UTC)
	m := Match{Function: "ReplyFunction", Route: samtemplate.Route{Method: "GET", Path: "/v1/health"}}
	for _, c := range []struct {
		name, body string
		urlEvent   bool
		want       string // "" for no content-length header
	}{
		{"API Gateway sends 0 for a request without a body", "", false, "0"},
		{"API Gateway sends the length of a body", "{}", false, "2"},
		{"a Function URL sends none for a request without a body", "", true, ""},
		{"a Function URL sends the length of a body", "{}", true, "2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "http://mesh.example/v1/health", nil)
			var headers map[string]string
			if c.urlEvent {
				headers = BuildURLEvent(req, []byte(c.body), "rid", now).Headers
			} else {
				headers = BuildEvent(req, []byte(c.body), m, "rid", now).Headers
			}
			if got, ok := headers["content-length"]; got != c.want || ok != (c.want != "") {
				t.Fatalf("content-length = %q (present: %v), want %q", got, ok, c.want)
			}
		})
	}
}
