package identity_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// TestPresenceScannerUsesIndex proves the scanner's statement is a range scan
// of agents_presence on a table shaped like production (most agents
// inactive), and that it changes exactly the stale active and draining ones.
func TestPresenceScannerUsesIndex(t *testing.T) {
	s, clock, _ := identitytest.NewService(t)
	ctx := context.Background()
	now := clock.Now()
	const total = 3000
	var stale int
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ins, err := tx.PrepareContext(ctx, "INSERT INTO agents (agent_id, name, status, last_heartbeat_at, created_at) VALUES (?, 'x', ?, ?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < total; i++ {
		status, hb := "inactive", now.Add(-time.Hour)
		switch i % 50 {
		case 0:
			status, hb = "active", now.Add(-10*time.Second)
		case 1:
			status, hb = "active", now.Add(-2*time.Minute)
			stale++
		case 2:
			status, hb = "draining", now.Add(-5*time.Minute)
			stale++
		}
		if _, err := ins.ExecContext(ctx, fmt.Sprintf("bulk-%05d", i), status, hb, now); err != nil {
			t.Fatal(err)
		}
	}
	ins.Close()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.ExecContext(ctx, "ANALYZE TABLE agents"); err != nil {
		t.Fatal(err)
	}

	const explain = "EXPLAIN UPDATE agents SET status = 'inactive' WHERE status IN ('active', 'draining') AND last_heartbeat_at < ? LIMIT 1000"
	if explain != "EXPLAIN "+identity.ScanPresenceSQL {
		t.Fatal("the EXPLAIN statement no longer matches the scanner's statement")
	}
	plans := mysqltest.Explain(t, s.DB, identity.ScanPresenceSQL, now.Add(-identity.PresenceTimeout))
	if len(plans) != 1 {
		t.Fatalf("plan has %d rows: %+v", len(plans), plans)
	}
	plan := plans[0]
	t.Logf("plan: %+v", plan)
	if plan.Type == "ALL" || plan.Type == "index" || plan.Key != "agents_presence" {
		t.Fatalf("the scanner does not range-scan agents_presence: type=%s key=%s", plan.Type, plan.Key)
	}
	if plan.Type != "range" {
		t.Errorf("access type %q, want range", plan.Type)
	}

	n, err := s.MarkInactive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(stale) {
		t.Fatalf("scanner changed %d agents, want the %d stale ones", n, stale)
	}
	var active int
	if err := s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM agents WHERE status = 'active'").Scan(&active); err != nil {
		t.Fatal(err)
	}
	if active != total/50 {
		t.Fatalf("%d agents still active, want %d", active, total/50)
	}
}
