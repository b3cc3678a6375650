package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

type noAuth struct{}

func (noAuth) AuthenticateAgent(context.Context, string) (Caller, error) {
	return Caller{AgentID: "ann"}, nil
}
func (noAuth) AuthenticateAdmin(context.Context, string) error { return nil }

// serve runs one request through Lambda with a handler that answers
// (out, err), and returns the answer and what was logged.
func serve(t *testing.T, body string, out Response, err error) (events.APIGatewayV2HTTPResponse, string, bool) {
	t.Helper()
	return serveAs(t, "application/json", body, out, err)
}

// serveAs is serve with the request's Content-Type ("" sends none).
func serveAs(t *testing.T, contentType, body string, out Response, err error) (events.APIGatewayV2HTTPResponse, string, bool) {
	t.Helper()
	var logs testenv.Buffer
	called := false
	ep := Endpoint{Auth: AuthAgent, Handle: func(context.Context, *Request) (Response, error) {
		called = true
		return out, err
	}}
	ev := events.APIGatewayV2HTTPRequest{RouteKey: "POST /v1/x", Body: body,
		Headers:        map[string]string{"authorization": "Bearer x"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "req-42"}}
	if contentType != "" {
		ev.Headers["content-type"] = contentType
	}
	resp, lerr := Lambda(noAuth{}, slog.New(slog.NewJSONHandler(&logs, nil)), ep)(context.Background(), ev)
	if lerr != nil {
		t.Fatal(lerr)
	}
	return resp, logs.String(), called
}

func code(t *testing.T, resp events.APIGatewayV2HTTPResponse) string {
	t.Helper()
	var p Problem
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil {
		t.Fatalf("not a problem document: %s", resp.Body)
	}
	return p.Code
}

func TestBodiesNestedPastTheCapAreRefusedBeforeTheHandlerRuns(t *testing.T) {
	for _, c := range []struct {
		name  string
		depth int
		want  int
	}{
		{"10,000 levels", 10000, 400},
		{"41 levels", MaxBodyDepth + 1, 400},
		{"40 levels", MaxBodyDepth, 200},
	} {
		t.Run(fmt.Sprintf("a body of %s answers %d", c.name, c.want), func(t *testing.T) {
			body := strings.Repeat(`{"a":`, c.depth) + "1" + strings.Repeat("}", c.depth)
			resp, _, called := serve(t, body, JSON(200, map[string]int{}), nil)
			if resp.StatusCode != c.want || called != (c.want == 200) {
				t.Fatalf("got %d %s (handler ran: %v)", resp.StatusCode, resp.Body, called)
			}
			if c.want == 400 && (code(t, resp) != "too_deep" || resp.Headers["Content-Type"] != "application/problem+json") {
				t.Fatalf("got %v %s", resp.Headers, resp.Body)
			}
		})
	}
}

func TestEvery5xxIsLoggedWithItsRequestID(t *testing.T) {
	netDown := fmt.Errorf("read rows: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	for _, c := range []struct {
		name   string
		out    Response
		err    error
		status int
		code   string
	}{
		{"a handler's unexpected error", Response{}, errors.New("boom"), 500, "internal"},
		{"a body that cannot be encoded", JSON(200, json.RawMessage(`{"a":`)), nil, 500, "internal"},
		{"a body larger than a Lambda response", JSON(200, strings.Repeat("x", jsonlimit.LambdaResponseBytes)), nil, 500, "internal"},
		{"an unreachable database", Response{}, netDown, 503, "unavailable"},
		{"a dependency the handler calls unavailable", Response{}, mesh.Errorf(mesh.KindUnavailable, "canceled", "x"), 503, "canceled"},
	} {
		t.Run(c.name+fmt.Sprintf(" answers %d %s and logs it", c.status, c.code), func(t *testing.T) {
			resp, logs, _ := serve(t, "", c.out, c.err)
			if resp.StatusCode != c.status || code(t, resp) != c.code {
				t.Fatalf("got %d %s", resp.StatusCode, resp.Body)
			}
			if !strings.Contains(logs, `"level":"ERROR"`) || !strings.Contains(logs, `"request_id":"req-42"`) {
				t.Fatalf("no error log with the request id: %s", logs)
			}
			if c.status == 503 && resp.Headers["Retry-After"] == "" {
				t.Fatalf("503 without Retry-After: %v", resp.Headers)
			}
			if len(resp.Body) > 4096 {
				t.Fatalf("the problem document is %d bytes", len(resp.Body))
			}
		})
	}
}

