package accounts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/identity"
)

func TestEveryChangeToTheGraphKeysAndPoliciesIsAudited(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ada := f.account("ada@example.org", false)
	id := f.s.Identity
	created, err := f.s.CreateAgent(ctx, ada.Account, "ada-bot", "", identity.KindVirtualUser)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := id.CreateAgent(ctx, "peer", ""); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		what, action, actor string
		do                  func() error
	}{
		{"creating an agent", identity.AuditAgentCreated, identity.ActorAccount, func() error { return nil }},
		{"rotating a key", identity.AuditKeyRotated, identity.ActorAccount, func() error {
			_, err := f.s.RotateKey(ctx, ada.Account, "ada-bot", identity.RotateOptions{})
			return err
		}},
		{"revoking a key", identity.AuditKeyRevoked, identity.ActorAccount, func() error {
			_, err := f.s.RevokeKey(ctx, ada.Account, "ada-bot", created.KeyID)
			return err
		}},
		{"sending a friend request", identity.AuditRequestSent, identity.ActorAgent, func() error {
			_, _, err := id.SendFriendRequest(ctx, "peer", "ada-bot")
			return err
		}},
		{"befriending", identity.AuditFriendshipCreated, identity.ActorAdmin, func() error {
			_, _, err := id.AdminCreateFriendship(ctx, "peer", "ada-bot")
			return err
		}},
		{"creating a group", identity.AuditGroupCreated, identity.ActorAgent, func() error {
			g, err := id.CreateGroup(ctx, "ada-bot", "Team")
			if err == nil {
				_, _, err = id.AddGroupMember(ctx, "ada-bot", g.GroupID, "peer", "")
			}
			if err == nil {
				err = id.RemoveGroupMember(ctx, "ada-bot", g.GroupID, "peer")
			}
			return err
		}},
		{"adding a group member", identity.AuditGroupMemberAdded, identity.ActorAgent, func() error { return nil }},
		{"removing a group member", identity.AuditGroupMemberRemoved, identity.ActorAgent, func() error { return nil }},
		{"unfriending", identity.AuditFriendshipRemoved, identity.ActorAgent, func() error { return id.RemoveFriend(ctx, "peer", "ada-bot") }},
		{"draining an agent", identity.AuditAgentDrained, identity.ActorAccount, func() error {
			if _, err := id.Heartbeat(ctx, "ada-bot", "host-1", nil); err != nil {
				return err
			}
			status, err := f.s.Drain(ctx, ada.Account, "ada-bot")
			if err == nil && status != "draining" {
				err = fmt.Errorf("status %q after the drain", status)
			}
			return err
		}},
		{"changing a policy", identity.AuditPolicyChanged, identity.ActorAccount, func() error {
			_, err := f.s.SetPolicy(ctx, ada.Account, "ada-bot", accounts.PolicyInput{FriendPolicy: identity.PolicyAccount})
			return err
		}},
	}
	for _, st := range steps {
		t.Run(st.what+" writes "+st.action+" by the "+st.actor+", readable by the account", func(t *testing.T) {
			if err := st.do(); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(time.Second)
			if n := auditRows(t, f, st.action, "ada-bot", st.actor); n != 1 {
				t.Fatalf("%d rows", n)
			}
			entries, _, err := f.s.ListAudit(ctx, ada.Account, 0, accounts.MaxAuditPage)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range entries {
				found = found || e.Action == st.action
			}
			if !found {
				t.Fatalf("not in the account's audit log: %+v", entries)
			}
		})
	}
}
