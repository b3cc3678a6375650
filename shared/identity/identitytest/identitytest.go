// Package identitytest builds test agents through the real
// identity.CreateAgent, so a fixture holds every row an agent has (agents,
// api_keys, inbox_counters, rate_limits, agent_accounts, its audit entry)
// and cannot drift from the code when CreateAgent writes one more. It also
// builds the Service those tests share, with fixed test credentials. Tests
// of any package above identity import it, and so do identity's external
// tests (package identity_test); its internal tests cannot, as that would
// be an import cycle.
package identitytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/seal"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// AdminKey is the operator key of a test Service. The credentials are
// fixed, not random, so helper processes a test starts can share them.
const AdminKey = "test-admin-key-0123456789abcdef0123456789"

// JWTKeys are the token signing keys of a test Service: the first signs,
// the second is a retired key still accepted, as after a rotation.
var JWTKeys = []config.JWTKey{
	{ID: "k2026a", Secret: []byte("0123456789abcdef0123456789abcdef-first")},
	{ID: "k2025z", Secret: []byte("fedcba9876543210fedcba9876543210-second")},
}

// sealKey is the master key of a test Service's Sealer.
const sealKey = "0123456789abcdef0123456789abcdef"

// Service is an identity service on db with the test credentials, a
// one-hour token lifetime and clock as its time.
func Service(t testing.TB, db *mysql.DB, clock func() time.Time) *identity.Service {
	t.Helper()
	sealer, err := seal.New([]byte(sealKey))
	if err != nil {
		t.Fatal(err)
	}
	return &identity.Service{
		DB: db, Clock: clock, AdminKey: AdminKey, JWTKeys: JWTKeys, TokenTTL: time.Hour, Sealer: sealer,
		Kafka: identity.KafkaInfo{Brokers: []string{"127.0.0.1:29092"}, Topic: "inbox.events", Auth: "none"},
	}
}

// NewService is Service on a fresh database under a test clock; it also
// returns the clock, to move time on, and the database's DSN, for helper
// processes.
func NewService(t testing.TB) (*identity.Service, *testenv.Clock, string) {
	t.Helper()
	db, dsn := mysqltest.New(t)
	clock := testenv.NewClock()
	return Service(t, db, clock.Now), clock, dsn
}

// NewAgent creates agent id on s and returns its API key and a token for it.
func NewAgent(t testing.TB, s *identity.Service, id string) (apiKey, token string) {
	t.Helper()
	ctx := context.Background()
	_, key, err := s.CreateAgent(ctx, id, "")
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	tok, err := s.IssueToken(ctx, key, "")
	if err != nil {
		t.Fatalf("token for %s: %v", id, err)
	}
	return key, tok.Token
}

// workers is how many agents are created at once: group tests build
// thousands, and each CreateAgent is one short transaction.
const workers = 8

// Agents creates the agents ids (of the operator account, named after their
// ids) on db with identity.CreateAgent and returns their API keys by id. It
// fails the test on the first error.
func Agents(t testing.TB, db *mysql.DB, ids ...string) map[string]string {
	t.Helper()
	s := &identity.Service{DB: db}
	keys := make(map[string]string, len(ids))
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	slots := make(chan struct{}, workers)
	for _, id := range ids {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			_, key, err := s.CreateAgent(context.Background(), id, "")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("create agent %s: %w", id, err))
				return
			}
			keys[id] = key
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return keys
}
