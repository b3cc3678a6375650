package accounts_test

import (
	"context"
	"testing"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/accounts/accountstest"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// fixture is the service on a fresh database under a test clock. The
// routes' own tests are in accountshttp.
type fixture struct {
	t     *testing.T
	s     *accounts.Service
	clock *testenv.Clock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s, c := accountstest.NewService(t)
	return &fixture{t: t, s: s, clock: c}
}

// signedIn is an account with a live session.
type signedIn struct {
	accounts.Account
	token, csrf string
}

// account creates an account and signs it in.
func (f *fixture) account(email string, operator bool) signedIn {
	f.t.Helper()
	a, err := f.s.CreateAccount(context.Background(), accounts.NewAccountInput{Email: email, Password: accountstest.Password, Operator: operator})
	if err != nil {
		f.t.Fatal(err)
	}
	token, csrf := accountstest.SignIn(f.t, f.s, email)
	return signedIn{Account: a, token: token, csrf: csrf}
}

// auditRows counts the audit rows of action on agentID by actor kind.
func auditRows(t *testing.T, f *fixture, action, agentID, actorKind string) int {
	t.Helper()
	return accountstest.AuditRows(t, f.s.DB, action, agentID, actorKind)
}
