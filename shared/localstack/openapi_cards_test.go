package localstack_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// oauthTokenPath is the OAuth token endpoint: its errors are RFC 6749's
// JSON (§5.2), not problem documents.
const oauthTokenPath = "/v1/oauth/token"

// The card routes answer one card: at most cards.MaxSkills skills, each
// with every field at its limit in a character JSON escapes to 6 bytes.
func init() {
	lt := func(n int) string { return strings.Repeat("<", n) }
	tags := make([]string, cards.MaxTags)
	for i := range tags {
		tags[i] = lt(cards.MaxTag)
	}
	skill := api.A2ASkill{ID: lt(64), Name: lt(cards.MaxSkillName), Description: lt(cards.MaxSkillDescription), Tags: tags}
	card := api.A2ACard{AgentID: maxID, Name: maxName, Published: true, Description: lt(cards.MaxDescription),
		CardURL: lt(2048) + "/a2a/agents/" + maxID + "/.well-known/agent-card.json", UpdatedAt: maxTime}
	b := listBound{count: cards.MaxSkills, item: skill, also: card}
	for _, route := range []string{"GET /v1/agents/me/a2a-card", "PUT /v1/agents/me/a2a-card", "GET /v1/account/agents/{id}/a2a-card", "PUT /v1/account/agents/{id}/a2a-card"} {
		bounds[route] = b
	}
}

// oauthErrorProblems lists how an error answer of the OAuth token endpoint
// departs from RFC 6749 §5.2 and the document: its content type, its body,
// its error code among x-error-codes, and the headers it must carry.
func oauthErrorProblems(op *openapi3.Operation, status int, header http.Header, body []byte) []string {
	var out []string
	if ct := header.Get("Content-Type"); ct != "application/json" {
		out = append(out, fmt.Sprintf("%d with Content-Type %q, want application/json (RFC 6749 §5.2)", status, ct))
	}
	if cc := header.Get("Cache-Control"); cc != "no-store" {
		out = append(out, fmt.Sprintf("%d with Cache-Control %q, want no-store", status, cc))
	}
	var e api.OAuthError
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		return append(out, fmt.Sprintf("%d body is not an OAuth error: %s", status, body))
	}
	codes, err := errorCodes(op)
	if err != nil {
		out = append(out, err.Error())
	} else if !slices.Contains(codes[strconv.Itoa(status)], e.Error) {
		out = append(out, fmt.Sprintf("OAuth error %q is not among x-error-codes[%d] %v", e.Error, status, codes[strconv.Itoa(status)]))
	}
	if status == http.StatusTooManyRequests {
		if n, err := strconv.Atoi(header.Get("Retry-After")); err != nil || n < 1 {
			out = append(out, fmt.Sprintf("429 with Retry-After %q, want whole seconds >= 1", header.Get("Retry-After")))
		}
	}
	return out
}

