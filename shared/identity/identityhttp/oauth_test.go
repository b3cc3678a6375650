package identityhttp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

const oauthRoute = "POST /v1/oauth/token"

// oauthEvent is a token request with body sent as contentType ("" sends
// none) and the Authorization header auth ("" sends none).
func oauthEvent(body, contentType, auth, sourceIP string) events.APIGatewayV2HTTPRequest {
	ev := apiEvent(oauthRoute, nil, nil, auth, "")
	ev.Body = body
	if contentType != "" {
		ev.Headers["content-type"] = contentType
	}
	ev.RequestContext.HTTP.SourceIP = sourceIP
	return ev
}

func basicAuth(id, secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(id)+":"+url.QueryEscape(secret)))
}

func callOAuth(t *testing.T, s *identity.Service, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, api.OAuthError) {
	t.Helper()
	resp, err := OAuthToken(s, quiet)(context.Background(), ev)
	if err != nil {
		t.Fatalf("a Go error: %v", err)
	}
	if resp.Headers["Content-Type"] != "application/json" || resp.Headers["Cache-Control"] != "no-store" || resp.Headers["Pragma"] != "no-cache" {
		t.Fatalf("headers %v: want JSON, never cached", resp.Headers)
	}
	var e api.OAuthError
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal([]byte(resp.Body), &e); err != nil || e.Error == "" {
			t.Fatalf("%d is not an OAuth error: %s", resp.StatusCode, resp.Body)
		}
	}
	return resp, e
}

