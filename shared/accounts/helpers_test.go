package accounts

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fixture is the service on a fresh database under a test clock. The
// routes' own tests are in accountshttp.
type fixture struct {
	t     *testing.T
	s     *Service
	clock *clock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db, _ := mysqltest.New(t)
	c := &clock{now: time.Date(2026, 3, 12, 10, 0, 0, 0, time.UTC)}
	id := &identity.Service{DB: db, Clock: c.Now, TokenTTL: time.Hour}
	ts := &tasks.Service{DB: db, Clock: c.Now}
	s := &Service{DB: db, Identity: id, Tasks: ts, Clock: c.Now}
	return &fixture{t: t, s: s, clock: c}
}

// signedIn is an account with a live session.
type signedIn struct {
	Account
	token, csrf string
}

// account creates an account and signs it in.
func (f *fixture) account(email string, operator bool) signedIn {
	f.t.Helper()
	ctx := context.Background()
	a, err := f.s.CreateAccount(ctx, NewAccountInput{Email: email, Password: "correct horse battery", Operator: operator})
	if err != nil {
		f.t.Fatal(err)
	}
	out, token, err := f.s.SignIn(ctx, email, "correct horse battery", "")
	if err != nil {
		f.t.Fatal(err)
	}
	return signedIn{Account: a, token: token, csrf: out.CSRFToken}
}
