package identityhttp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// OAuthTokenFunction is the logical ID of POST /v1/oauth/token in
// template.yaml.
const OAuthTokenFunction = "OAuthTokenFunction"

// MaxOAuthBodyBytes bounds a token request: its four parameters fit in far
// less (an API key is under 100 bytes).
const MaxOAuthBodyBytes = 4 << 10

// OAuth 2.0 error codes (RFC 6749 §5.2) the endpoint answers, and the two
// it uses for a throttled or unavailable server: slow_down is RFC 8628's
// (§3.5), temporarily_unavailable RFC 6749 §4.1.2.1's.
const (
	OAuthInvalidRequest       = "invalid_request"
	OAuthInvalidClient        = "invalid_client"
	OAuthUnsupportedGrantType = "unsupported_grant_type"
	OAuthSlowDown             = "slow_down"
	OAuthTemporarily          = "temporarily_unavailable"
	OAuthServerError          = "server_error"
)

// oauthFailure is a token request refused before the domain saw it.
type oauthFailure struct {
	code, description string
}

func (f *oauthFailure) Error() string { return f.code + ": " + f.description }

func badRequest(format string, args ...any) error {
	return &oauthFailure{OAuthInvalidRequest, fmt.Sprintf(format, args...)}
}

// OAuthToken is the handler of POST /v1/oauth/token: the client credentials
// grant of RFC 6749 §4.4, form-encoded, with the client authenticated by
// client_id and client_secret in the body or by HTTP Basic (§2.3.1). It
// answers OAuth's own JSON (§5.1, §5.2), not problem+json, so it is a raw
// handler beside httpapi.Lambda, with the same body bound, one log line per
// request, and 5xx causes logged, never the secret.
func OAuthToken(s *identity.Service, log *slog.Logger) httpapi.LambdaHandler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, _ error) {
		start := time.Now()
		viaHeader := false
		defer func() {
			if p := recover(); p != nil {
				resp = oauthError(log, ev, fmt.Errorf("panic: %v", p), viaHeader)
			}
			log.LogAttrs(ctx, slog.LevelInfo, "request",
				slog.String("route", ev.RouteKey),
				slog.String("request_id", ev.RequestContext.RequestID),
				slog.Int("status", resp.StatusCode),
				slog.Duration("took", time.Since(start)))
		}()
		var creds clientCredentials
		var err error
		creds, viaHeader, err = parseTokenRequest(ev)
		if err != nil {
			return oauthError(log, ev, err, viaHeader), nil
		}
		tok, err := s.IssueOAuthToken(ctx, creds.id, creds.secret, ev.RequestContext.HTTP.SourceIP)
		if err != nil {
			return oauthError(log, ev, err, viaHeader), nil
		}
		b, err := json.Marshal(tok)
		if err != nil {
			return oauthError(log, ev, err, viaHeader), nil
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusOK, Headers: oauthHeaders(), Body: string(b)}, nil
	}
}

type clientCredentials struct{ id, secret string }

// parseTokenRequest reads and checks a token request. viaHeader reports
// whether the client sent an Authorization header (a 401 then carries
// WWW-Authenticate, RFC 6749 §5.2). A malformed request is invalid_request;
// a request without usable client authentication (none at all, an empty
// id or secret, a scheme other than Basic) is invalid_client (§5.2: "no
// client authentication included, or unsupported authentication method").
func parseTokenRequest(ev events.APIGatewayV2HTTPRequest) (creds clientCredentials, viaHeader bool, err error) {
	auth := httpapi.Header(ev.Headers, "Authorization")
	viaHeader = auth != ""
	body, err := httpapi.ReadBody(ev, MaxOAuthBodyBytes)
	switch {
	case mesh.IsKind(err, mesh.KindTooLarge):
		return creds, viaHeader, badRequest("the request body exceeds %d bytes", MaxOAuthBodyBytes)
	case err != nil:
		return creds, viaHeader, badRequest("the request body is not valid base64")
	}
	if !isFormMediaType(httpapi.Header(ev.Headers, "Content-Type")) {
		return creds, viaHeader, badRequest("send the parameters as Content-Type: application/x-www-form-urlencoded")
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return creds, viaHeader, badRequest("the request body is not valid application/x-www-form-urlencoded")
	}
	for k, v := range form {
		if len(v) > 1 {
			return creds, viaHeader, badRequest("the parameter %.64q is repeated", k)
		}
	}
	switch gt := form.Get("grant_type"); {
	case gt == "":
		return creds, viaHeader, badRequest("grant_type is missing")
	case gt != "client_credentials":
		return creds, viaHeader, &oauthFailure{OAuthUnsupportedGrantType, "only grant_type=client_credentials is supported"}
	}
	creds = clientCredentials{id: form.Get("client_id"), secret: form.Get("client_secret")}
	if viaHeader {
		scheme, cred, _ := strings.Cut(auth, " ")
		if !strings.EqualFold(scheme, "Basic") {
			return clientCredentials{}, viaHeader, &oauthFailure{OAuthInvalidClient, "authenticate the client with HTTP Basic or client_id and client_secret in the body"}
		}
		if form.Has("client_secret") {
			return clientCredentials{}, viaHeader, badRequest("authenticate the client one way: HTTP Basic or client_secret in the body, not both")
		}
		id, secret, ok := parseBasic(cred)
		if !ok {
			return clientCredentials{}, viaHeader, &oauthFailure{OAuthInvalidClient, "the Basic credentials are malformed"}
		}
		if form.Has("client_id") && creds.id != id {
			return clientCredentials{}, viaHeader, badRequest("client_id differs from the Basic credentials' client")
		}
		creds = clientCredentials{id: id, secret: secret}
	}
	if creds.id == "" || creds.secret == "" {
		return clientCredentials{}, viaHeader, &oauthFailure{OAuthInvalidClient, "client authentication is missing: send client_id and client_secret"}
	}
	return creds, viaHeader, nil
}