func TestOAuthTokenEndpoint(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	key, _ := identitytest.NewAgent(t, s, "alice")
	revoked, _ := identitytest.NewAgent(t, s, "rita")
	if _, err := s.RevokeKey(context.Background(), "rita", revoked[4:16]); err != nil {
		t.Fatal(err)
	}
	const form = "application/x-www-form-urlencoded"
	creds := url.Values{"grant_type": {"client_credentials"}, "client_id": {"alice"}, "client_secret": {key}}.Encode()

	ok := []struct {
		name string
		ev   events.APIGatewayV2HTTPRequest
	}{
		{"client credentials in the form", oauthEvent(creds, form, "", "198.51.100.1")},
		{"client credentials as HTTP Basic", oauthEvent("grant_type=client_credentials", form, basicAuth("alice", key), "198.51.100.1")},
		{"HTTP Basic with the same client_id in the form", oauthEvent("grant_type=client_credentials&client_id=alice", form, basicAuth("alice", key), "198.51.100.1")},
		{"a UTF-8 charset and a scope", oauthEvent(creds+"&scope=a2a", form+"; charset=UTF-8", "", "198.51.100.1")},
		{"a base64-encoded body", func() events.APIGatewayV2HTTPRequest {
			ev := oauthEvent(base64.StdEncoding.EncodeToString([]byte(creds)), form, "", "198.51.100.1")
			ev.IsBase64Encoded = true
			return ev
		}()},
	}
	for _, tc := range ok {
		t.Run(tc.name+" gives a bearer token for the agent, never cached", func(t *testing.T) {
			resp, _ := callOAuth(t, s, tc.ev)
			var tok api.OAuthTokenResponse
			if err := json.Unmarshal([]byte(resp.Body), &tok); err != nil || resp.StatusCode != http.StatusOK || tok.TokenType != "Bearer" || tok.ExpiresIn != 3600 {
				t.Fatalf("%d %s", resp.StatusCode, resp.Body)
			}
			if c, err := s.AuthenticateAgent(context.Background(), tok.AccessToken); err != nil || c.AgentID != "alice" {
				t.Fatalf("the token is not alice's: %+v %v", c, err)
			}
		})
	}

	wrong := url.Values{"grant_type": {"client_credentials"}, "client_id": {"alice"}, "client_secret": {key[:len(key)-4] + "AAAA"}}.Encode()
	bad := []struct {
		name   string
		ev     events.APIGatewayV2HTTPRequest
		status int
		code   string
		// viaHeader: the client sent an Authorization header, so a 401 must
		// carry WWW-Authenticate
		viaHeader bool
	}{
		{"a wrong secret", oauthEvent(wrong, form, "", "198.51.100.2"), 401, "invalid_client", false},
		{"a wrong secret as HTTP Basic", oauthEvent("grant_type=client_credentials", form, basicAuth("alice", key[:len(key)-4]+"AAAA"), "198.51.100.2"), 401, "invalid_client", true},
		{"a revoked key", oauthEvent(url.Values{"grant_type": {"client_credentials"}, "client_id": {"rita"}, "client_secret": {revoked}}.Encode(), form, "", "198.51.100.2"), 401, "invalid_client", false},
		{"alice's key as another client", oauthEvent(url.Values{"grant_type": {"client_credentials"}, "client_id": {"rita"}, "client_secret": {key}}.Encode(), form, "", "198.51.100.2"), 401, "invalid_client", false},
		{"malformed Basic credentials", oauthEvent("grant_type=client_credentials", form, "Basic !!!", "198.51.100.2"), 401, "invalid_client", true},
		{"no grant_type", oauthEvent("client_id=alice&client_secret="+url.QueryEscape(key), form, "", "198.51.100.2"), 400, "invalid_request", false},
		{"another grant", oauthEvent("grant_type=password&username=alice&password=x", form, "", "198.51.100.2"), 400, "unsupported_grant_type", false},
		{"no client_secret", oauthEvent("grant_type=client_credentials&client_id=alice", form, "", "198.51.100.2"), 401, "invalid_client", false},
		{"no client_id", oauthEvent("grant_type=client_credentials&client_secret="+url.QueryEscape(key), form, "", "198.51.100.2"), 401, "invalid_client", false},
		{"an empty client_secret", oauthEvent("grant_type=client_credentials&client_id=alice&client_secret=", form, "", "198.51.100.2"), 401, "invalid_client", false},
		{"no client authentication at all", oauthEvent("grant_type=client_credentials", form, "", "198.51.100.2"), 401, "invalid_client", false},
		{"HTTP Basic with an empty secret", oauthEvent("grant_type=client_credentials", form, basicAuth("alice", ""), "198.51.100.2"), 401, "invalid_client", true},
		{"HTTP Basic with an empty client id", oauthEvent("grant_type=client_credentials", form, basicAuth("", key), "198.51.100.2"), 401, "invalid_client", true},
		{"a repeated parameter", oauthEvent(creds+"&client_id=rita", form, "", "198.51.100.2"), 400, "invalid_request", false},
		{"a JSON body", oauthEvent(`{"grant_type":"client_credentials","client_id":"alice","client_secret":"`+key+`"}`, "application/json", "", "198.51.100.2"), 400, "invalid_request", false},
		{"no Content-Type", oauthEvent(creds, "", "", "198.51.100.2"), 400, "invalid_request", false},
		{"a Latin-1 charset", oauthEvent(creds, form+"; charset=ISO-8859-1", "", "198.51.100.2"), 400, "invalid_request", false},
		{"a malformed form", oauthEvent("grant_type=%zz", form, "", "198.51.100.2"), 400, "invalid_request", false},
		{"a body over 4 KiB", oauthEvent(creds+"&pad="+strings.Repeat("p", MaxOAuthBodyBytes), form, "", "198.51.100.2"), 400, "invalid_request", false},
		{"HTTP Basic and client_secret both", oauthEvent(creds, form, basicAuth("alice", key), "198.51.100.2"), 400, "invalid_request", false},
		{"HTTP Basic for one client and client_id of another", oauthEvent("grant_type=client_credentials&client_id=rita", form, basicAuth("alice", key), "198.51.100.2"), 400, "invalid_request", false},
		{"a bearer token instead of client authentication", oauthEvent("grant_type=client_credentials", form, "Bearer x", "198.51.100.2"), 401, "invalid_client", true},
		{"a bearer token beside client credentials in the form", oauthEvent(creds, form, "Bearer x", "198.51.100.2"), 401, "invalid_client", true},
		{"a Digest header", oauthEvent("grant_type=client_credentials", form, `Digest username="alice"`, "198.51.100.2"), 401, "invalid_client", true},
		{"HTTP Basic with a JSON body", oauthEvent(`{"grant_type":"client_credentials"}`, "application/json", basicAuth("alice", key), "198.51.100.2"), 400, "invalid_request", false},
	}
	for _, tc := range bad {
		t.Run(tc.name+" is "+tc.code, func(t *testing.T) {
			resp, e := callOAuth(t, s, tc.ev)
			if resp.StatusCode != tc.status || e.Error != tc.code {
				t.Fatalf("got %d %s, want %d %s", resp.StatusCode, resp.Body, tc.status, tc.code)
			}
			if _, has := resp.Headers["WWW-Authenticate"]; has != tc.viaHeader {
				t.Fatalf("WWW-Authenticate %q (Authorization header sent: %v)", resp.Headers["WWW-Authenticate"], tc.viaHeader)
			}
			if strings.Contains(resp.Body, key[16:]) {
				t.Fatalf("the answer repeats the secret: %s", resp.Body)
			}
		})
	}
}

