package retention_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/retention"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestEveryTableOfTheSchemaHasABound(t *testing.T) {
	db, _ := mysqltest.New(t)
	tables := mysqltest.Strings(t, db, "", "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY table_name")
	t.Run("every table of the migrated schema is listed with its bound", func(t *testing.T) {
		var missing []string
		for _, name := range tables {
			if b, ok := retention.Tables[name]; !ok || b.Rule == "" {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			t.Fatalf("tables without a bound in retention.Tables: %s (say what keeps each from growing without end)", strings.Join(missing, ", "))
		}
	})
	t.Run("every listed table exists (no stale entry)", func(t *testing.T) {
		have := map[string]bool{}
		for _, name := range tables {
			have[name] = true
		}
		var stale []string
		for name := range retention.Tables {
			if !have[name] {
				stale = append(stale, name)
			}
		}
		sort.Strings(stale)
		if len(stale) > 0 {
			t.Fatalf("retention.Tables lists tables the schema does not have: %s", strings.Join(stale, ", "))
		}
	})
	t.Run("every age setting is one the configuration reads", func(t *testing.T) {
		for name, b := range retention.Tables {
			if b.Setting == "" {
				continue
			}
			if _, err := config.Load(func(k string) string {
				if k == b.Setting {
					return "not-a-duration"
				}
				return ""
			}); err == nil || !strings.Contains(err.Error(), b.Setting) {
				t.Errorf("%s: setting %s is not read by config.Load (err %v)", name, b.Setting, err)
			}
		}
	})
}

func TestTheConfigurationDefaultsAreThePolicyDefaults(t *testing.T) {
	c, err := config.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	want := config.RetentionConfig{Tasks: retention.DefaultTaskRetention, AuditLog: retention.DefaultAuditRetention,
		FriendRequests: retention.DefaultFriendRequestRetention, Sessions: retention.DefaultSessionRetention,
		RevokedKeys: retention.DefaultRevokedKeyRetention}
	if c.Retention != want {
		t.Fatalf("config defaults %+v, want %+v", c.Retention, want)
	}
}

// fixture is a migrated database with two agents and rows of every simple
// policy on both sides of its cutoff.
type fixture struct {
	db *mysql.DB
	j  *retention.Janitor
}

func newFixture(t *testing.T) *fixture {
	db, _ := mysqltest.New(t)
	identitytest.Agents(t, db, "alice", "bob")
	return &fixture{db: db, j: &retention.Janitor{DB: db, Clock: func() time.Time { return t0 }}}
}

func (f *fixture) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := f.db.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func (f *fixture) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	return mysqltest.Count(t, f.db, query, args...)
}