// parseBasic decodes Basic credentials: base64 of client_id ":"
// client_secret, each form-encoded first (RFC 6749 §2.3.1).
func parseBasic(cred string) (id, secret string, ok bool) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", "", false
	}
	i, s, found := strings.Cut(string(raw), ":")
	if !found {
		return "", "", false
	}
	if id, err = url.QueryUnescape(i); err != nil {
		return "", "", false
	}
	if secret, err = url.QueryUnescape(s); err != nil {
		return "", "", false
	}
	return id, secret, true
}

// isFormMediaType reports whether ct is application/x-www-form-urlencoded,
// UTF-8 if it names a charset.
func isFormMediaType(ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return false
	}
	cs, ok := params["charset"]
	return !ok || strings.EqualFold(cs, "utf-8")
}

func oauthHeaders() map[string]string {
	// RFC 6749 §5.1: a token (and its errors) is never cached.
	return map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store", "Pragma": "no-cache"}
}

// oauthError maps err to the endpoint's answer: the one place where an
// error of this route becomes a status and an OAuth error code. A mesh
// error is classified by httpapi.StatusOf, so a client's error (4xx) is
// never answered as the server's (500 server_error is for real failures
// only). viaHeader: the client sent an Authorization header, so a 401
// carries WWW-Authenticate (RFC 6749 §5.2).
func oauthError(log *slog.Logger, ev events.APIGatewayV2HTTPRequest, err error, viaHeader bool) events.APIGatewayV2HTTPResponse {
	headers := oauthHeaders()
	var body api.OAuthError
	var status int
	var f *oauthFailure
	if errors.As(err, &f) {
		body = api.OAuthError{Error: f.code, ErrorDescription: f.description}
		status = http.StatusBadRequest
		if f.code == OAuthInvalidClient {
			status = http.StatusUnauthorized
		}
	} else {
		me := mesh.AsError(err)
		if me.Kind == mesh.KindInternal && mysql.IsUnavailable(err) {
			me = &mesh.Error{Kind: mesh.KindUnavailable, Code: "unavailable", Message: "the database is unreachable; retry later", Err: err}
		}
		status = httpapi.StatusOf(me.Kind)
		switch {
		case status == http.StatusUnauthorized:
			body = api.OAuthError{Error: OAuthInvalidClient, ErrorDescription: "client authentication failed"}
		case status == http.StatusTooManyRequests:
			// RFC 8628's code (§3.5), the registered OAuth error for "slow
			// down"; RFC 6749 §5.2 has none for throttling.
			body = api.OAuthError{Error: OAuthSlowDown, ErrorDescription: me.Message}
		case status == http.StatusServiceUnavailable:
			body = api.OAuthError{Error: OAuthTemporarily, ErrorDescription: me.Message}
			if me.RetryAfter <= 0 {
				cp := *me // never change a shared error value
				cp.RetryAfter = httpapi.UnavailableRetryAfter
				me = &cp
			}
		case status < 500:
			// Any other refusal of the request: OAuth answers it as a 400
			// invalid_request (§5.2), with the mesh's words.
			status = http.StatusBadRequest
			body = api.OAuthError{Error: OAuthInvalidRequest, ErrorDescription: me.Message}
		default:
			status = http.StatusInternalServerError
			body = api.OAuthError{Error: OAuthServerError, ErrorDescription: "internal error"}
		}
		if me.RetryAfter > 0 && (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) {
			headers["Retry-After"] = strconv.Itoa(me.RetryAfter)
		}
	}
	if status >= 500 {
		log.Error("request failed", "route", ev.RouteKey, "request_id", ev.RequestContext.RequestID, "err", err)
	}
	if status == http.StatusUnauthorized && viaHeader {
		headers["WWW-Authenticate"] = `Basic realm="agentmesh", charset="UTF-8"`
	}
	b, _ := json.Marshal(body)
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: headers, Body: string(b)}
}
