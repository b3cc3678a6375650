package identity

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// Test credentials: fixed, so helper processes can share them.
const testAdminKey = "test-admin-key-0123456789abcdef0123456789"

var testJWTKeys = []config.JWTKey{
	{ID: "k2026a", Secret: []byte("0123456789abcdef0123456789abcdef-first")},
	{ID: "k2025z", Secret: []byte("fedcba9876543210fedcba9876543210-second")},
}

// fakeClock is a settable clock for presence and rate-limit tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 12, 10, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func testService(t testing.TB, db *mysql.DB, clock func() time.Time) *Service {
	t.Helper()
	sealer, err := seal.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	return &Service{
		DB: db, Clock: clock, AdminKey: testAdminKey, JWTKeys: testJWTKeys, TokenTTL: time.Hour, Sealer: sealer,
		Kafka: KafkaInfo{Brokers: []string{"127.0.0.1:29092"}, Topic: "inbox.events", Auth: "none"},
	}
}

// newTestService gives a service on a fresh database with a fake clock.
func newTestService(t testing.TB) (*Service, *fakeClock, string) {
	t.Helper()
	db, dsn := mysqltest.New(t)
	clock := newFakeClock()
	return testService(t, db, clock.Now), clock, dsn
}

// newAgent creates an agent and returns its API key and a token for it.
func newAgent(t testing.TB, s *Service, id string) (apiKey, token string) {
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
