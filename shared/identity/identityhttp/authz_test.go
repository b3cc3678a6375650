package identityhttp

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// The callers of the authorization matrix.
const (
	self     = "self"     // the target agent T itself
	friend   = "friend"   // F, a friend of T
	mate     = "mate"     // M, shares group G (owned by T) as a plain member
	stranger = "stranger" // S, neither
	admin    = "admin key"
	noToken  = "no token"
	expired  = "expired token"
	tampered = "tampered token"
	revoked  = "revoked key"
)

var callers = []string{self, friend, mate, stranger, admin, noToken, expired, tampered, revoked}

// world is a small social graph around a target agent T, built fresh for
// every case so writes of one case cannot shape another's answer:
// T—F friends; group G owned by T with member M; X (an unrelated agent) has a
// pending friend request R to T; S knows nobody.
type world struct {
	T, F, M, S, X string
	G, R          string
	TKeyID        string
	keys, tokens  map[string]string
	auth          map[string]string
}

func buildWorld(t *testing.T, s *identity.Service, n int) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{
		T: fmt.Sprintf("target-%d", n), F: fmt.Sprintf("friend-%d", n), M: fmt.Sprintf("mate-%d", n),
		S: fmt.Sprintf("stranger-%d", n), X: fmt.Sprintf("requester-%d", n),
		keys: map[string]string{}, tokens: map[string]string{},
	}
	for _, id := range []string{w.T, w.F, w.M, w.S, w.X} {
		w.keys[id], w.tokens[id] = identitytest.NewAgent(t, s, id)
	}
	w.TKeyID = w.keys[w.T][len(apiKeyPrefix) : len(apiKeyPrefix)+apiKeyIDLen]
	if _, _, err := s.AdminCreateFriendship(ctx, w.T, w.F); err != nil {
		t.Fatal(err)
	}
	g, err := s.AdminCreateGroup(ctx, identity.AdminGroupInput{Name: "crew", Owner: w.T, Members: []string{w.M}})
	if err != nil {
		t.Fatal(err)
	}
	w.G = g.GroupID
	req, _, err := s.SendFriendRequest(ctx, w.X, w.T)
	if err != nil {
		t.Fatal(err)
	}
	w.R = req.RequestID

	// T's second key: a token minted from it, then the key revoked.
	k2, err := s.RotateKey(ctx, w.T, identity.RotateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok2, err := s.IssueToken(ctx, k2.APIKey, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeKey(ctx, w.T, k2.KeyID); err != nil {
		t.Fatal(err)
	}
	w.keys[revoked] = k2.APIKey

	// A token for T that expired an hour ago.
	exp := signToken(t, w.T, w.TKeyID, s.Now().Add(-2*time.Hour), s.TokenTTL)
	w.auth = map[string]string{
		self: bearer(w.tokens[w.T]), friend: bearer(w.tokens[w.F]), mate: bearer(w.tokens[w.M]), stranger: bearer(w.tokens[w.S]),
		admin: bearer(identitytest.AdminKey), noToken: "", expired: bearer(exp),
		tampered: bearer(tamper(t, w.tokens[w.T], w.S)), revoked: bearer(tok2.Token),
	}
	return w
}

// tamper rewrites a token's subject to another agent, keeping the signature.
func tamper(t *testing.T, token, sub string) string {
	parts := strings.Split(token, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(payload), `"sub":"`)
	j := strings.Index(string(payload)[i+7:], `"`)
	forged := string(payload[:i+7]) + sub + string(payload[i+7+j:])
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(forged))
	return strings.Join(parts, ".")
}

// callerAgent maps a caller to the agent it acts as (for per-caller bodies).
func (w *world) callerAgent(c string) string {
	switch c {
	case self, expired, tampered, revoked:
		return w.T
	case friend:
		return w.F
	case mate:
		return w.M
	case stranger:
		return w.S
	}
	return ""
}

type authzRoute struct {
	name   string
	params func(w *world) map[string]string
	query  map[string]string
	body   func(w *world, caller string) string
	// want is the status for self, friend, mate, stranger (agent routes) or
	// for the admin key (admin routes; agents then get 401).
	want map[string]int
	// absent, for a route whose path names an agent, group or request, names
	// ones that do not exist: a caller refused a real one with 404 must get
	// the very same answer for those, or the 404 tells "not yours" from
	// "not there".
	absent func(w *world) map[string]string
}

func agentsWant(self_, friend_, mate_, stranger_ int) map[string]int {
	return map[string]int{self: self_, friend: friend_, mate: mate_, stranger: stranger_}
}

func none(*world) map[string]string { return nil }

func fixed(s string) func(*world, string) string { return func(*world, string) string { return s } }

