package pushtest

import (
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/push"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// Fixture is a push.Service on a fresh migrated database (identitytest's
// service and clock) with a recording Relay: the one fixture of the push
// channel's server-side tests.
type Fixture struct {
	ID      *identity.Service
	Service *push.Service
	Relay   *Relay
	Clock   *testenv.Clock
}

// NewFixture builds a Fixture whose connections live maxAge.
func NewFixture(t testing.TB, maxAge time.Duration) *Fixture {
	t.Helper()
	id, clock, _ := identitytest.NewService(t)
	relay := NewRelay()
	return &Fixture{ID: id, Relay: relay, Clock: clock,
		Service: &push.Service{DB: id.DB, Identity: id, Relay: relay, MaxConnAge: maxAge, Clock: clock.Now}}
}

// Rows counts the rows of push_connections.
func (f *Fixture) Rows(t testing.TB) int {
	t.Helper()
	var n int
	if err := f.ID.DB.QueryRow("SELECT COUNT(*) FROM push_connections").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
