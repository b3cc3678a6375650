package console

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/accounts/accountshttp"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

func TestConsolePagesKeepToTheSignedInAccount(t *testing.T) {
	db, _ := mysqltest.New(t)
	ctx := context.Background()
	id := &identity.Service{DB: db, Clock: time.Now, TokenTTL: time.Hour}
	s := accounts.New(id, &tasks.Service{DB: db})
	c := New(s, nil)
	signIn := func(email string, operator bool) string {
		if _, err := s.CreateAccount(ctx, accounts.NewAccountInput{Email: email, Password: "correct horse battery", Operator: operator}); err != nil {
			t.Fatal(err)
		}
		_, token, err := s.SignIn(ctx, email, "correct horse battery", "")
		if err != nil {
			t.Fatal(err)
		}
		return token
	}
	owner, other := signIn("owner@example.org", false), signIn("other@example.org", false)
	ownerAcc, err := s.Authenticate(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateAgent(ctx, ownerAcc.Account, "owned-agent-7", "", identity.KindNormal); err != nil {
		t.Fatal(err)
	}
	page := func(token, path string) events.APIGatewayV2HTTPResponse {
		ev := events.APIGatewayV2HTTPRequest{RawPath: "/console/" + path, Headers: map[string]string{"host": "127.0.0.1:8080"}}
		ev.RequestContext.HTTP.Method = http.MethodGet
		if path != "" {
			ev.PathParameters = map[string]string{"proxy": path}
		} else {
			ev.RawPath = "/console"
		}
		if token != "" {
			ev.Cookies = []string{accountshttp.CookieName + "=" + token}
		}
		resp, _ := c.Handler()(ctx, ev)
		return resp
	}
	for _, tc := range []struct {
		what, token, path string
		status            int
		has, lacks        string
	}{
		{"a signed-out visitor is sent to sign in", "", "agents", http.StatusSeeOther, "", ""},
		{"a forged session is sent to sign in", "forged", "", http.StatusSeeOther, "", ""},
		{"the owner sees its agent", owner, "agents", http.StatusOK, "owned-agent-7", ""},
		{"another account does not see it", other, "agents", http.StatusOK, "No agents yet", "owned-agent-7"},
		{"the owner is offered to delete its agent, by its id", owner, "agents", http.StatusOK, `class="delete-agent danger" data-agent="owned-agent-7"`, ""},
		{"an account that owns agents is offered its deletion with them", owner, "agents", http.StatusOK, `data-email="owner@example.org" data-agents="1"`, ""},
		{"an account without agents is offered its deletion alone", other, "agents", http.StatusOK, `data-email="other@example.org" data-agents="0"`, "delete-agent"},
		{"another account cannot open its tasks", other, "agents/owned-agent-7/tasks", http.StatusNotFound, "", "owned-agent-7/tasks/"},
		{"another account cannot open a timeline of it", other, "agents/owned-agent-7/tasks/t1", http.StatusNotFound, "", ""},
		{"an account that is not the operator's cannot see the outbox", owner, "outbox", http.StatusForbidden, "operator", ""},
		{"a page that does not exist is a 404", owner, "nope", http.StatusNotFound, "", ""},
		{"an asset is served with its type", "", "assets/console.js", http.StatusOK, "X-CSRF-Token", ""},
		{"a template is not an asset", "", "assets/agents.html", http.StatusNotFound, "", ""},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := page(tc.token, tc.path)
			if r.StatusCode != tc.status || !strings.Contains(r.Body, tc.has) || tc.lacks != "" && strings.Contains(r.Body, tc.lacks) {
				t.Fatalf("%d %v\n%.600s", r.StatusCode, r.Headers, r.Body)
			}
			if r.StatusCode == http.StatusSeeOther && r.Headers["Location"] != "/console/signin" {
				t.Fatalf("redirect to %q", r.Headers["Location"])
			}
		})
	}
	t.Run("pages carry the session's CSRF token and forbid framing", func(t *testing.T) {
		r := page(owner, "agents")
		sess, _ := s.Authenticate(ctx, owner)
		if !strings.Contains(r.Body, `content="`+sess.CSRF+`"`) || !strings.Contains(r.Headers["Content-Security-Policy"], "frame-ancestors 'none'") {
			t.Fatalf("%v", r.Headers)
		}
	})
}

// The embedded FS holds nothing but assets/, so a request that climbs out
// of it finds nothing whatever the handler checks. A tree with files beside
// assets/ shows that asset itself keeps to the directory.
func TestAnAssetRequestReachesOnlyScriptsAndStylesOfTheAssetsDirectory(t *testing.T) {
	fsys := fstest.MapFS{
		"assets/console.js":  {Data: []byte("the script")},
		"assets/agents.html": {Data: []byte("a template")},
		"console.go":         {Data: []byte("package console")},
		"secrets/key.txt":    {Data: []byte("a secret")},
	}
	for _, tc := range []struct {
		what, path string
		status     int
		body       string
	}{
		{"a script is served", "assets/console.js", http.StatusOK, "the script"},
		{"a cleaned path into the directory is served", "assets/x/../console.js", http.StatusOK, "the script"},
		{"a template is not served", "assets/agents.html", http.StatusNotFound, "not found"},
		{"a file beside the directory is not served", "assets/../console.go", http.StatusNotFound, "not found"},
		{"a file in another directory is not served", "assets/../secrets/key.txt", http.StatusNotFound, "not found"},
		{"a missing file is not found", "assets/nope.js", http.StatusNotFound, "not found"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := asset(fsys, tc.path)
			if r.StatusCode != tc.status || r.Body != tc.body {
				t.Fatalf("%s: %d %q, want %d %q", tc.path, r.StatusCode, r.Body, tc.status, tc.body)
			}
		})
	}
}
