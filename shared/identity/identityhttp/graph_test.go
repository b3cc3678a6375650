package identityhttp

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
)

// client calls routes of identity through the real middleware as named agents.
// Every helper of client takes the calling (sub)test's t, so a
// failure inside a subtest stops that subtest, not its parent from the
// wrong goroutine.
type client struct {
	s      *identity.Service
	routes map[string]string
	tokens map[string]string
}

func newAPI(t *testing.T, agents ...string) *client {
	s, _, _ := identitytest.NewService(t)
	a := &client{s: s, routes: templateRoutes(t), tokens: map[string]string{"admin": identitytest.AdminKey}}
	for _, id := range agents {
		_, a.tokens[id] = identitytest.NewAgent(t, s, id)
	}
	return a
}

// call invokes a route as who and decodes the answer into out (if not nil).
// It returns the status and, for errors, the problem code.
func (a *client) call(t testing.TB, who, name string, params, query map[string]string, body string, out any) (int, string) {
	t.Helper()
	resp := invoke(t, a.s, name, apiEvent(a.routes[name], params, query, bearer(a.tokens[who]), body))
	if resp.StatusCode >= 400 {
		return resp.StatusCode, problemCode(t, resp)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(resp.Body), out); err != nil {
			t.Fatalf("%s: %v in %s", name, err, resp.Body)
		}
	}
	return resp.StatusCode, ""
}

func (a *client) expect(t testing.TB, gotStatus int, gotCode string, wantStatus int, wantCode string) {
	t.Helper()
	if gotStatus != wantStatus || gotCode != wantCode {
		t.Fatalf("got %d %q, want %d %q", gotStatus, gotCode, wantStatus, wantCode)
	}
}

func friendIDs(list []identity.Friend) []string {
	ids := []string{}
	for _, f := range list {
		ids = append(ids, f.AgentID)
	}
	return ids
}