var authzRoutes = []authzRoute{
	{name: "AuthTokenFunction", params: none, body: func(w *world, c string) string {
		key := map[string]string{self: w.keys[w.T], friend: w.keys[w.F], mate: w.keys[w.M], stranger: w.keys[w.S],
			admin: identitytest.AdminKey, noToken: "", expired: strings.TrimPrefix(w.auth[expired], "Bearer "),
			tampered: w.keys[w.T][:len(w.keys[w.T])-1] + flip(w.keys[w.T][len(w.keys[w.T])-1]), revoked: w.keys[revoked]}[c]
		return fmt.Sprintf(`{"api_key":%q}`, key)
	}, want: map[string]int{self: 200, friend: 200, mate: 200, stranger: 200, admin: 401, noToken: 401, expired: 401, tampered: 401, revoked: 401}},

	{name: "AdminCreateAgentFunction", params: none, body: func(w *world, _ string) string {
		return fmt.Sprintf(`{"agent_id":"new-%s","name":"New agent"}`, w.T)
	}, want: map[string]int{admin: 201}},
	{name: "AdminRotateKeyFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.T} }, body: fixed(""), want: map[string]int{admin: 201}},
	{name: "AdminRevokeKeyFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.T, "key_id": w.TKeyID} }, body: fixed(""), want: map[string]int{admin: 200}},
	{name: "AdminCreateFriendshipFunction", params: none, body: func(w *world, _ string) string {
		return fmt.Sprintf(`{"a":%q,"b":%q}`, w.T, w.S)
	}, want: map[string]int{admin: 201}},
	{name: "AdminCreateGroupFunction", params: none, body: func(w *world, _ string) string {
		return fmt.Sprintf(`{"name":"ops","owner":%q,"members":[%q]}`, w.T, w.S)
	}, want: map[string]int{admin: 201}},
	{name: "AdminAddGroupMemberFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.G} }, body: func(w *world, _ string) string {
		return fmt.Sprintf(`{"agent_id":%q}`, w.S)
	}, want: map[string]int{admin: 201}},

	{name: "HeartbeatFunction", params: none, body: fixed(`{"instance_id":"meshd-1","stats":{"handled":3}}`), want: agentsWant(200, 200, 200, 200)},
	{name: "GoOfflineFunction", params: none, body: fixed(""), want: agentsWant(200, 200, 200, 200)},
	{name: "GetMeFunction", params: none, body: fixed(""), want: agentsWant(200, 200, 200, 200)},
	{name: "GetAgentFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.T} }, body: fixed(""), want: agentsWant(200, 200, 200, 404), absent: func(*world) map[string]string { return map[string]string{"id": "no-such-agent"} }},
	{name: "SendFriendRequestFunction", params: none, body: func(w *world, _ string) string {
		return fmt.Sprintf(`{"to":%q}`, w.T)
	}, want: agentsWant(422, 409, 201, 201)},
	{name: "ListFriendRequestsFunction", params: none, body: fixed(""), want: agentsWant(200, 200, 200, 200)},
	{name: "AcceptFriendRequestFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.R} }, body: fixed(""), want: agentsWant(200, 404, 404, 404), absent: func(*world) map[string]string { return map[string]string{"id": "999999999"} }},
	{name: "RejectFriendRequestFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.R} }, body: fixed(""), want: agentsWant(200, 404, 404, 404), absent: func(*world) map[string]string { return map[string]string{"id": "999999999"} }},
	{name: "ListFriendsFunction", params: none, body: fixed(""), want: agentsWant(200, 200, 200, 200)},
	{name: "RemoveFriendFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.T} }, body: fixed(""), want: agentsWant(404, 204, 404, 404), absent: func(*world) map[string]string { return map[string]string{"id": "no-such-agent"} }},
	{name: "BlockAgentFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.T} }, body: fixed(""), want: agentsWant(422, 204, 204, 204)},
	{name: "UnblockAgentFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.T} }, body: fixed(""), want: agentsWant(204, 204, 204, 204)},
	{name: "ListBlocksFunction", params: none, body: fixed(""), want: agentsWant(200, 200, 200, 200)},
	{name: "CreateGroupFunction", params: none, body: fixed(`{"name":"reviewers"}`), want: agentsWant(201, 201, 201, 201)},
	{name: "ListGroupsFunction", params: none, body: fixed(""), want: agentsWant(200, 200, 200, 200)},
	{name: "GetRosterFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.G} }, body: fixed(""), want: agentsWant(200, 404, 200, 404), absent: func(*world) map[string]string { return map[string]string{"id": "no-such-group"} }},
	{name: "AddGroupMemberFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.G} }, body: func(w *world, _ string) string {
		return fmt.Sprintf(`{"agent_id":%q}`, w.F)
	}, want: agentsWant(201, 404, 403, 404), absent: func(*world) map[string]string { return map[string]string{"id": "no-such-group"} }},
	{name: "RemoveGroupMemberFunction", params: func(w *world) map[string]string { return map[string]string{"id": w.G, "agent": w.M} }, body: fixed(""), want: agentsWant(204, 404, 204, 404), absent: func(w *world) map[string]string { return map[string]string{"id": "no-such-group", "agent": w.M} }},
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

// expectedStatus completes a route's table: credentials that fail
// authentication are 401 everywhere, agents on admin routes are 401.
func (r authzRoute) expectedStatus(caller string) int {
	if st, ok := r.want[caller]; ok {
		return st
	}
	return 401
}

// wantAuthCode is the problem code a refused credential must produce.
func wantAuthCode(r authzRoute, caller string) string {
	if r.name == "AuthTokenFunction" {
		return "invalid_api_key"
	}
	_, adminRoute := r.want[admin]
	switch {
	case caller == noToken:
		return "missing_token"
	case adminRoute:
		return "invalid_admin_key"
	case caller == revoked:
		return "key_revoked"
	}
	return "invalid_token"
}

// snapshot checksums the tables a refused request must not change.
func snapshot(t *testing.T, s *identity.Service) string {
	t.Helper()
	return strings.Join(mysqltest.Strings(t, s.DB, "=", "CHECKSUM TABLE agents, api_keys, friendships, friend_requests, mesh_groups, group_members"), ",")
}

// TestAuthorizationMatrix drives every route of identity through the real
// middleware with real API Gateway events, for every kind of caller, and
// checks the status, the content type, the problem code of refused
// credentials, and that no refused request changed anything.
func TestAuthorizationMatrix(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	routes := templateRoutes(t)

	covered := map[string]bool{}
	for _, r := range authzRoutes {
		covered[r.name] = true
	}
	var missing []string
	for name := range Endpoints(s) {
		if !covered[name] {
			missing = append(missing, name)
		}
		if routes[name] == "" {
			t.Errorf("endpoint %s has no route in template.yaml", name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("routes missing from the authorization matrix: %v", missing)
	}

	n := 0
	for _, r := range authzRoutes {
		for _, caller := range callers {
			n++
			want := r.expectedStatus(caller)
			t.Run(fmt.Sprintf("%s by %s answers %d", r.name, caller, want), func(t *testing.T) {
				w := buildWorld(t, s, n)
				ev := apiEvent(routes[r.name], r.params(w), r.query, w.auth[caller], r.body(w, caller))
				// Each case is its own client: the throttle of failed
				// credentials (TestAuthFailuresAreThrottled) must not carry
				// over from one case to the next.
				ev.RequestContext.HTTP.SourceIP = fmt.Sprintf("2001:db8::%x", n)
				before := snapshot(t, s)
				resp := invoke(t, s, r.name, ev)
				if resp.StatusCode != want {
					t.Fatalf("status %d, want %d; body %s", resp.StatusCode, want, resp.Body)
				}
				if want >= 400 {
					code := problemCode(t, resp)
					if want == 401 {
						if wc := wantAuthCode(r, caller); code != wc {
							t.Errorf("problem code %q, want %q", code, wc)
						}
					}
					if after := snapshot(t, s); after != before {
						t.Errorf("a refused request changed the database:\nbefore %s\nafter  %s", before, after)
					}
					if want == 404 && r.absent != nil {
						ev := apiEvent(routes[r.name], r.absent(w), r.query, w.auth[caller], r.body(w, caller))
						ev.RequestContext.HTTP.SourceIP = fmt.Sprintf("2001:db8::%x", n)
						if got := invoke(t, s, r.name, ev); got.StatusCode != resp.StatusCode || got.Body != resp.Body {
							t.Errorf("a real id another agent may not see answers %d %s, a missing one %d %s: they must not differ",
								resp.StatusCode, resp.Body, got.StatusCode, got.Body)
						}
					}
					return
				}
				if want == 204 {
					// No content, so no content type.
					if ct := resp.Headers["Content-Type"]; ct != "" || resp.Body != "" {
						t.Errorf("204 carries Content-Type %q and body %q, want neither", ct, resp.Body)
					}
				} else if ct := resp.Headers["Content-Type"]; ct != "application/json" {
					t.Errorf("Content-Type %q, want application/json", ct)
				}
				if want != 204 && !strings.HasPrefix(resp.Body, "{") {
					t.Errorf("body is not a JSON object: %s", resp.Body)
				}
			})
		}
	}
}
