package identity_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// TestCrossingRequestsBecomeFriends sends A→B and B→A at the same moment,
// many times over: the agents-row locks serialise the pair, so every race
// ends in a friendship with nothing left pending, never two pending requests.
func TestCrossingRequestsBecomeFriends(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		a, b := fmt.Sprintf("left-%d", i), fmt.Sprintf("right-%d", i)
		identitytest.NewAgent(t, s, a)
		identitytest.NewAgent(t, s, b)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, pair := range [][2]string{{a, b}, {b, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, errs[j] = s.SendFriendRequest(ctx, pair[0], pair[1])
			}()
		}
		wg.Wait()
		for _, err := range errs {
			// The loser may find the friendship already made by the winner.
			if err != nil && mesh.AsError(err).Code != "already_friends" {
				t.Fatalf("round %d: %v", i, err)
			}
		}
		if ok, _ := identity.CanCommunicate(ctx, s.DB, a, b); !ok {
			t.Fatalf("round %d: crossing requests did not make friends", i)
		}
		var pending int
		if err := s.DB.QueryRow("SELECT COUNT(*) FROM friend_requests WHERE status = 'pending' AND from_agent IN (?, ?)", a, b).Scan(&pending); err != nil || pending != 0 {
			t.Fatalf("round %d: %d requests left pending (%v)", i, pending, err)
		}
	}
}