func TestTheJanitorDeletesOnlyRowsPastTheirAge(t *testing.T) {
	f := newFixture(t)
	day := 24 * time.Hour
	f.j.Policy = retention.Policy{AuditLog: 10 * day, FriendRequests: 5 * day, Sessions: 2 * day, RevokedKeys: 3 * day}
	f.j.Batch = 3
	batches := map[string][]int{}
	f.j.AfterBatch = func(table string, n int) { batches[table] = append(batches[table], n) }
	f.exec(t, "DELETE FROM audit_log")
	for i := range 7 {
		f.exec(t, "INSERT INTO audit_log (occurred_at, actor_kind, actor_id, action, agent_id, detail) VALUES (?, 'admin', 'admin', 'test', 'alice', ?)",
			t0.Add(-11*day), fmt.Sprint("old ", i))
	}
	f.exec(t, "INSERT INTO audit_log (occurred_at, actor_kind, actor_id, action, agent_id, detail) VALUES (?, 'admin', 'admin', 'test', 'alice', 'young')", t0.Add(-9*day))
	for i := range 5 {
		f.exec(t, "INSERT INTO friend_requests (from_agent, to_agent, status, created_at, decided_at) VALUES ('alice', 'bob', 'rejected', ?, ?)", t0.Add(-20*day), t0.Add(-6*day-time.Duration(i)*time.Minute))
	}
	f.exec(t, "INSERT INTO friend_requests (from_agent, to_agent, status, created_at, decided_at) VALUES ('bob', 'alice', 'accepted', ?, ?)", t0.Add(-20*day), t0.Add(-4*day))
	f.exec(t, "INSERT INTO friend_requests (from_agent, to_agent, status, created_at, decided_at) VALUES ('bob', 'alice', 'pending', ?, NULL)", t0.Add(-400*day))
	for i := range 4 {
		f.exec(t, "INSERT INTO account_sessions (token_hash, account_id, csrf_token, created_at, expires_at) VALUES (?, 'operator', 'x', ?, ?)",
			[]byte(fmt.Sprintf("%032d", i)), t0.Add(-10*day), t0.Add(-3*day))
	}
	f.exec(t, "INSERT INTO account_sessions (token_hash, account_id, csrf_token, created_at, expires_at) VALUES (?, 'operator', 'x', ?, ?)",
		[]byte(fmt.Sprintf("%032d", 99)), t0.Add(-10*day), t0.Add(-1*day))
	f.exec(t, "UPDATE api_keys SET revoked_at = ? WHERE agent_id = 'alice'", t0.Add(-4*day))
	f.exec(t, "UPDATE api_keys SET revoked_at = ? WHERE agent_id = 'bob'", t0.Add(-2*day))

	deleted, err := f.j.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("audit entries older than the retention are deleted, the younger one stays", func(t *testing.T) {
		if n := f.count(t, "SELECT COUNT(*) FROM audit_log WHERE detail LIKE 'old %'"); n != 0 {
			t.Errorf("%d old entries left", n)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM audit_log WHERE detail = 'young'"); n != 1 {
			t.Errorf("young entry deleted")
		}
	})
	t.Run("answered friend requests past the retention are deleted; a younger answer and a pending request stay", func(t *testing.T) {
		if n := f.count(t, "SELECT COUNT(*) FROM friend_requests WHERE status = 'rejected'"); n != 0 {
			t.Errorf("%d old answers left", n)
		}
		if n := f.count(t, "SELECT COUNT(*) FROM friend_requests WHERE status IN ('accepted', 'pending')"); n != 2 {
			t.Errorf("young answer or pending request deleted: %d left, want 2", n)
		}
	})
	t.Run("sessions expired longer than the retention are deleted; a recently expired one stays", func(t *testing.T) {
		if n := f.count(t, "SELECT COUNT(*) FROM account_sessions"); n != 1 {
			t.Errorf("%d sessions left, want 1", n)
		}
	})
	t.Run("keys revoked longer than the retention are deleted; a recently revoked one stays", func(t *testing.T) {
		if n := f.count(t, "SELECT COUNT(*) FROM api_keys WHERE agent_id = 'alice'"); n != 0 {
			t.Errorf("alice's old revoked key left")
		}
		if n := f.count(t, "SELECT COUNT(*) FROM api_keys WHERE agent_id = 'bob'"); n != 1 {
			t.Errorf("bob's recently revoked key deleted")
		}
	})
	t.Run("every batch deletes at most Batch rows, and the report adds them up", func(t *testing.T) {
		want := map[string]int{"audit_log": 7, "friend_requests": 5, "account_sessions": 4, "api_keys": 1}
		for table, n := range want {
			sum := 0
			for _, b := range batches[table] {
				if b > 3 {
					t.Errorf("%s: a batch of %d rows, Batch is 3", table, b)
				}
				sum += b
			}
			if sum != n || deleted[table] != n {
				t.Errorf("%s: batches %v (sum %d), reported %d, want %d", table, batches[table], sum, deleted[table], n)
			}
		}
	})
}

func TestAnswersAreKeptAsLongAsTheCoolDownTheyEnforce(t *testing.T) {
	f := newFixture(t)
	f.j.Policy = retention.Policy{FriendRequests: time.Hour}
	f.exec(t, "INSERT INTO friend_requests (from_agent, to_agent, status, created_at, decided_at) VALUES ('alice', 'bob', 'rejected', ?, ?)", t0.Add(-3*time.Hour), t0.Add(-2*time.Hour))
	if _, err := f.j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.count(t, "SELECT COUNT(*) FROM friend_requests"); n != 1 {
		t.Fatal("a rejection younger than the 24 h cool-down was deleted")
	}
}

