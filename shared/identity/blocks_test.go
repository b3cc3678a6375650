package identity_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

func TestBlocks(t *testing.T) {
	s, clock, _ := identitytest.NewService(t)
	ctx := context.Background()
	for _, id := range []string{"ann", "bob", "cat"} {
		identitytest.NewAgent(t, s, id)
	}
	if _, _, err := s.AdminCreateFriendship(ctx, "ann", "bob"); err != nil {
		t.Fatal(err)
	}
	reach := func(from, to string) bool {
		t.Helper()
		ok, err := identity.CanCommunicate(ctx, s.DB, from, to)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !reach("ann", "bob") {
		t.Fatal("friends cannot communicate")
	}
	if _, _, err := s.SendFriendRequest(ctx, "cat", "bob"); err != nil {
		t.Fatal(err)
	}
	if err := s.BlockAgent(ctx, "bob", "ann"); err != nil {
		t.Fatal(err)
	}
	if err := s.BlockAgent(ctx, "bob", "cat"); err != nil {
		t.Fatal(err)
	}
	t.Run("a block stops messages both ways and ends the friendship", func(t *testing.T) {
		if reach("ann", "bob") || reach("bob", "ann") {
			t.Fatal("blocked pair can still communicate")
		}
		if n := mysqltest.Count(t, s.DB, "SELECT COUNT(*) FROM friendships WHERE agent_id IN ('ann', 'bob')"); n != 0 {
			t.Fatalf("%d friendship rows left", n)
		}
	})
	t.Run("a block stops messages between group mates too", func(t *testing.T) {
		if _, err := s.DB.Exec(`INSERT INTO group_members (group_id, agent_id, role, joined_at) VALUES
('g', 'ann', 'owner', ?), ('g', 'bob', 'member', ?), ('g', 'cat', 'member', ?)`, clock.Now(), clock.Now(), clock.Now()); err != nil {
			t.Fatal(err)
		}
		if reach("ann", "bob") || reach("bob", "ann") || !reach("ann", "cat") {
			t.Fatal("the block does not hold between group mates, or holds for others")
		}
	})
	t.Run("the blocked agent's pending request is settled as rejected", func(t *testing.T) {
		if n := mysqltest.Count(t, s.DB, "SELECT COUNT(*) FROM friend_requests WHERE from_agent = 'cat' AND to_agent = 'bob' AND status = 'rejected'"); n != 1 {
			t.Fatalf("%d rejected requests from cat", n)
		}
	})
	t.Run("the blocker cannot send a request to the agent it blocked", func(t *testing.T) {
		_, _, err := s.SendFriendRequest(ctx, "bob", "ann")
		if me := mesh.AsError(err); me.Kind != mesh.KindConflict || me.Code != "agent_blocked" {
			t.Fatalf("got %v, want 409 agent_blocked", err)
		}
	})
	t.Run("blocking twice and blocking an unknown id answer the same and store nothing new", func(t *testing.T) {
		if err := s.BlockAgent(ctx, "bob", "ann"); err != nil {
			t.Fatal(err)
		}
		if err := s.BlockAgent(ctx, "bob", "nobody"); err != nil {
			t.Fatal(err)
		}
		page, err := s.ListBlocks(ctx, "bob", identity.Page{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{}
		for _, b := range page.Blocks {
			ids = append(ids, b.AgentID)
		}
		if !slices.Equal(ids, []string{"ann", "cat"}) {
			t.Fatalf("bob's blocks %v", ids)
		}
	})
	t.Run("an agent cannot block itself", func(t *testing.T) {
		if err := s.BlockAgent(ctx, "bob", "bob"); mesh.AsError(err).Code != "self_block" {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("after an unblock a new request is possible, outside the cool-down", func(t *testing.T) {
		if err := s.UnblockAgent(ctx, "bob", "ann"); err != nil {
			t.Fatal(err)
		}
		if _, created, err := s.SendFriendRequest(ctx, "ann", "bob"); err != nil || !created {
			t.Fatalf("request after unblock: %v (created %v)", err, created)
		}
	})
}

func TestRejectedRequestsCoolDown(t *testing.T) {
	s, clock, _ := identitytest.NewService(t)
	ctx := context.Background()
	identitytest.NewAgent(t, s, "ann")
	identitytest.NewAgent(t, s, "bob")
	req, _, err := s.SendFriendRequest(ctx, "ann", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RejectFriendRequest(ctx, "bob", req.RequestID); err != nil {
		t.Fatal(err)
	}
	t.Run("asking again right after a rejection is a 429 with the time left", func(t *testing.T) {
		clock.Advance(time.Hour)
		_, _, err := s.SendFriendRequest(ctx, "ann", "bob")
		me := mesh.AsError(err)
		if me.Kind != mesh.KindRateLimited || me.Code != "request_cool_down" || me.RetryAfter != int((23*time.Hour).Seconds()) {
			t.Fatalf("got %v (retry after %d s), want 429 request_cool_down after 23 h", err, me.RetryAfter)
		}
	})
	t.Run("the other side may still ask", func(t *testing.T) {
		if _, _, err := s.SendFriendRequest(ctx, "bob", "ann"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("after the cool-down the same pair may ask again", func(t *testing.T) {
		clock.Advance(23 * time.Hour)
		if _, _, err := s.SendFriendRequest(ctx, "ann", "bob"); err != nil {
			t.Fatal(err)
		}
	})
}
