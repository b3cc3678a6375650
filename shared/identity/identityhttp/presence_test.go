package identityhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
)

type presenceProbe struct {
	t      *testing.T
	s      *identity.Service
	tokens map[string]string
}

func (p presenceProbe) heartbeat(agent, instance string) identity.HeartbeatResult {
	p.t.Helper()
	resp := invoke(p.t, p.s, "HeartbeatFunction", apiEvent("POST /v1/agents/me/heartbeat", nil, nil, bearer(p.tokens[agent]),
		fmt.Sprintf(`{"instance_id":%q,"stats":{"handled":1}}`, instance)))
	if resp.StatusCode != 200 {
		p.t.Fatalf("heartbeat: %d %s", resp.StatusCode, resp.Body)
	}
	var hb identity.HeartbeatResult
	if err := json.Unmarshal([]byte(resp.Body), &hb); err != nil {
		p.t.Fatal(err)
	}
	return hb
}

func (p presenceProbe) offline(agent string, query map[string]string) string {
	p.t.Helper()
	resp := invoke(p.t, p.s, "GoOfflineFunction", apiEvent("DELETE /v1/agents/me/online", nil, query, bearer(p.tokens[agent]), ""))
	if resp.StatusCode != 200 {
		p.t.Fatalf("offline: %d %s", resp.StatusCode, resp.Body)
	}
	var out struct{ Status string }
	if err := json.Unmarshal([]byte(resp.Body), &out); err != nil {
		p.t.Fatal(err)
	}
	return out.Status
}

// seen returns the status of agent as the friend list of viewer, the roster
// of group and GET /v1/agents/me of agent itself show it; all must agree.
func (p presenceProbe) seen(agent, viewer, group string) string {
	p.t.Helper()
	var me identity.Me
	getJSON(p.t, p.s, "GetMeFunction", "GET /v1/agents/me", nil, p.tokens[agent], &me)
	var friends struct{ Friends []identity.Friend }
	getJSON(p.t, p.s, "ListFriendsFunction", "GET /v1/friends", nil, p.tokens[viewer], &friends)
	var roster identity.Roster
	getJSON(p.t, p.s, "GetRosterFunction", "GET /v1/groups/{id}/roster", map[string]string{"id": group}, p.tokens[viewer], &roster)
	var inFriends, inRoster string
	for _, f := range friends.Friends {
		if f.AgentID == agent {
			inFriends = f.Status
		}
	}
	for _, m := range roster.Members {
		if m.AgentID == agent {
			inRoster = m.Status
		}
	}
	if me.Status != inFriends || me.Status != inRoster {
		p.t.Fatalf("presence disagrees: me %q, friends list %q, roster %q", me.Status, inFriends, inRoster)
	}
	return me.Status
}

func getJSON(t *testing.T, s *identity.Service, name, route string, params map[string]string, token string, v any) {
	t.Helper()
	resp := invoke(t, s, name, apiEvent(route, params, nil, bearer(token), ""))
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", name, resp.StatusCode, resp.Body)
	}
	if err := json.Unmarshal([]byte(resp.Body), v); err != nil {
		t.Fatal(err)
	}
}