func TestTheJanitorReadsThroughIndexesAndDeletesByPrimaryKey(t *testing.T) {
	f := newFixture(t)
	// Enough rows that the optimizer does not prefer a scan of a tiny table.
	for i := range 300 {
		f.exec(t, "INSERT INTO tasks (task_id, context_id, initiator, recipient, status, created_at, updated_at) VALUES (?, ?, 'alice', 'bob', 'completed', ?, ?)",
			fmt.Sprint("t", i), fmt.Sprint("c", i), t0, t0.Add(time.Duration(i)*time.Second))
		f.exec(t, "INSERT INTO task_contexts (context_id, party_a, party_b, created_at) VALUES (?, 'alice', 'bob', ?)", fmt.Sprint("c", i), t0.Add(time.Duration(i)*time.Second))
		f.exec(t, "INSERT INTO friend_requests (from_agent, to_agent, status, created_at, decided_at) VALUES ('alice', 'bob', 'rejected', ?, ?)", t0, t0.Add(time.Duration(i)*time.Second))
	}
	for i := range 300 {
		f.exec(t, "INSERT INTO task_messages (task_id, message_id, sender, parts, created_at) VALUES (?, ?, 'alice', '[]', ?)", fmt.Sprint("t", i%10), fmt.Sprint("m", i), t0)
		f.exec(t, "INSERT INTO task_artifacts (task_id, artifact_id, name, parts, created_by, created_at) VALUES (?, ?, 'a', '[]', 'bob', ?)", fmt.Sprint("t", i%10), fmt.Sprint("a", i), t0)
		f.exec(t, "INSERT INTO audit_log (occurred_at, actor_kind, actor_id, action, agent_id, detail) VALUES (?, 'admin', 'admin', 'test', 'alice', '')", t0)
		f.exec(t, "INSERT INTO account_sessions (token_hash, account_id, csrf_token, created_at, expires_at) VALUES (?, 'operator', 'x', ?, ?)",
			[]byte(fmt.Sprintf("%032d", i)), t0, t0.Add(time.Duration(i)*time.Second))
		f.exec(t, "INSERT INTO api_keys (key_id, agent_id, secret_hash, created_at, revoked_at) VALUES (?, 'alice', ?, ?, ?)",
			fmt.Sprint("k", i), []byte(fmt.Sprintf("%032d", i)), t0, t0.Add(time.Duration(i)*time.Second))
	}
	f.exec(t, "ANALYZE TABLE task_messages, task_artifacts, audit_log,  tasks, task_contexts, friend_requests, account_sessions, api_keys")
	wantKey := map[string]string{"oldTasks": "tasks_idle", "oldContexts": "task_contexts_age", "friendRequests": "friend_requests_decided",
		"sessions": "account_sessions_expiry", "revokedKeys": "api_keys_revoked"}
	for name, q := range retention.Selects {
		t.Run("the "+name+" walk reads its index range", func(t *testing.T) {
			args := []any{t0.Add(time.Minute), 10}
			if name == "oldTasks" {
				args = append([]any{"completed"}, args...)
			}
			plan := mysqltest.Explain(t, f.db, q, args...)
			if len(plan) != 1 || plan[0].Key != wantKey[name] || plan[0].Type == "ALL" || plan[0].Type == "index" || strings.Contains(plan[0].Extra, "filesort") {
				t.Fatalf("plan %+v, want a range on %s in index order", plan, wantKey[name])
			}
		})
	}
	for name, q := range retention.ByPrimaryKey {
		t.Run("the "+name+" statement goes by primary key", func(t *testing.T) {
			q = retention.Expand(q, 3)
			n := strings.Count(q, "?")
			args := []any{"t1", "t2", "t3"}[:n]
			if strings.Contains(name, "audit") || strings.Contains(name, "friend") || name == "messages" || name == "artifacts" {
				args = []any{1, 2, 3}[:n]
			}
			plan := mysqltest.Explain(t, f.db, q, args...)
			if len(plan) != 1 || plan[0].Key != "PRIMARY" {
				t.Fatalf("plan %+v, want the primary key only", plan)
			}
		})
	}
}
