package identityhttp

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/golang-jwt/jwt/v5"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// templateRoutes reads "Method Path" of every HttpApi function in
// template.yaml, so tests build the same events API Gateway sends.
func templateRoutes(t testing.TB) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]string{}
	var fn, method string
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") && strings.HasSuffix(trimmed, ":"):
			fn, method = strings.TrimSuffix(trimmed, ":"), ""
		case strings.HasPrefix(trimmed, "Method: "):
			method = strings.TrimPrefix(trimmed, "Method: ")
		case strings.HasPrefix(trimmed, "Path: ") && method != "":
			routes[fn] = method + " " + strings.TrimPrefix(trimmed, "Path: ")
		}
	}
	return routes
}

// apiEvent builds an API Gateway HTTP API v2.0 event for routeKey ("POST
// /v1/groups/{id}/members") with its path parameters filled in.
func apiEvent(routeKey string, params map[string]string, query map[string]string, auth, body string) events.APIGatewayV2HTTPRequest {
	method, tmpl, _ := strings.Cut(routeKey, " ")
	path := tmpl
	for k, v := range params {
		path = strings.ReplaceAll(path, "{"+k+"}", v)
	}
	headers := map[string]string{"accept": "application/json", "host": "a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com", "user-agent": "identity-test"}
	if auth != "" {
		headers["authorization"] = auth
	}
	if body != "" {
		headers["content-type"] = "application/json"
	}
	var raw []string
	for k, v := range query {
		raw = append(raw, k+"="+v)
	}
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: routeKey, RawPath: path, RawQueryString: strings.Join(raw, "&"),
		Headers: headers, QueryStringParameters: query, PathParameters: params, Body: body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: routeKey, Stage: "$default", RequestID: "test-request",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path, Protocol: "HTTP/1.1", SourceIP: "203.0.113.10"},
		},
	}
	if len(params) == 0 {
		ev.PathParameters = nil
	}
	return ev
}

// invokerFor wraps the named endpoint of s in the real middleware.
func invokerFor(s *identity.Service, name string) httpapi.LambdaHandler {
	return httpapi.Lambda(Authenticator(s), quiet, Endpoints(s).Must(name))
}

// invoke runs the named endpoint of s through the real middleware.
func invoke(t testing.TB, s *identity.Service, name string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	t.Helper()
	resp, err := invokerFor(s, name)(context.Background(), ev)
	if err != nil {
		t.Fatalf("%s returned a Go error: %v", name, err)
	}
	return resp
}

func bearer(tok string) string { return "Bearer " + tok }

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// problemCode checks resp is a problem document and returns its code.
func problemCode(t testing.TB, resp events.APIGatewayV2HTTPResponse) string {
	t.Helper()
	if ct := resp.Headers["Content-Type"]; ct != "application/problem+json" {
		t.Fatalf("status %d has Content-Type %q, want application/problem+json (body %s)", resp.StatusCode, ct, resp.Body)
	}
	var p httpapi.Problem
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || p.Code == "" || p.Status != resp.StatusCode {
		t.Fatalf("not a problem document with code and status %d: %s (%v)", resp.StatusCode, resp.Body, err)
	}
	return p.Code
}

// The shape of API keys and identity's failure budgets (identity's
// keyFailures and addrFailures), as the throttling tests expect them.
const (
	apiKeyPrefix      = "amk_"
	apiKeyIDLen       = 12
	keyFailuresBurst  = 10
	keyFailuresPer    = 6 * time.Second
	addrFailuresBurst = 30
)

// signToken mints a token for agentID and keyID as the token function
// would have at iat, with the service's first signing key.
func signToken(t testing.TB, agentID, keyID string, iat time.Time, ttl time.Duration) string {
	t.Helper()
	k := identitytest.JWTKeys[0]
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"sub": agentID, "akid": keyID, "iss": "agentmesh", "iat": iat.Unix(), "exp": iat.Add(ttl).Unix(),
	})
	tok.Header["kid"] = k.ID
	s, err := tok.SignedString(k.Signer())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