// TestPresence walks one agent through its presence states with an injected
// clock, watching them through its own profile, a friend's list and a roster.
func TestPresence(t *testing.T) {
	s, clock, _ := identitytest.NewService(t)
	ctx := context.Background()
	p := presenceProbe{t: t, s: s, tokens: map[string]string{}}
	for _, id := range []string{"worker", "boss"} {
		_, p.tokens[id] = identitytest.NewAgent(t, s, id)
	}
	if _, _, err := s.AdminCreateFriendship(ctx, "worker", "boss"); err != nil {
		t.Fatal(err)
	}
	g, err := s.AdminCreateGroup(ctx, identity.AdminGroupInput{Name: "team", Owner: "boss", Members: []string{"worker"}})
	if err != nil {
		t.Fatal(err)
	}
	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}

	// seenAs fails the step unless the worker's own view, the boss's friend
	// list and the group's roster all show the worker as want.
	seenAs := func(t *testing.T, want string) {
		t.Helper()
		if st := p.seen("worker", "boss", g.GroupID); st != want {
			t.Fatalf("status %q, want %q", st, want)
		}
	}
	step("a new agent is inactive", func(t *testing.T) {
		seenAs(t, "inactive")
	})
	step("a heartbeat makes it active and reports the newest inbox seq", func(t *testing.T) {
		if _, err := s.DB.Exec("UPDATE inbox_counters SET last_seq = 7 WHERE recipient = 'worker'"); err != nil {
			t.Fatal(err)
		}
		hb := p.heartbeat("worker", "meshd-A")
		if hb.Status != "active" || hb.LastSeq != 7 || hb.KeyEpoch != 1 {
			t.Fatalf("heartbeat answered %+v, want active, last_seq 7, key_epoch 1", hb)
		}
		seenAs(t, "active")
	})
	step("the scanner leaves an agent alone 89 s after its heartbeat", func(t *testing.T) {
		clock.Advance(89 * time.Second)
		if n, err := s.MarkInactive(ctx); err != nil || n != 0 {
			t.Fatalf("scanner changed %d agents (%v)", n, err)
		}
		seenAs(t, "active")
	})
	step("the scanner marks it inactive after more than 90 s without a heartbeat", func(t *testing.T) {
		clock.Advance(2 * time.Second)
		if err := s.ScanPresence(ctx); err != nil {
			t.Fatal(err)
		}
		seenAs(t, "inactive")
	})
	step("going offline from inactive keeps it inactive", func(t *testing.T) {
		if st := p.offline("worker", nil); st != "inactive" {
			t.Fatalf("offline answered %q", st)
		}
	})
	step("going offline while active makes it draining", func(t *testing.T) {
		p.heartbeat("worker", "meshd-A")
		if st := p.offline("worker", nil); st != "draining" {
			t.Fatalf("offline answered %q", st)
		}
		seenAs(t, "draining")
	})
	step("a heartbeat from the instance that drained does not revive it", func(t *testing.T) {
		clock.Advance(30 * time.Second)
		if hb := p.heartbeat("worker", "meshd-A"); hb.Status != "draining" {
			t.Fatalf("heartbeat answered %q, want draining", hb.Status)
		}
		seenAs(t, "draining")
	})
	step("a heartbeat from a new instance revives it", func(t *testing.T) {
		clock.Advance(30 * time.Second)
		if hb := p.heartbeat("worker", "meshd-B"); hb.Status != "active" {
			t.Fatalf("heartbeat answered %q, want active", hb.Status)
		}
		seenAs(t, "active")
	})
	step("a late stop from the replaced instance changes nothing", func(t *testing.T) {
		if st := p.offline("worker", map[string]string{"instance_id": "meshd-A"}); st != "active" {
			t.Fatalf("offline answered %q, want active", st)
		}
	})
	step("the drained instance stays drained after the new one stops too", func(t *testing.T) {
		if st := p.offline("worker", map[string]string{"instance_id": "meshd-B"}); st != "draining" {
			t.Fatalf("offline answered %q", st)
		}
		if hb := p.heartbeat("worker", "meshd-B"); hb.Status != "draining" {
			t.Fatalf("heartbeat from meshd-B answered %q, want draining", hb.Status)
		}
	})
	step("a draining agent without heartbeats becomes inactive", func(t *testing.T) {
		clock.Advance(91 * time.Second)
		if n, err := s.MarkInactive(ctx); err != nil || n != 1 {
			t.Fatalf("scanner changed %d agents (%v), want 1", n, err)
		}
		seenAs(t, "inactive")
	})
	step("the profile carries the last stats and instance", func(t *testing.T) {
		me, err := s.GetMe(ctx, "worker")
		if err != nil {
			t.Fatal(err)
		}
		if me.InstanceID == nil || *me.InstanceID != "meshd-B" || string(me.Stats) != `{"handled":1}` || me.LastSeq != 7 {
			t.Fatalf("profile %+v (stats %s)", me, me.Stats)
		}
	})
}

func TestHeartbeatRejectsBadInput(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	_, tok := identitytest.NewAgent(t, s, "hb")
	cases := []struct {
		name, body string
		status     int
		code       string
	}{
		{"a body that is not JSON", `{"instance_id":`, 400, "invalid_json"},
		{"an unknown field", `{"instance_id":"a","extra":1}`, 400, "invalid_json"},
		{"a missing instance_id", `{}`, 422, "invalid_instance_id"},
		{"an instance_id with spaces", `{"instance_id":"a b"}`, 422, "invalid_instance_id"},
		{"an instance_id over 128 characters", fmt.Sprintf(`{"instance_id":%q}`, strings.Repeat("x", 129)), 422, "invalid_instance_id"},
		{"stats that are not an object", `{"instance_id":"a","stats":[1]}`, 422, "invalid_stats"},
		{"stats over 8 KiB", fmt.Sprintf(`{"instance_id":"a","stats":{"x":%q}}`, strings.Repeat("y", identity.MaxStatsBytes)), 422, "stats_too_large"},
		{"stats with invalid UTF-8", "{\"instance_id\":\"a\",\"stats\":{\"x\":\"\xff\xfe\"}}", 422, "invalid_stats"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s gets %d and changes nothing", c.name, c.status), func(t *testing.T) {
			resp := invoke(t, s, "HeartbeatFunction", apiEvent("POST /v1/agents/me/heartbeat", nil, nil, bearer(tok), c.body))
			if resp.StatusCode != c.status || problemCode(t, resp) != c.code {
				t.Fatalf("got %d %s", resp.StatusCode, resp.Body)
			}
			me, err := s.GetMe(context.Background(), "hb")
			if err != nil || me.Status != "inactive" || me.InstanceID != nil {
				t.Fatalf("agent changed: %+v %v", me, err)
			}
		})
	}
}