// runCardScenario hits the A2A card routes (the agent's and the account's)
// and the OAuth token endpoint with successes and errors.
func runCardScenario(t *testing.T, c *conformance, adminKey string, db *mysql.DB) {
	admin := "Bearer " + adminKey
	pw := "correct horse battery"
	form := "application/x-www-form-urlencoded"

	bot := c.do(call{Who: "the admin creates card-bot", Method: "POST", Path: "/v1/admin/agents", Auth: admin,
		Body: map[string]string{"agent_id": "card-bot", "name": "Card Bot"}, Want: 201})
	key := bot.field("api_key")

	// ---- OAuth client credentials (before any failure spends the throttles) ----
	creds := url.Values{"grant_type": {"client_credentials"}, "client_id": {"card-bot"}, "client_secret": {key}}.Encode()
	tok := c.do(call{Who: "card-bot gets a token by client credentials in the form", Method: "POST", Path: oauthTokenPath,
		Body: creds, ContentType: form, Want: 200})
	if tok.Header.Get("Cache-Control") != "no-store" || tok.Header.Get("Pragma") != "no-cache" {
		t.Errorf("the token answer may be cached: %v", tok.Header)
	}
	bearer := "Bearer " + tok.field("access_token")
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(url.QueryEscape("card-bot")+":"+url.QueryEscape(key)))
	c.do(call{Who: "card-bot gets a token with HTTP Basic", Method: "POST", Path: oauthTokenPath, Auth: basic,
		Body: "grant_type=client_credentials", ContentType: form, Want: 200})
	c.do(call{Who: "a client asks for the password grant", Method: "POST", Path: oauthTokenPath,
		Body: "grant_type=password&username=a&password=b", ContentType: form, Want: 400, Code: "unsupported_grant_type", OffSpec: true})
	c.do(call{Who: "a client sends no grant_type", Method: "POST", Path: oauthTokenPath,
		Body: "client_id=card-bot&client_secret=x", ContentType: form, Want: 400, Code: "invalid_request", OffSpec: true})
	c.do(call{Who: "a client repeats grant_type", Method: "POST", Path: oauthTokenPath,
		Body: creds + "&grant_type=client_credentials", ContentType: form, Want: 400, Code: "invalid_request"})
	c.do(call{Who: "a client sends no client authentication", Method: "POST", Path: oauthTokenPath,
		Body: "grant_type=client_credentials", ContentType: form, Want: 401, Code: "invalid_client"})
	unsupported := c.do(call{Who: "a client authenticates with a bearer token", Method: "POST", Path: oauthTokenPath, Auth: "Bearer x",
		Body: "grant_type=client_credentials", ContentType: form, Want: 401, Code: "invalid_client"})
	if unsupported.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("a 401 to an Authorization header without WWW-Authenticate: %v", unsupported.Header)
	}
	c.do(call{Who: "a client sends JSON", Method: "POST", Path: oauthTokenPath,
		Body: map[string]string{"grant_type": "client_credentials", "client_id": "card-bot", "client_secret": key}, Want: 400, Code: "invalid_request", OffSpec: true})

	// ---- the agent's own card ----
	card := map[string]any{"published": true, "description": "Answers questions about cards.",
		"skills": []map[string]any{{"id": "lookup", "name": "Look up", "description": "Finds a card.", "tags": []string{"cards"}}}}
	c.do(call{Who: "card-bot reads its card before ever writing it", Method: "GET", Path: "/v1/agents/me/a2a-card", Auth: bearer, Want: 200})
	c.do(call{Who: "card-bot publishes its card", Method: "PUT", Path: "/v1/agents/me/a2a-card", Auth: bearer, Body: card, Want: 200})
	c.do(call{Who: "card-bot reads its published card", Method: "GET", Path: "/v1/agents/me/a2a-card", Auth: bearer, Want: 200})
	c.do(call{Who: "card-bot lists one skill id twice", Method: "PUT", Path: "/v1/agents/me/a2a-card", Auth: bearer,
		Body: map[string]any{"published": true, "skills": []map[string]any{{"id": "a", "name": "A"}, {"id": "a", "name": "B"}}}, Want: 422, Code: "invalid_card"})
	c.do(call{Who: "card-bot leaves out published", Method: "PUT", Path: "/v1/agents/me/a2a-card", Auth: bearer,
		Body: map[string]any{"description": "Forgot the switch."}, Want: 422, Code: "invalid_card", OffSpec: true})
	c.do(call{Who: "card-bot writes a description of 2001 characters", Method: "PUT", Path: "/v1/agents/me/a2a-card", Auth: bearer,
		Body: map[string]any{"published": true, "description": strings.Repeat("d", 2001)}, Want: 422, Code: "invalid_card", OffSpec: true})
	c.do(call{Who: "nobody signed in as an agent", Method: "GET", Path: "/v1/agents/me/a2a-card", Want: 401, Code: "missing_token", OffSpec: true})

	// ---- the account's card routes ----
	c.do(call{Who: "the admin creates the account cards@example.org", Method: "POST", Path: "/v1/admin/accounts", Auth: admin,
		Body: map[string]any{"email": "cards@example.org", "password": pw}, Want: 201})
	in := c.do(call{Who: "cards@example.org signs in", Method: "POST", Path: "/v1/account/session",
		Body: map[string]string{"email": "cards@example.org", "password": pw}, Want: 200})
	var cookie string
	for _, ck := range (&http.Response{Header: in.Header}).Cookies() {
		if ck.Name == "mesh_session" {
			cookie = ck.Value
		}
	}
	csrf := in.field("csrf_token")
	as := func(who, method, path string, body any, want int, code string) answer {
		return c.do(call{Who: who, Method: method, Path: path, Cookie: cookie, CSRF: csrf, Body: body, Want: want, Code: code})
	}
	as("the account creates its agent", "POST", "/v1/account/agents", map[string]string{"agent_id": "acct-card-bot", "name": "Account's bot"}, 201, "")
	as("the account publishes its agent's card", "PUT", "/v1/account/agents/acct-card-bot/a2a-card", card, 200, "")
	as("the account reads its agent's card", "GET", "/v1/account/agents/acct-card-bot/a2a-card", nil, 200, "")
	as("the account publishes another account's agent's card", "PUT", "/v1/account/agents/card-bot/a2a-card", card, 404, "agent_not_found")
	as("the account reads the card of an agent that does not exist", "GET", "/v1/account/agents/nobody-here/a2a-card", nil, 404, "agent_not_found")
	c.do(call{Who: "the account gives a skill an id with a space", Method: "PUT", Path: "/v1/account/agents/acct-card-bot/a2a-card", Cookie: cookie, CSRF: csrf,
		Body: map[string]any{"published": true, "skills": []map[string]any{{"id": "not valid", "name": "x"}}}, Want: 422, Code: "invalid_card", OffSpec: true})
	c.do(call{Who: "the account without its CSRF token", Method: "PUT", Path: "/v1/account/agents/acct-card-bot/a2a-card", Cookie: cookie,
		Body: card, Want: 403, Code: "csrf_token_invalid", OffSpec: true})
	c.do(call{Who: "nobody signed in to an account", Method: "GET", Path: "/v1/account/agents/acct-card-bot/a2a-card", Want: 401, Code: "not_signed_in", OffSpec: true})

	// ---- OAuth failures, last: they spend the address's failure budget ----
	wrong := url.Values{"grant_type": {"client_credentials"}, "client_id": {"card-bot"}, "client_secret": {key[:len(key)-4] + "AAAA"}}.Encode()
	c.do(call{Who: "a client with a wrong secret", Method: "POST", Path: oauthTokenPath, Body: wrong, ContentType: form, Want: 401, Code: "invalid_client"})
	c.do(call{Who: "a client with card-bot's key as another agent", Method: "POST", Path: oauthTokenPath,
		Body: url.Values{"grant_type": {"client_credentials"}, "client_id": {"acct-card-bot"}, "client_secret": {key}}.Encode(), ContentType: form, Want: 401, Code: "invalid_client"})
	c.do(call{Who: "someone guessing card-bot's secret", Method: "POST", Path: oauthTokenPath, Body: wrong, ContentType: form,
		Drain: 24, Want: 429, Code: "slow_down"})
	_ = db
}