func TestBodiesRepeatingAKeyAreRefusedBeforeTheHandlerRuns(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       int
	}{
		{"a recipient given twice", `{"to":"nobody","to":"bob"}`, 400},
		{"a recipient given twice, once escaped", `{"to":"nobody","\u0074o":"bob"}`, 400},
		{"a key repeated inside a data part", `{"to":"bob","parts":[{"kind":"data","data":{"a":{"x":1,"x":2}}}]}`, 400},
		{"a key repeated in a status note", `{"status":"completed","message":{"parts":[{"kind":"text","kind":"data"}]}}`, 400},
		{"equal keys in sibling objects", `{"parts":[{"kind":"text"},{"kind":"text"}]}`, 200},
	} {
		t.Run(fmt.Sprintf("a body with %s answers %d", c.name, c.want), func(t *testing.T) {
			resp, _, called := serve(t, c.body, JSON(200, map[string]int{}), nil)
			if resp.StatusCode != c.want || called != (c.want == 200) {
				t.Fatalf("got %d %s (handler ran: %v)", resp.StatusCode, resp.Body, called)
			}
			if c.want == 400 && code(t, resp) != "duplicate_key" {
				t.Fatalf("got %s, want duplicate_key", resp.Body)
			}
		})
	}
}

func TestBodiesMustBeSentAsJSON(t *testing.T) {
	for _, c := range []struct {
		name, contentType, body string
		want                    int
	}{
		{"application/json", "application/json", `{}`, 200},
		{"application/json with charset=utf-8", "application/json; charset=utf-8", `{}`, 200},
		{"Application/JSON in capitals", "Application/JSON; Charset=UTF-8", `{}`, 200},
		{"no body and no Content-Type", "", ``, 200},
		{"no Content-Type", "", `{}`, 415},
		{"text/plain", "text/plain", `{}`, 415},
		{"application/problem+json", "application/problem+json", `{}`, 415},
		{"application/x-www-form-urlencoded", "application/x-www-form-urlencoded", `to=bob`, 415},
		{"application/json in latin-1", "application/json; charset=iso-8859-1", `{}`, 415},
		{"a malformed Content-Type", "application/json; charset", `{}`, 415},
	} {
		t.Run(fmt.Sprintf("a body sent as %s answers %d", c.name, c.want), func(t *testing.T) {
			resp, _, called := serveAs(t, c.contentType, c.body, JSON(200, map[string]int{}), nil)
			if resp.StatusCode != c.want || called != (c.want == 200) {
				t.Fatalf("got %d %s (handler ran: %v)", resp.StatusCode, resp.Body, called)
			}
			if c.want == 415 && (code(t, resp) != "unsupported_media_type" || resp.Headers["Content-Type"] != "application/problem+json") {
				t.Fatalf("got %v %s", resp.Headers, resp.Body)
			}
		})
	}
}

func TestDecodeMatchesFieldNamesExactly(t *testing.T) {
	type part struct {
		Kind string          `json:"kind"`
		Data json.RawMessage `json:"data,omitempty"`
	}
	type send struct {
		To    string `json:"to"`
		Parts []part `json:"parts"`
		Note  *struct {
			Parts []part `json:"parts"`
		} `json:"note,omitempty"`
	}
	for _, c := range []struct {
		name, body string
		ok         bool
	}{
		{"a recipient given again in capitals is refused", `{"to":"nobody","TO":"bob"}`, false},
		{"a field in capitals alone is refused", `{"To":"bob"}`, false},
		{"a part's field in capitals is refused", `{"to":"bob","parts":[{"KIND":"text"}]}`, false},
		{"a field spelled with the Kelvin sign is refused", "{\"to\":\"bob\",\"parts\":[{\"\u212aind\":\"text\"}]}", false},
		{"a nested note's field in capitals is refused", `{"to":"bob","note":{"Parts":[]}}`, false},
		{"keys differing in case inside data are data", `{"to":"bob","parts":[{"kind":"data","data":{"a":1,"A":2}}]}`, true},
		{"exact names decode", `{"to":"bob","parts":[{"kind":"text"}],"note":{"parts":[]}}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var v send
			err := (&Request{body: []byte(c.body)}).Decode(&v)
			if (err == nil) != c.ok {
				t.Fatalf("Decode(%s) = %v (to %q)", c.body, err, v.To)
			}
			if err != nil && mesh.AsError(err).Code != "invalid_json" {
				t.Fatalf("code %s", mesh.AsError(err).Code)
			}
		})
	}
}

func TestHeaderFindsANameWhateverItsCase(t *testing.T) {
	for _, c := range []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"a lower-cased name, as API Gateway sends it, is found", map[string]string{"content-type": "application/json"}, "application/json"},
		{"a name in another case, as a test may send it, is found", map[string]string{"CONTENT-TYPE": "application/json"}, "application/json"},
		{"an absent name is empty", map[string]string{"accept": "*/*"}, ""},
		{"no headers at all is empty", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Header(c.headers, "Content-Type"); got != c.want {
				t.Fatalf("Header = %q, want %q", got, c.want)
			}
		})
	}
}
