package accountshttp

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/accounts"
)

func TestSignInGivesAGuardedSessionCookie(t *testing.T) {
	f := newFixture(t)
	f.account("ada@example.org", false)
	signIn := func(host, email, password string) resp {
		return f.call(req{fn: "AccountSignInFunction", method: http.MethodPost, host: host,
			body: map[string]string{"email": email, "password": password}})
	}
	t.Run("the right password gets an HttpOnly SameSite=Strict cookie, not Secure on localhost", func(t *testing.T) {
		r := signIn("127.0.0.1:8080", "ADA@example.org", "correct horse battery")
		c := r.header["Set-Cookie"]
		if r.status != http.StatusOK || !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Strict") || strings.Contains(c, "Secure") {
			t.Fatalf("%d %q %s", r.status, c, r.body)
		}
		if !strings.Contains(r.body, `"csrf_token"`) || strings.Contains(r.body, cookieToken(c)) {
			t.Errorf("the body must carry the CSRF token and never the session token: %s", r.body)
		}
	})
	t.Run("outside localhost the cookie is Secure", func(t *testing.T) {
		r := signIn("mesh.example.org", "ada@example.org", "correct horse battery")
		if c := r.header["Set-Cookie"]; !strings.Contains(c, "; Secure") {
			t.Fatalf("%q", c)
		}
	})
	for _, tc := range []struct{ what, email, password string }{
		{"a wrong password", "ada@example.org", "wrong horse battery"},
		{"an unknown email", "bob@example.org", "correct horse battery"},
		{"the operator account, which has no password", "operator@localhost", ""},
	} {
		t.Run(tc.what+" is a 401 invalid_credentials without a cookie", func(t *testing.T) {
			r := signIn("", tc.email, tc.password)
			if r.status != http.StatusUnauthorized || r.code() != "invalid_credentials" || r.header["Set-Cookie"] != "" {
				t.Fatalf("%d %s %v", r.status, r.body, r.header)
			}
		})
	}
}

func TestRepeatedSignInFailuresAreThrottledEvenForTheRightPassword(t *testing.T) {
	f := newFixture(t)
	f.account("ada@example.org", false)
	for i := 0; i < 10; i++ {
		// Different addresses: the email's own budget is what runs out.
		r := f.call(req{fn: "AccountSignInFunction", method: http.MethodPost, sourceIP: "198.51.100." + string(rune('1'+i%9)),
			body: map[string]string{"email": "ada@example.org", "password": "wrong horse battery"}})
		if r.status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d %s", i, r.status, r.body)
		}
	}
	r := f.call(req{fn: "AccountSignInFunction", method: http.MethodPost, body: map[string]string{"email": "ada@example.org", "password": "correct horse battery"}})
	if r.status != http.StatusTooManyRequests || r.header["Retry-After"] == "" {
		t.Fatalf("after 10 failures: %d %s", r.status, r.body)
	}
	f.clock.Advance(time.Minute)
	r = f.call(req{fn: "AccountSignInFunction", method: http.MethodPost, body: map[string]string{"email": "ada@example.org", "password": "correct horse battery"}})
	if r.status != http.StatusOK {
		t.Fatalf("after the budget refilled: %d %s", r.status, r.body)
	}
}

func TestSessionsEndAtExpiryAndAtSignOut(t *testing.T) {
	f := newFixture(t)
	list := func(token string) resp {
		return f.call(req{fn: "AccountListAgentsFunction", method: http.MethodGet, cookie: token})
	}
	t.Run("an expired session is refused", func(t *testing.T) {
		a := f.account("ada@example.org", false)
		if r := list(a.token); r.status != http.StatusOK {
			t.Fatalf("fresh session: %d %s", r.status, r.body)
		}
		f.clock.Advance(accounts.DefaultSessionTTL)
		if r := list(a.token); r.status != http.StatusUnauthorized || r.code() != "session_expired" {
			t.Fatalf("expired session: %d %s", r.status, r.body)
		}
	})
	t.Run("signing out ends the session and deletes the cookie", func(t *testing.T) {
		a := f.account("bea@example.org", false)
		r := f.call(req{fn: "AccountSignOutFunction", method: http.MethodDelete, cookie: a.token, csrf: a.csrf})
		if r.status != http.StatusNoContent || !strings.Contains(r.header["Set-Cookie"], "Max-Age=0") {
			t.Fatalf("sign out: %d %s %v", r.status, r.body, r.header)
		}
		if r := list(a.token); r.status != http.StatusUnauthorized || r.code() != "not_signed_in" {
			t.Fatalf("after sign-out: %d %s", r.status, r.body)
		}
	})
}
