package tasks_test

import (
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

// Reads spend the caller's rate budget like writes: without it, one agent
// could hammer the database through the read routes.
func TestReadRoutesSpendTheCallersRateBudget(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob")
	f.friends(t, "ann", "bob")
	task := f.send(t, "ann", tasks.SendRequest{To: "bob", Parts: text("hi")}).TaskID
	for _, r := range []req{
		{fn: "GetTaskFunction", method: "GET", path: "/v1/tasks/" + task, params: map[string]string{"id": task}},
		{fn: "ListTasksFunction", method: "GET", path: "/v1/tasks"},
		{fn: "ListTaskMessagesFunction", method: "GET", path: "/v1/tasks/" + task + "/messages", params: map[string]string{"id": task}},
		{fn: "InboxFunction", method: "GET", path: "/v1/inbox"},
	} {
		t.Run(r.fn+" answers 429 with Retry-After once the burst is spent", func(t *testing.T) {
			f.advance(10 * time.Second) // a full budget for this route
			f.freeze(true)              // and no refill while it is spent
			defer f.freeze(false)
			r.caller = "bob"
			for i := 1; i <= identity.RateBurst+1; i++ {
				got := f.call(t, r)
				if got.Status == 429 {
					if got.code() != "rate_limited" || got.Headers["Retry-After"] == "" {
						t.Fatalf("call %d: %d %s %v", i, got.Status, got.Body, got.Headers)
					}
					if i <= identity.RateBurst {
						t.Fatalf("limited after %d calls, before the burst of %d was spent", i, identity.RateBurst)
					}
					return
				}
				if got.Status != 200 {
					t.Fatalf("call %d: %d %s", i, got.Status, got.Body)
				}
			}
			t.Fatalf("%d calls with no time passing were all served: the route spends no rate budget", identity.RateBurst+1)
		})
	}
}
