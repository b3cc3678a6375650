package accountshttp

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/accounts/accountstest"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// fixture is the accounts service of accountstest and its routes, called
// through the real middleware.
type fixture struct {
	t     *testing.T
	s     *accounts.Service
	clock *testenv.Clock
	eps   httpapi.Endpoints
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s, c := accountstest.NewService(t)
	return &fixture{t: t, s: s, clock: c, eps: Endpoints(s)}
}

// auditRows counts the audit rows of action on agentID by actor kind.
func auditRows(t *testing.T, f *fixture, action, agentID, actorKind string) int {
	t.Helper()
	return accountstest.AuditRows(t, f.s.DB, action, agentID, actorKind)
}

// req is one call of an account or admin route.
type req struct {
	fn       string
	method   string
	path     map[string]string
	query    map[string]string
	body     any
	cookie   string // session token; "" sends none
	csrf     string
	host     string
	admin    bool
	sourceIP string
}

type resp struct {
	status int
	body   string
	header map[string]string
}

func (r resp) code() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal([]byte(r.body), &p)
	return p.Code
}

func (f *fixture) call(r req) resp {
	f.t.Helper()
	ep, ok := f.eps[r.fn]
	if !ok {
		f.t.Fatalf("no endpoint %s", r.fn)
	}
	headers := map[string]string{"host": "127.0.0.1:8080"}
	if r.host != "" {
		headers["host"] = r.host
	}
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", Headers: headers, PathParameters: r.path, QueryStringParameters: r.query}
	ev.RequestContext.HTTP.Method = r.method
	ev.RequestContext.HTTP.SourceIP = "192.0.2.1"
	if r.sourceIP != "" {
		ev.RequestContext.HTTP.SourceIP = r.sourceIP
	}
	if r.body != nil {
		b, _ := json.Marshal(r.body)
		ev.Body = string(b)
		headers["content-type"] = "application/json"
	}
	if r.cookie != "" {
		ev.Cookies = []string{"other=1", CookieName + "=" + r.cookie}
	}
	if r.csrf != "" {
		headers["x-csrf-token"] = r.csrf
	}
	if r.admin {
		headers["authorization"] = "Bearer " + identitytest.AdminKey
	}
	out, err := httpapi.Lambda(identityhttp.Authenticator(f.s.Identity), slog.New(slog.NewTextHandler(io.Discard, nil)), ep)(context.Background(), ev)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp{status: out.StatusCode, body: out.Body, header: out.Headers}
}

// signedIn is an account with a live session.
type signedIn struct {
	accounts.Account
	token, csrf string
}

// account creates an account through the admin route and signs it in.
func (f *fixture) account(email string, operator bool) signedIn {
	f.t.Helper()
	r := f.call(req{fn: "AdminCreateAccountFunction", method: http.MethodPost, admin: true,
		body: map[string]any{"email": email, "password": accountstest.Password, "operator": operator}})
	if r.status != http.StatusCreated {
		f.t.Fatalf("create account: %d %s", r.status, r.body)
	}
	var a accounts.Account
	_ = json.Unmarshal([]byte(r.body), &a)
	token, csrf := accountstest.SignIn(f.t, f.s, email)
	return signedIn{Account: a, token: token, csrf: csrf}
}

// cookieToken is the session token of a Set-Cookie value.
func cookieToken(setCookie string) string {
	v, _, _ := strings.Cut(strings.TrimPrefix(setCookie, CookieName+"="), ";")
	return v
}
