package accountshttp

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// accountRoute is one account route, aimed at the owner's agent.
type accountRoute struct {
	fn, method string
	path       map[string]string
	body       any
	// list routes answer 200 to anyone signed in: another account must
	// just not see the owner's agent in them.
	list bool
}

func TestEveryAccountRouteKeepsToItsOwnAccount(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	owner := f.account("owner@example.org", true)
	other := f.account("other@example.org", true)
	// The owner's agent, a stranger asking to befriend it, and a key.
	created, err := f.s.CreateAgent(ctx, owner.Account, "owned-agent-7", "", "normal")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.s.Identity.CreateAgent(ctx, "stranger-agent", ""); err != nil {
		t.Fatal(err)
	}
	fr, _, err := f.s.Identity.SendFriendRequest(ctx, "stranger-agent", "owned-agent-7")
	if err != nil {
		t.Fatal(err)
	}
	// A real task of the owner's agent (with a peer of the operator
	// account), so a 404 to the other account means "not yours", and is
	// checked against the answer for a task that does not exist.
	if _, _, err := f.s.Identity.CreateAgent(ctx, "peer-agent", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.s.Identity.AdminCreateFriendship(ctx, "owned-agent-7", "peer-agent"); err != nil {
		t.Fatal(err)
	}
	sent, err := f.s.Tasks.Send(ctx, "peer-agent", tasks.SendRequest{To: "owned-agent-7", Parts: []mesh.Part{{Kind: "text", Text: "a real task"}}})
	if err != nil {
		t.Fatal(err)
	}
	taskID := sent.TaskID
	agent := map[string]string{"id": "owned-agent-7"}
	// absent is each route's path with its ids replaced by missing ones.
	absent := map[string]map[string]string{
		"AccountRotateKeyFunction":           {"id": "no-such-agent"},
		"AccountRevokeKeyFunction":           {"id": "no-such-agent", "key_id": created.KeyID},
		"AccountDrainAgentFunction":          {"id": "no-such-agent"},
		"AccountSetPolicyFunction":           {"id": "no-such-agent"},
		"AccountPutA2aCardFunction":          {"id": "no-such-agent"},
		"AccountGetA2aCardFunction":          {"id": "no-such-agent"},
		"AccountListTasksFunction":           {"id": "no-such-agent"},
		"AccountGetTimelineFunction":         {"id": "owned-agent-7", "task_id": "no-such-task"},
		"AccountDecideFriendRequestFunction": {"id": "999999999"},
		"AccountDeleteAgentFunction":         {"id": "no-such-agent"},
	}
	routes := []accountRoute{
		{fn: "AccountListAgentsFunction", method: http.MethodGet, list: true},
		{fn: "AccountListFriendRequestsFunction", method: http.MethodGet, list: true},
		{fn: "AccountListAuditFunction", method: http.MethodGet, list: true},
		{fn: "AccountCreateAgentFunction", method: http.MethodPost, body: map[string]string{"agent_id": "owned-agent-8", "kind": "virtual-user"}},
		{fn: "AccountRotateKeyFunction", method: http.MethodPost, path: agent},
		{fn: "AccountRevokeKeyFunction", method: http.MethodDelete, path: map[string]string{"id": "owned-agent-7", "key_id": created.KeyID}},
		{fn: "AccountDrainAgentFunction", method: http.MethodPost, path: agent},
		{fn: "AccountSetPolicyFunction", method: http.MethodPut, path: agent, body: map[string]any{"friend_policy": "account"}},
		{fn: "AccountPutA2aCardFunction", method: http.MethodPut, path: agent, body: map[string]any{"published": true, "description": "not yours"}},
		{fn: "AccountGetA2aCardFunction", method: http.MethodGet, path: agent},
		{fn: "AccountListTasksFunction", method: http.MethodGet, path: agent},
		{fn: "AccountGetTimelineFunction", method: http.MethodGet, path: map[string]string{"id": "owned-agent-7", "task_id": taskID}},
		{fn: "AccountDecideFriendRequestFunction", method: http.MethodPost, path: map[string]string{"id": fr.RequestID}, body: map[string]string{"decision": "accept"}},
		{fn: "AccountOutboxHealthFunction", method: http.MethodGet, list: true},
		{fn: "AccountRedriveFunction", method: http.MethodPost, body: map[string]string{"recipient": "owned-agent-7"}, list: true},
		{fn: "AccountSignOutFunction", method: http.MethodDelete, list: true},
		{fn: "AccountDeleteFunction", method: http.MethodDelete, list: true},
		// Last: the owner's run deletes the agent the routes above use.
		{fn: "AccountDeleteAgentFunction", method: http.MethodDelete, path: agent},
	}
	t.Run("the matrix names every account route", func(t *testing.T) {
		named := map[string]bool{}
		for _, r := range routes {
			named[r.fn] = true
		}
		for fn := range f.eps {
			if strings.HasPrefix(fn, "Account") && fn != "AccountSignInFunction" && !named[fn] {
				t.Errorf("%s is missing from the matrix", fn)
			}
		}
	})
	for _, rt := range routes {
		write := rt.method != http.MethodGet
		t.Run(rt.fn+" refuses a signed-out caller", func(t *testing.T) {
			r := f.call(req{fn: rt.fn, method: rt.method, path: rt.path, body: rt.body, csrf: owner.csrf})
			if r.status != http.StatusUnauthorized || r.code() != "not_signed_in" {
				t.Fatalf("%d %s", r.status, r.body)
			}
			r = f.call(req{fn: rt.fn, method: rt.method, path: rt.path, body: rt.body, cookie: "forged-token", csrf: owner.csrf})
			if r.status != http.StatusUnauthorized {
				t.Fatalf("forged cookie: %d %s", r.status, r.body)
			}
		})
		if write {
			t.Run(rt.fn+" refuses a write without the session's CSRF token", func(t *testing.T) {
				for _, csrf := range []string{"", other.csrf} {
					r := f.call(req{fn: rt.fn, method: rt.method, path: rt.path, body: rt.body, cookie: owner.token, csrf: csrf})
					if r.status != http.StatusForbidden || r.code() != "csrf_token_invalid" {
						t.Fatalf("csrf %q: %d %s", csrf, r.status, r.body)
					}
				}
			})
		}
		if rt.fn == "AccountSignOutFunction" || rt.fn == "AccountCreateAgentFunction" || rt.fn == "AccountDeleteFunction" {
			continue // acts on the caller's own session or account only
		}
		t.Run(rt.fn+" shows another account nothing of the owner's agent", func(t *testing.T) {
			r := f.call(req{fn: rt.fn, method: rt.method, path: rt.path, body: rt.body, cookie: other.token, csrf: other.csrf})
			switch {
			case rt.list:
				if r.status/100 != 2 && r.status != http.StatusForbidden {
					t.Fatalf("%d %s", r.status, r.body)
				}
				if rt.fn != "AccountOutboxHealthFunction" && strings.Contains(r.body, "owned-agent-7") {
					t.Fatalf("the other account sees the owner's agent: %s", r.body)
				}
			case r.status != http.StatusNotFound && r.status != http.StatusForbidden:
				t.Fatalf("%d %s", r.status, r.body)
			case absent[rt.fn] != nil:
				m := f.call(req{fn: rt.fn, method: rt.method, path: absent[rt.fn], body: rt.body, cookie: other.token, csrf: other.csrf})
				if m.status != r.status || m.body != r.body {
					t.Fatalf("the owner's real %v answers %d %s, a missing one %d %s: they must not differ", rt.path, r.status, r.body, m.status, m.body)
				}
			}
		})
	}
	t.Run("nothing the other account tried changed the owner's agent", func(t *testing.T) {
		p, err := identity.PolicyOf(ctx, f.s.DB, "owned-agent-7")
		if err != nil || p.FriendPolicy != identity.PolicyAgent || p.AccountID != owner.AccountID {
			t.Fatalf("%+v %v", p, err)
		}
		var live int
		if err := f.s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM api_keys WHERE agent_id = 'owned-agent-7' AND revoked_at IS NULL").Scan(&live); err != nil || live != 1 {
			t.Fatalf("live keys %d %v", live, err)
		}
		var status string
		if err := f.s.DB.QueryRowContext(ctx, "SELECT status FROM friend_requests WHERE request_id = ?", fr.RequestID).Scan(&status); err != nil || status != "pending" {
			t.Fatalf("request %s %v", status, err)
		}
		var cards int
		if err := f.s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM a2a_cards WHERE agent_id = 'owned-agent-7'").Scan(&cards); err != nil || cards != 0 {
			t.Fatalf("a2a card rows %d %v", cards, err)
		}
	})
	t.Run("the owner itself may do each of it", func(t *testing.T) {
		for _, rt := range routes {
			if rt.fn == "AccountSignOutFunction" || rt.fn == "AccountDeleteFunction" {
				continue // signing out and deleting the account are tested on their own
			}
			r := f.call(req{fn: rt.fn, method: rt.method, path: rt.path, body: rt.body, cookie: owner.token, csrf: owner.csrf})
			if r.status/100 != 2 {
				t.Errorf("%s: %d %s", rt.fn, r.status, r.body)
			}
		}
	})
}
