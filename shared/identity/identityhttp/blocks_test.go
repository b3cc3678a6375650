package identityhttp

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
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

// An agent id cannot be probed through friend requests: unknown ids, ids
// that blocked the sender and real ids all answer 201 with the same shape,
// and only the real one is stored.
func TestFriendRequestsRevealNothing(t *testing.T) {
	s, clock, _ := identitytest.NewService(t)
	_, ann := identitytest.NewAgent(t, s, "ann")
	_, _ = identitytest.NewAgent(t, s, "bob")
	_, _ = identitytest.NewAgent(t, s, "cat")
	if err := s.BlockAgent(context.Background(), "cat", "ann"); err != nil {
		t.Fatal(err)
	}
	route := templateRoutes(t)["SendFriendRequestFunction"]
	send := func(to string) (int, map[string]string, identity.FriendRequest) {
		clock.Advance(time.Second)
		resp := invoke(t, s, "SendFriendRequestFunction", apiEvent(route, nil, nil, bearer(ann), `{"to":"`+to+`"}`))
		var r identity.FriendRequest
		_ = json.Unmarshal([]byte(resp.Body), &r)
		return resp.StatusCode, jsonShape(t, resp.Body), r
	}
	st, known, real := send("bob")
	if st != 201 || real.Status != identity.RequestPending {
		t.Fatalf("a request to a known agent: %d %+v", st, real)
	}
	prev, _ := strconv.Atoi(real.RequestID)
	for _, to := range []string{"nobody", "cat"} {
		t.Run("a request to "+map[string]string{"nobody": "an unknown id", "cat": "an agent that blocked the sender"}[to]+" answers like a new one", func(t *testing.T) {
			st, shape, r := send(to)
			if st != 201 || !maps.Equal(shape, known) || r.Status != identity.RequestPending || r.To != to {
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
		if n := mysqltest.Count(t, s.DB, "SELECT COUNT(*) FROM friend_requests WHERE to_agent IN ('nobody', 'cat')"); n != 0 {
			t.Fatalf("%d rows stored", n)
		}
		if n := mysqltest.Count(t, s.DB, "SELECT COUNT(*) FROM friend_requests WHERE to_agent = 'bob'"); n != 1 {
			t.Fatalf("%d rows for the real request, want 1", n)
		}
	})
}
