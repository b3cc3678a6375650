package identity

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

// jsonShape is the set of keys of a JSON object and the JSON kind of each.
func jsonShape(t *testing.T, body string) map[string]string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	shape := map[string]string{}
	for k, v := range m {
		switch v.(type) {
		case nil:
			shape[k] = "null"
		case string:
			shape[k] = "string"
		case float64:
			shape[k] = "number"
		case bool:
			shape[k] = "bool"
		default:
			shape[k] = "structure"
		}
	}
	return shape
}

func countRows(t *testing.T, s *Service, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.DB.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// An agent id cannot be probed through friend requests: unknown ids, ids
// that blocked the sender and real ids all answer 201 with the same shape,
// and only the real one is stored.
func TestFriendRequestsRevealNothing(t *testing.T) {
	s, clock, _ := newTestService(t)
	_, ann := newAgent(t, s, "ann")
	_, _ = newAgent(t, s, "bob")
	_, _ = newAgent(t, s, "cat")
	if err := s.BlockAgent(context.Background(), "cat", "ann"); err != nil {
		t.Fatal(err)
	}
	route := templateRoutes(t)["SendFriendRequestFunction"]
	send := func(to string) (int, map[string]string, FriendRequest) {
		clock.Advance(time.Second)
		resp := invoke(t, s, "SendFriendRequestFunction", apiEvent(route, nil, nil, bearer(ann), `{"to":"`+to+`"}`))
		var r FriendRequest
		_ = json.Unmarshal([]byte(resp.Body), &r)
		return resp.StatusCode, jsonShape(t, resp.Body), r
	}
	st, known, real := send("bob")
	if st != 201 || real.Status != RequestPending {
		t.Fatalf("a request to a known agent: %d %+v", st, real)
	}
	prev, _ := strconv.Atoi(real.RequestID)
	for _, to := range []string{"nobody", "cat"} {
		t.Run("a request to "+map[string]string{"nobody": "an unknown id", "cat": "an agent that blocked the sender"}[to]+" answers like a new one", func(t *testing.T) {
			st, shape, r := send(to)
			if st != 201 || !maps.Equal(shape, known) || r.Status != RequestPending || r.To != to {
				t.Fatalf("got %d %v %+v, want 201 %v", st, shape, r, known)
			}
			// Ids come from the same sequence: the next value, not a marker.
			id, err := strconv.Atoi(r.RequestID)
			if err != nil || id <= prev {
				t.Fatalf("request id %q after %d", r.RequestID, prev)
			}
			prev = id
		})
	}
	t.Run("nothing is stored for an unknown id or a blocking agent", func(t *testing.T) {
		if n := countRows(t, s, "SELECT COUNT(*) FROM friend_requests WHERE to_agent IN ('nobody', 'cat')"); n != 0 {
			t.Fatalf("%d rows stored", n)
		}
		if n := countRows(t, s, "SELECT COUNT(*) FROM friend_requests WHERE to_agent = 'bob'"); n != 1 {
			t.Fatalf("%d rows for the real request, want 1", n)
		}
	})
}

func TestBlocks(t *testing.T) {
	s, clock, _ := newTestService(t)
	ctx := context.Background()
	for _, id := range []string{"ann", "bob", "cat"} {
		newAgent(t, s, id)
	}
	if _, _, err := s.AdminCreateFriendship(ctx, "ann", "bob"); err != nil {
		t.Fatal(err)
	}
	reach := func(from, to string) bool {
		t.Helper()
		ok, err := CanCommunicate(ctx, s.DB, from, to)
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
		if n := countRows(t, s, "SELECT COUNT(*) FROM friendships WHERE agent_id IN ('ann', 'bob')"); n != 0 {
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
		if n := countRows(t, s, "SELECT COUNT(*) FROM friend_requests WHERE from_agent = 'cat' AND to_agent = 'bob' AND status = 'rejected'"); n != 1 {
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
		list, _, err := s.ListBlocks(ctx, "bob", Page{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{}
		for _, b := range list {
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
	s, clock, _ := newTestService(t)
	ctx := context.Background()
	newAgent(t, s, "ann")
	newAgent(t, s, "bob")
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
