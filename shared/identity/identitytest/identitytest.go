// Package identitytest builds test agents through the real
// identity.CreateAgent, so a fixture holds every row an agent has (agents,
// api_keys, inbox_counters, rate_limits, agent_accounts, its audit entry)
// and cannot drift from the code when CreateAgent writes one more. Tests of
// any package above identity import it; identity's own tests call
// CreateAgent directly.
package identitytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

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