func sameIDs(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func TestFriends(t *testing.T) {
	a := newAPI(t, "ann", "bob", "cat", "dan", "Bob")
	ctx := context.Background()
	req := func(t testing.TB, who, to string) (int, string, identity.FriendRequest) {
		var r identity.FriendRequest
		st, code := a.call(t, who, "SendFriendRequestFunction", nil, nil, `{"to":"`+to+`"}`, &r)
		return st, code, r
	}

	t.Run("a request to oneself is a 422", func(t *testing.T) {
		st, code, _ := req(t, "ann", "ann")
		a.expect(t, st, code, 422, "self_request")
	})
	// A request to an unknown agent answers like any new request: see
	// TestFriendRequestsRevealNothing.
	t.Run("a request to an invalid id is a 422", func(t *testing.T) {
		st, code, _ := req(t, "ann", "not an id")
		a.expect(t, st, code, 422, "invalid_agent_id")
	})
	var first identity.FriendRequest
	t.Run("a request is created pending, and sending it again returns the same request", func(t *testing.T) {
		st, _, r := req(t, "ann", "bob")
		if st != 201 || r.Status != identity.RequestPending || r.RequestID == "" {
			t.Fatalf("%d %+v", st, r)
		}
		first = r
		st, _, again := req(t, "ann", "bob")
		if st != 200 || again.RequestID != r.RequestID || again.Status != identity.RequestPending {
			t.Fatalf("repeat: %d %+v", st, again)
		}
	})
	t.Run("ids are exact: a request to Bob is not a request to bob", func(t *testing.T) {
		st, _, r := req(t, "ann", "Bob")
		if st != 201 || r.To != "Bob" {
			t.Fatalf("%d %+v", st, r)
		}
	})
	t.Run("both sides see the request, incoming and outgoing", func(t *testing.T) {
		var bobs, anns identity.FriendRequests
		a.call(t, "bob", "ListFriendRequestsFunction", nil, nil, "", &bobs)
		a.call(t, "ann", "ListFriendRequestsFunction", nil, map[string]string{"direction": "outgoing"}, "", &anns)
		if len(bobs.Incoming) != 1 || bobs.Incoming[0].RequestID != first.RequestID || len(bobs.Outgoing) != 0 {
			t.Fatalf("bob sees %+v", bobs)
		}
		if len(anns.Outgoing) != 2 || anns.Outgoing[0].To != "bob" || anns.Outgoing[1].To != "Bob" || len(anns.Incoming) != 0 {
			t.Fatalf("ann sees %+v", anns)
		}
		st, code := a.call(t, "ann", "ListFriendRequestsFunction", nil, map[string]string{"direction": "sideways"}, "", nil)
		a.expect(t, st, code, 400, "invalid_parameter")
	})
	t.Run("the sender cannot accept its own request", func(t *testing.T) {
		st, code := a.call(t, "ann", "AcceptFriendRequestFunction", map[string]string{"id": first.RequestID}, nil, "", nil)
		a.expect(t, st, code, 403, "cannot_accept_own_request")
	})
	t.Run("a third agent cannot see the request", func(t *testing.T) {
		st, code := a.call(t, "cat", "RejectFriendRequestFunction", map[string]string{"id": first.RequestID}, nil, "", nil)
		a.expect(t, st, code, 404, "request_not_found")
		for _, id := range []string{"0", "-1", "01", "x", "99999999"} {
			st, code := a.call(t, "bob", "AcceptFriendRequestFunction", map[string]string{"id": id}, nil, "", nil)
			a.expect(t, st, code, 404, "request_not_found")
		}
	})
	t.Run("accepting makes both friends, and accepting again answers the same", func(t *testing.T) {
		var r identity.FriendRequest
		st, _ := a.call(t, "bob", "AcceptFriendRequestFunction", map[string]string{"id": first.RequestID}, nil, "", &r)
		if st != 200 || r.Status != identity.RequestAccepted || r.DecidedAt == nil {
			t.Fatalf("%d %+v", st, r)
		}
		st, _ = a.call(t, "bob", "AcceptFriendRequestFunction", map[string]string{"id": first.RequestID}, nil, "", &r)
		if st != 200 || r.Status != identity.RequestAccepted {
			t.Fatalf("repeat: %d %+v", st, r)
		}
		for _, pair := range [][2]string{{"ann", "bob"}, {"bob", "ann"}} {
			if ok, err := identity.CanCommunicate(ctx, a.s.DB, pair[0], pair[1]); err != nil || !ok {
				t.Fatalf("%s cannot reach %s", pair[0], pair[1])
			}
		}
		st, code, _ := req(t, "bob", "ann")
		a.expect(t, st, code, 409, "already_friends")
	})
	t.Run("a request meeting a pending reverse request makes a friendship at once", func(t *testing.T) {
		st, _, r1 := req(t, "cat", "dan")
		if st != 201 || r1.Status != identity.RequestPending {
			t.Fatal(st, r1)
		}
		st, _, r2 := req(t, "dan", "cat")
		if st != 201 || r2.Status != identity.RequestAccepted {
			t.Fatalf("reverse request: %d %+v", st, r2)
		}
		var cats identity.FriendRequests
		a.call(t, "cat", "ListFriendRequestsFunction", nil, nil, "", &cats)
		if len(cats.Outgoing)+len(cats.Incoming) != 0 {
			t.Fatalf("cat still has pending requests: %+v", cats)
		}
		var old identity.FriendRequest
		st, code := a.call(t, "dan", "RejectFriendRequestFunction", map[string]string{"id": r1.RequestID}, nil, "", &old)
		a.expect(t, st, code, 409, "request_not_pending")
	})
	t.Run("the sender withdraws, the recipient rejects, and settled requests stay settled", func(t *testing.T) {
		_, _, r := req(t, "cat", "bob")
		var w identity.FriendRequest
		if st, _ := a.call(t, "cat", "RejectFriendRequestFunction", map[string]string{"id": r.RequestID}, nil, "", &w); st != 200 || w.Status != identity.RequestWithdrawn {
			t.Fatalf("withdraw: %d %+v", st, w)
		}
		st, code := a.call(t, "bob", "AcceptFriendRequestFunction", map[string]string{"id": r.RequestID}, nil, "", nil)
		a.expect(t, st, code, 409, "request_not_pending")
		_, _, r = req(t, "cat", "bob")
		if st, _ := a.call(t, "bob", "RejectFriendRequestFunction", map[string]string{"id": r.RequestID}, nil, "", &w); st != 200 || w.Status != identity.RequestRejected {
			t.Fatalf("reject: %d %+v", st, w)
		}
		if ok, _ := identity.CanCommunicate(ctx, a.s.DB, "cat", "bob"); ok {
			t.Fatal("a rejected request made friends")
		}
	})
	t.Run("friends are listed by id with presence, in pages", func(t *testing.T) {
		for _, f := range []string{"cat", "dan", "Bob"} {
			if _, _, err := a.s.AdminCreateFriendship(ctx, "ann", f); err != nil {
				t.Fatal(err)
			}
		}
		var page1, page2 struct {
			Friends   []identity.Friend
			NextAfter string `json:"next_after"`
		}
		a.call(t, "ann", "ListFriendsFunction", nil, map[string]string{"limit": "2"}, "", &page1)
		a.call(t, "ann", "ListFriendsFunction", nil, map[string]string{"limit": "2", "after": page1.NextAfter}, "", &page2)
		if !sameIDs(friendIDs(page1.Friends), "Bob", "bob") || page1.NextAfter != "bob" ||
			!sameIDs(friendIDs(page2.Friends), "cat", "dan") || page2.NextAfter != "" {
			t.Fatalf("pages %+v / %+v", page1, page2)
		}
		if page1.Friends[0].Status != "inactive" {
			t.Fatalf("presence missing: %+v", page1.Friends[0])
		}
		for _, q := range []map[string]string{{"limit": "0"}, {"limit": "1001"}, {"limit": "x"}, {"after": "bad id"}} {
			st, code := a.call(t, "ann", "ListFriendsFunction", nil, q, "", nil)
			a.expect(t, st, code, 400, "invalid_parameter")
		}
	})
	t.Run("removing a friend ends it both ways, once", func(t *testing.T) {
		if st, _ := a.call(t, "bob", "RemoveFriendFunction", map[string]string{"id": "ann"}, nil, "", nil); st != 204 {
			t.Fatal(st)
		}
		if ok, _ := identity.CanCommunicate(ctx, a.s.DB, "ann", "bob"); ok {
			t.Fatal("still friends")
		}
		st, code := a.call(t, "ann", "RemoveFriendFunction", map[string]string{"id": "bob"}, nil, "", nil)
		a.expect(t, st, code, 404, "not_friends")
	})
	t.Run("the admin makes friends idempotently and refuses nonsense", func(t *testing.T) {
		var f identity.AdminFriendship
		st, _ := a.call(t, "admin", "AdminCreateFriendshipFunction", nil, nil, `{"a":"bob","b":"dan"}`, &f)
		if st != 201 {
			t.Fatal(st)
		}
		st, _ = a.call(t, "admin", "AdminCreateFriendshipFunction", nil, nil, `{"a":"dan","b":"bob"}`, &f)
		if st != 200 {
			t.Fatalf("repeat: %d", st)
		}
		st, code := a.call(t, "admin", "AdminCreateFriendshipFunction", nil, nil, `{"a":"dan","b":"dan"}`, nil)
		a.expect(t, st, code, 422, "self_friendship")
		st, code = a.call(t, "admin", "AdminCreateFriendshipFunction", nil, nil, `{"a":"dan","b":"ghost"}`, nil)
		a.expect(t, st, code, 404, "agent_not_found")
		st, code = a.call(t, "admin", "AdminCreateFriendshipFunction", nil, nil, `{"a":"dan"`, nil)
		a.expect(t, st, code, 400, "invalid_json")
	})
	t.Run("an agent cannot communicate with itself", func(t *testing.T) {
		if ok, err := identity.CanCommunicate(ctx, a.s.DB, "ann", "ann"); ok || err != nil {
			t.Fatal(ok, err)
		}
	})
}

func TestGroups(t *testing.T) {
	a := newAPI(t, "owner", "adm", "mem", "pal", "outsider", "late")
	ctx := context.Background()
	for _, f := range []string{"adm", "mem", "pal", "late"} {
		if _, _, err := a.s.AdminCreateFriendship(ctx, "owner", f); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := a.s.AdminCreateFriendship(ctx, "adm", "pal"); err != nil {
		t.Fatal(err)
	}
	var g identity.Group
	t.Run("the creator owns a new group with its own context", func(t *testing.T) {
		st, _ := a.call(t, "owner", "CreateGroupFunction", nil, nil, `{"name":"Release crew"}`, &g)
		if st != 201 || g.Owner != "owner" || g.Role != identity.RoleOwner || g.MemberCount != 1 ||
			!regexp.MustCompile(`^grp_[0-9a-f]{24}$`).MatchString(g.GroupID) ||
			!regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(g.ContextID) {
			t.Fatalf("%d %+v", st, g)
		}
		st, code := a.call(t, "owner", "CreateGroupFunction", nil, nil, `{"name":""}`, nil)
		a.expect(t, st, code, 422, "invalid_name")
	})
	add := func(t testing.TB, who, agent, role string) (int, string, identity.Membership) {
		var m identity.Membership
		st, code := a.call(t, who, "AddGroupMemberFunction", map[string]string{"id": g.GroupID}, nil, `{"agent_id":"`+agent+`","role":"`+role+`"}`, &m)
		return st, code, m
	}
	t.Run("the owner adds a friend as admin and another as member", func(t *testing.T) {
		if st, _, m := add(t, "owner", "adm", "admin"); st != 201 || m.Role != identity.RoleAdmin {
			t.Fatal(st, m)
		}
		if st, _, m := add(t, "owner", "mem", ""); st != 201 || m.Role != identity.RoleMember {
			t.Fatal(st, m)
		}
	})
	t.Run("adding an existing member changes nothing", func(t *testing.T) {
		if st, _, m := add(t, "owner", "adm", "member"); st != 200 || m.Role != identity.RoleAdmin {
			t.Fatal(st, m)
		}
	})
	t.Run("only friends of the adder can be added", func(t *testing.T) {
		st, code, _ := add(t, "owner", "outsider", "")
		a.expect(t, st, code, 403, "not_a_friend")
	})
	t.Run("an admin adds members but not admins", func(t *testing.T) {
		st, code, _ := add(t, "adm", "pal", "admin")
		a.expect(t, st, code, 403, "role_not_allowed")
		if st, _, _ := add(t, "adm", "pal", ""); st != 201 {
			t.Fatal(st)
		}
	})
	t.Run("a plain member cannot add, and roles are validated", func(t *testing.T) {
		st, code, _ := add(t, "mem", "owner", "")
		a.expect(t, st, code, 403, "not_group_admin")
		st, code, _ = add(t, "owner", "late", "owner")
		a.expect(t, st, code, 422, "invalid_role")
	})
	t.Run("the roster lists members by id with roles and presence, to members only", func(t *testing.T) {
		var r identity.Roster
		a.call(t, "mem", "GetRosterFunction", map[string]string{"id": g.GroupID}, nil, "", &r)
		got := []string{}
		for _, m := range r.Members {
			got = append(got, m.AgentID+":"+m.Role+":"+m.Status)
		}
		if !sameIDs(got, "adm:admin:inactive", "mem:member:inactive", "owner:owner:inactive", "pal:member:inactive") || r.MemberCount != 4 || r.Role != identity.RoleMember {
			t.Fatalf("roster %v (%+v)", got, r.Group)
		}
		var page identity.Roster
		a.call(t, "mem", "GetRosterFunction", map[string]string{"id": g.GroupID}, map[string]string{"limit": "3"}, "", &page)
		if len(page.Members) != 3 || page.NextAfter != "owner" {
			t.Fatalf("page %+v", page)
		}
		st, code := a.call(t, "outsider", "GetRosterFunction", map[string]string{"id": g.GroupID}, nil, "", nil)
		a.expect(t, st, code, 404, "group_not_found")
	})
	t.Run("group mates reach each other; outsiders reach nobody", func(t *testing.T) {
		if ok, _ := identity.CanCommunicate(ctx, a.s.DB, "mem", "pal"); !ok {
			t.Fatal("mem cannot reach pal")
		}
		var p identity.AgentProfile
		if st, _ := a.call(t, "mem", "GetAgentFunction", map[string]string{"id": "pal"}, nil, "", &p); st != 200 || p.AgentID != "pal" {
			t.Fatal(st, p)
		}
		for _, id := range []string{"pal", "ghost", "bad id"} {
			st, code := a.call(t, "outsider", "GetAgentFunction", map[string]string{"id": id}, nil, "", nil)
			a.expect(t, st, code, 404, "agent_not_found")
		}
	})
	rm := func(t testing.TB, who, agent string) (int, string) {
		return a.call(t, who, "RemoveGroupMemberFunction", map[string]string{"id": g.GroupID, "agent": agent}, nil, "", nil)
	}
	t.Run("an admin cannot remove an admin or the owner; a member cannot remove others", func(t *testing.T) {
		st, code := rm(t, "adm", "owner")
		a.expect(t, st, code, 403, "not_group_admin")
		st, code = rm(t, "mem", "pal")
		a.expect(t, st, code, 403, "not_group_admin")
		st, code = rm(t, "owner", "outsider")
		a.expect(t, st, code, 404, "member_not_found")
	})
	t.Run("an admin removes a member and a member leaves", func(t *testing.T) {
		if st, _ := rm(t, "adm", "pal"); st != 204 {
			t.Fatal(st)
		}
		if st, _ := rm(t, "mem", "mem"); st != 204 {
			t.Fatal(st)
		}
		st, code := a.call(t, "mem", "GetRosterFunction", map[string]string{"id": g.GroupID}, nil, "", nil)
		a.expect(t, st, code, 404, "group_not_found")
	})
	t.Run("when the owner leaves, the longest-standing admin becomes owner", func(t *testing.T) {
		if st, _, _ := add(t, "owner", "late", ""); st != 201 {
			t.Fatal(st)
		}
		if st, _ := rm(t, "owner", "owner"); st != 204 {
			t.Fatal(st)
		}
		var r identity.Roster
		a.call(t, "adm", "GetRosterFunction", map[string]string{"id": g.GroupID}, nil, "", &r)
		if r.Owner != "adm" || r.Role != identity.RoleOwner || r.MemberCount != 2 {
			t.Fatalf("after the owner left: %+v", r.Group)
		}
	})
	t.Run("when the last member leaves, the group is gone", func(t *testing.T) {
		rm(t, "adm", "adm")
		if st, _ := a.call(t, "late", "RemoveGroupMemberFunction", map[string]string{"id": g.GroupID, "agent": "late"}, nil, "", nil); st != 204 {
			t.Fatal(st)
		}
		var n int
		if err := a.s.DB.QueryRow("SELECT COUNT(*) FROM mesh_groups WHERE group_id = ?", g.GroupID).Scan(&n); err != nil || n != 0 {
			t.Fatalf("group rows %d (%v)", n, err)
		}
	})
	t.Run("my groups are listed by id, in pages", func(t *testing.T) {
		var ids []string
		for _, name := range []string{"a", "b", "c"} {
			var ng identity.Group
			a.call(t, "owner", "CreateGroupFunction", nil, nil, `{"name":"`+name+`"}`, &ng)
			ids = append(ids, ng.GroupID)
		}
		var page1, page2 struct {
			Groups    []identity.Group
			NextAfter string `json:"next_after"`
		}
		a.call(t, "owner", "ListGroupsFunction", nil, map[string]string{"limit": "2"}, "", &page1)
		a.call(t, "owner", "ListGroupsFunction", nil, map[string]string{"after": page1.NextAfter}, "", &page2)
		got := []string{}
		for _, gr := range append(page1.Groups, page2.Groups...) {
			got = append(got, gr.GroupID)
		}
		if len(got) != 3 || !(got[0] < got[1] && got[1] < got[2]) || page2.NextAfter != "" {
			t.Fatalf("listed %v", got)
		}
	})
	t.Run("the admin bootstraps a named group with members, without friendships", func(t *testing.T) {
		var ag identity.Group
		st, _ := a.call(t, "admin", "AdminCreateGroupFunction", nil, nil, `{"group_id":"ops","name":"Ops","owner":"outsider","members":["mem","mem","outsider"]}`, &ag)
		if st != 201 || ag.GroupID != "ops" || ag.MemberCount != 2 {
			t.Fatal(st, ag)
		}
		st, code := a.call(t, "admin", "AdminCreateGroupFunction", nil, nil, `{"group_id":"ops","name":"Ops","owner":"outsider"}`, nil)
		a.expect(t, st, code, 409, "group_exists")
		st, code = a.call(t, "admin", "AdminCreateGroupFunction", nil, nil, `{"name":"Ops","owner":"outsider","members":["ghost"]}`, nil)
		a.expect(t, st, code, 404, "agent_not_found")
		var m identity.Membership
		if st, _ := a.call(t, "admin", "AdminAddGroupMemberFunction", map[string]string{"id": "ops"}, nil, `{"agent_id":"pal","role":"admin"}`, &m); st != 201 || m.Role != identity.RoleAdmin {
			t.Fatal(st, m)
		}
		if st, _ := a.call(t, "admin", "AdminAddGroupMemberFunction", map[string]string{"id": "ops"}, nil, `{"agent_id":"pal"}`, &m); st != 200 {
			t.Fatal(st)
		}
		st, code = a.call(t, "admin", "AdminAddGroupMemberFunction", map[string]string{"id": "nope"}, nil, `{"agent_id":"pal"}`, nil)
		a.expect(t, st, code, 404, "group_not_found")
	})
}