func TestOAuthErrorsKeepTheirClassAndOnlyServerFailuresAre500(t *testing.T) {
	ev := oauthEvent("", "", "", "")
	cases := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"a refusal of the client", mesh.Errorf(mesh.KindUnauthorized, "key_revoked", "revoked"), 401, OAuthInvalidClient},
		{"a spent rate budget", &mesh.Error{Kind: mesh.KindRateLimited, Code: "rate_limited", Message: "slow", RetryAfter: 2}, 429, OAuthSlowDown},
		{"an unavailable dependency", mesh.Errorf(mesh.KindUnavailable, "unavailable", "later"), 503, OAuthTemporarily},
		{"a forbidden request", mesh.Errorf(mesh.KindForbidden, "suspended", "the account is suspended"), 400, OAuthInvalidRequest},
		{"a missing resource", mesh.Errorf(mesh.KindNotFound, "agent_not_found", "no agent"), 400, OAuthInvalidRequest},
		{"a conflict", mesh.Errorf(mesh.KindConflict, "conflict", "conflict"), 400, OAuthInvalidRequest},
		{"an unprocessable request", mesh.Errorf(mesh.KindUnprocessable, "invalid", "bad"), 400, OAuthInvalidRequest},
		{"a plain Go error", errors.New("boom"), 500, OAuthServerError},
		{"an internal mesh error", mesh.Errorf(mesh.KindInternal, "internal", "boom"), 500, OAuthServerError},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s is %d %s, never cached", tc.name, tc.status, tc.code), func(t *testing.T) {
			resp := oauthError(quiet, ev, tc.err, false)
			var e api.OAuthError
			if err := json.Unmarshal([]byte(resp.Body), &e); err != nil || resp.StatusCode != tc.status || e.Error != tc.code {
				t.Fatalf("got %d %s", resp.StatusCode, resp.Body)
			}
			if resp.Headers["Cache-Control"] != "no-store" || resp.Headers["Pragma"] != "no-cache" {
				t.Fatalf("headers %v", resp.Headers)
			}
			if _, has := resp.Headers["Retry-After"]; has != (tc.status == 429 || tc.status == 503) {
				t.Fatalf("Retry-After on %d: %v", tc.status, resp.Headers)
			}
		})
	}
}

func TestOAuthTokenThrottlesFailuresLikeTheTokenExchange(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	key, _ := identitytest.NewAgent(t, s, "alice")
	const form = "application/x-www-form-urlencoded"
	wrong := url.Values{"grant_type": {"client_credentials"}, "client_id": {"alice"}, "client_secret": {key[:len(key)-4] + "AAAA"}}.Encode()
	var resp events.APIGatewayV2HTTPResponse
	var e api.OAuthError
	for i := 0; i <= keyFailuresBurst && resp.StatusCode != http.StatusTooManyRequests; i++ {
		resp, e = callOAuth(t, s, oauthEvent(wrong, form, "", "198.51.100.3"))
	}
	t.Run("failures past the key's budget are 429 slow_down with Retry-After", func(t *testing.T) {
		if resp.StatusCode != http.StatusTooManyRequests || e.Error != OAuthSlowDown || resp.Headers["Retry-After"] == "" {
			t.Fatalf("%d %v %s", resp.StatusCode, resp.Headers, resp.Body)
		}
	})
	t.Run("then the right secret is refused too, from any address", func(t *testing.T) {
		right := url.Values{"grant_type": {"client_credentials"}, "client_id": {"alice"}, "client_secret": {key}}.Encode()
		if resp, _ := callOAuth(t, s, oauthEvent(right, form, "", "203.0.113.99")); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%d %s", resp.StatusCode, resp.Body)
		}
	})
}

func TestOAuthSampleEvent(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	key, _ := identitytest.NewAgent(t, s, "claude-bot")
	routes := templateRoutes(t)
	t.Run("oauth-token.json is a real "+routes[OAuthTokenFunction]+" event that gets a token with real credentials", func(t *testing.T) {
		if routes[OAuthTokenFunction] != oauthRoute {
			t.Fatalf("template route %q", routes[OAuthTokenFunction])
		}
		if _, err := os.Stat("../../../functions/" + kebab(OAuthTokenFunction) + "/main.go"); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile("../../../events/" + kebab(OAuthTokenFunction) + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(b, &ev); err != nil || ev.RouteKey != oauthRoute || ev.RequestContext.RouteKey != oauthRoute {
			t.Fatalf("%+v %v", ev, err)
		}
		form, err := url.ParseQuery(ev.Body)
		if err != nil || form.Get("client_id") != "claude-bot" {
			t.Fatalf("body %q: %v", ev.Body, err)
		}
		form.Set("client_secret", key)
		ev.Body = form.Encode()
		if resp, _ := callOAuth(t, s, ev); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, resp.Body)
		}
	})
}
