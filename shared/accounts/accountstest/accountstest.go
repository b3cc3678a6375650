// Package accountstest builds the accounts service the tests of accounts
// (package accounts_test) and of its HTTP adapter (accountshttp) share: the
// real identity and tasks services on one fresh database, under one test
// clock.
package accountstest

import (
	"context"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// Password is the password of every test account.
const Password = "correct horse battery"

// NewService is an accounts service on a fresh database, with the identity
// service (admin key identitytest.AdminKey) and the tasks service on the
// same database, all three reading the returned clock.
func NewService(t testing.TB) (*accounts.Service, *testenv.Clock) {
	t.Helper()
	db, _ := mysqltest.New(t)
	c := testenv.NewClock()
	id := &identity.Service{DB: db, Clock: c.Now, AdminKey: identitytest.AdminKey, TokenTTL: time.Hour}
	ts := &tasks.Service{DB: db, Clock: c.Now}
	return &accounts.Service{DB: db, Identity: id, Tasks: ts, Clock: c.Now}, c
}

// SignIn signs the account email in with Password and returns the session
// token and its CSRF token.
func SignIn(t testing.TB, s *accounts.Service, email string) (token, csrf string) {
	t.Helper()
	out, token, err := s.SignIn(context.Background(), email, Password, "")
	if err != nil {
		t.Fatal(err)
	}
	return token, out.CSRFToken
}

// AuditRows counts the audit rows of action by actorKind that name agentID
// as subject, other party or actor.
func AuditRows(t testing.TB, db *mysql.DB, action, agentID, actorKind string) int {
	t.Helper()
	return mysqltest.Count(t, db, "SELECT COUNT(*) FROM audit_log WHERE action = ? AND (agent_id = ? OR other_id = ? OR actor_id = ?) AND actor_kind = ?",
		action, agentID, agentID, agentID, actorKind)
}
