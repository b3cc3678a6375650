package accounts_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/accounts/accountstest"
)

func TestASessionChecksItsTokenAndTheCSRFTokenOfWrites(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.account("ada@example.org", false)
	for _, tc := range []struct {
		what, token, csrf string
		write             bool
		code              string
	}{
		{"no token", "", a.csrf, false, "not_signed_in"},
		{"an unknown token", "forged-token", a.csrf, true, "not_signed_in"},
		{"a read without the CSRF token", a.token, "", false, ""},
		{"a write without the CSRF token", a.token, "", true, "csrf_token_invalid"},
		{"a write with another CSRF token", a.token, "not-" + a.csrf, true, "csrf_token_invalid"},
		{"a write with the session's CSRF token", a.token, a.csrf, true, ""},
	} {
		t.Run(tc.what, func(t *testing.T) {
			sess, err := f.s.Session(ctx, tc.token, tc.csrf, tc.write)
			switch {
			case tc.code != "" && !isCode(err, tc.code):
				t.Fatalf("want %s, got %v", tc.code, err)
			case tc.code == "" && (err != nil || sess.Account.AccountID != a.AccountID):
				t.Fatalf("%+v %v", sess, err)
			}
		})
	}
}

func TestAnAccountKeepsAtMostMaxSessions(t *testing.T) {
	f := newFixture(t)
	first := f.account("ada@example.org", false)
	for i := 0; i < accounts.MaxSessions; i++ {
		f.clock.Advance(time.Second)
		if _, _, err := f.s.SignIn(context.Background(), "ada@example.org", accountstest.Password, ""); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := f.s.DB.QueryRow("SELECT COUNT(*) FROM account_sessions WHERE account_id = ?", first.AccountID).Scan(&n); err != nil || n != accounts.MaxSessions {
		t.Fatalf("%d sessions (%v), want %d", n, err, accounts.MaxSessions)
	}
	if _, err := f.s.Authenticate(context.Background(), first.token); !isCode(err, "not_signed_in") {
		t.Fatalf("the oldest session still works: %v", err)
	}
}
