package meshmcp_test

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshmcp"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// TestSocialTools calls every tool of the social graph, groups, artifacts
// and profile through the go-sdk MCP client against the real API: alice
// and bob are friends, eve a stranger who asks bob to be friends.
func TestSocialTools(t *testing.T) {
	st := newStack(t)
	logs := &testenv.Buffer{}
	var transcript bytes.Buffer
	var mu sync.Mutex
	alice := st.connect(t, "alice", t.TempDir(), logs, &transcript, &mu)
	bob := st.connect(t, "bob", t.TempDir(), logs, &transcript, &mu)
	eve := st.connect(t, "eve", t.TempDir(), logs, &transcript, &mu)

	t.Run("whoami names the agent", func(t *testing.T) {
		if me := call[meshmcp.WhoamiOutput](t, bob, meshmcp.ToolWhoami, map[string]any{}); me.AgentID != "bob" || me.Name == "" {
			t.Errorf("whoami %+v", me)
		}
	})
	t.Run("a friend request is listed to its recipient and accepted", func(t *testing.T) {
		fr := call[meshclient.FriendRequest](t, eve, meshmcp.ToolSendFriendRequest, map[string]any{"to": "bob"})
		if fr.Status != "pending" || fr.RequestID == "" {
			t.Fatalf("request %+v", fr)
		}
		frs := call[meshclient.FriendRequests](t, bob, meshmcp.ToolListFriendRequests, map[string]any{})
		if len(frs.Incoming) != 1 || frs.Incoming[0].From != "eve" || frs.Incoming[0].RequestID != fr.RequestID {
			t.Fatalf("bob's requests %+v", frs)
		}
		if got := call[meshclient.FriendRequest](t, bob, meshmcp.ToolAcceptFriendRequest, map[string]any{"request_id": fr.RequestID}); got.Status != "accepted" {
			t.Fatalf("accept %+v", got)
		}
		friends := call[meshclient.FriendPage](t, eve, meshmcp.ToolListFriends, map[string]any{})
		if len(friends.Friends) != 1 || friends.Friends[0].AgentID != "bob" {
			t.Errorf("eve's friends %+v", friends)
		}
	})
	t.Run("a friend request can be rejected", func(t *testing.T) {
		fr := call[meshclient.FriendRequest](t, alice, meshmcp.ToolSendFriendRequest, map[string]any{"to": "eve"})
		if got := call[meshclient.FriendRequest](t, eve, meshmcp.ToolRejectFriendRequest, map[string]any{"request_id": fr.RequestID}); got.Status != "rejected" {
			t.Fatalf("reject %+v", got)
		}
	})
	var group meshclient.Group
	t.Run("a group is created, friends are added and its roster lists them", func(t *testing.T) {
		group = call[meshclient.Group](t, bob, meshmcp.ToolCreateGroup, map[string]any{"name": "crew"})
		if group.GroupID == "" || group.Role != "owner" {
			t.Fatalf("group %+v", group)
		}
		for _, a := range []string{"alice", "eve"} {
			if m := call[meshclient.Membership](t, bob, meshmcp.ToolAddGroupMember, map[string]any{"group_id": group.GroupID, "agent_id": a}); m.AgentID != a || m.Role != "member" {
				t.Fatalf("add %s: %+v", a, m)
			}
		}
		r := call[meshclient.Roster](t, alice, meshmcp.ToolRoster, map[string]any{"group_id": group.GroupID})
		var ids []string
		for _, m := range r.Members {
			ids = append(ids, m.AgentID+":"+m.Role)
		}
		if !slices.Equal(ids, []string{"alice:member", "bob:owner", "eve:member"}) {
			t.Errorf("roster %v", ids)
		}
	})
	t.Run("a group message reaches every other member, and an artifact comes back", func(t *testing.T) {
		res := call[meshclient.GroupSendResult](t, bob, meshmcp.ToolSendGroup, map[string]any{"group_id": group.GroupID, "text": "standup"})
		if len(res.Tasks) != 2 {
			t.Fatalf("group send %+v", res)
		}
		in := call[meshmcp.InboxOutput](t, alice, meshmcp.ToolCheckInbox, map[string]any{})
		if len(in.Events) != 1 || in.Events[0].Text != "standup" || in.Events[0].GroupID != group.GroupID {
			t.Fatalf("alice's inbox %+v", in)
		}
		art := call[meshclient.ArtifactResult](t, alice, meshmcp.ToolAddArtifact, map[string]any{"task_id": in.Events[0].TaskID, "name": "notes.md", "text": "all green"})
		if art.ArtifactID == "" {
			t.Fatalf("artifact %+v", art)
		}
		back := call[meshmcp.InboxOutput](t, bob, meshmcp.ToolCheckInbox, map[string]any{})
		if n := len(back.Events); n == 0 || back.Events[n-1].Type != "artifact" || back.Events[n-1].Text != "all green" {
			t.Errorf("bob's inbox %+v", back)
		}
	})
	t.Run("a missing id is a tool error the model can read", func(t *testing.T) {
		if msg := bob.fail(t, meshmcp.ToolAcceptFriendRequest, map[string]any{"request_id": ""}); !strings.Contains(msg, "request_id") {
			t.Errorf("error %q", msg)
		}
	})
}
