package accountshttp

import (
	"context"
	"net/http"
	"testing"

	"github.com/agentmesh/agentmesh/shared/identity"
)

func TestAnAccountApprovalPolicyLeavesTheDecisionToTheAccount(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ada := f.account("ada@example.org", false)
	for _, id := range []string{"ada-bot", "ada-helper"} {
		if _, err := f.s.CreateAgent(ctx, ada.Account, id, "", identity.KindNormal); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := f.s.Identity.CreateAgent(ctx, "outsider", ""); err != nil {
		t.Fatal(err)
	}
	r := f.call(req{fn: "AccountSetPolicyFunction", method: http.MethodPut, path: map[string]string{"id": "ada-bot"}, cookie: ada.token, csrf: ada.csrf,
		body: map[string]any{"friend_policy": "account", "same_account_auto": true}})
	if r.status != http.StatusOK {
		t.Fatalf("set policy: %d %s", r.status, r.body)
	}
	fr, _, err := f.s.Identity.SendFriendRequest(ctx, "outsider", "ada-bot")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the agent cannot accept a request its account must approve", func(t *testing.T) {
		_, err := f.s.Identity.AcceptFriendRequest(ctx, "ada-bot", fr.RequestID)
		if err == nil || err.Error() == "" || !isCode(err, "account_approval_required") {
			t.Fatalf("accept by the agent: %v", err)
		}
	})
	t.Run("the account lists and approves it, and the audit log says the account did", func(t *testing.T) {
		r := f.call(req{fn: "AccountListFriendRequestsFunction", method: http.MethodGet, cookie: ada.token})
		if r.status != http.StatusOK || !contains(r.body, `"request_id":"`+fr.RequestID+`"`) {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		r = f.call(req{fn: "AccountDecideFriendRequestFunction", method: http.MethodPost, path: map[string]string{"id": fr.RequestID}, cookie: ada.token, csrf: ada.csrf,
			body: map[string]string{"decision": "accept"}})
		if r.status != http.StatusOK || !contains(r.body, `"status":"accepted"`) {
			t.Fatalf("approve: %d %s", r.status, r.body)
		}
		if n := auditRows(t, f, identity.AuditFriendshipCreated, "ada-bot", identity.ActorAccount); n != 1 {
			t.Errorf("friendship.created by the account: %d rows", n)
		}
		if n := auditRows(t, f, identity.AuditPolicyChanged, "ada-bot", identity.ActorAccount); n != 1 {
			t.Errorf("policy.changed by the account: %d rows", n)
		}
	})
	t.Run("a request between agents of one account is accepted at once when the policy says so", func(t *testing.T) {
		req, _, err := f.s.Identity.SendFriendRequest(ctx, "ada-helper", "ada-bot")
		if err != nil || req.Status != identity.RequestAccepted {
			t.Fatalf("%+v %v", req, err)
		}
	})
	t.Run("an agent with the default policy still accepts its own requests", func(t *testing.T) {
		fr, _, err := f.s.Identity.SendFriendRequest(ctx, "outsider", "ada-helper")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.s.Identity.AcceptFriendRequest(ctx, "ada-helper", fr.RequestID); err != nil {
			t.Fatal(err)
		}
		if n := auditRows(t, f, identity.AuditFriendshipCreated, "ada-helper", identity.ActorAgent); n < 1 {
			t.Errorf("friendship.created by the agent: %d rows", n)
		}
	})
}
