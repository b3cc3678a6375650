package localstack_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/agentmesh/agentmesh/shared/mysql"
)

// The console's pages and assets are text: validated as strings.
func init() {
	text := func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(body)
		return string(b), err
	}
	for _, ct := range []string{"text/html", "text/css", "text/javascript"} {
		openapi3filter.RegisterBodyDecoder(ct, text)
	}
}

// runAccountScenario hits every account route, the operator's account and
// redrive routes and the console with successes and errors.
func runAccountScenario(t *testing.T, c *conformance, adminKey string, db *mysql.DB) {
	admin := "Bearer " + adminKey
	pw := "correct horse battery"

	// ---- admin: accounts ----
	for _, a := range []struct {
		email    string
		operator bool
	}{{"ada@example.org", false}, {"ops@example.org", true}, {"busy@example.org", false}} {
		c.do(call{Who: "the admin creates the account " + a.email, Method: "POST", Path: "/v1/admin/accounts", Auth: admin,
			Body: map[string]any{"email": a.email, "password": pw, "name": "Account " + a.email, "operator": a.operator}, Want: 201})
	}
	c.do(call{Who: "the admin creates ada's account twice", Method: "POST", Path: "/v1/admin/accounts", Auth: admin,
		Body: map[string]any{"email": "ADA@example.org", "password": pw}, Want: 409, Code: "account_exists"})
	c.do(call{Who: "the admin gives an account no valid email", Method: "POST", Path: "/v1/admin/accounts", Auth: admin,
		Body: map[string]any{"email": "nobody", "password": pw}, Want: 422, Code: "invalid_email"})
	c.do(call{Who: "the admin gives an account a short password", Method: "POST", Path: "/v1/admin/accounts", Auth: admin,
		Body: map[string]any{"email": "short@example.org", "password": "short"}, Want: 422, Code: "invalid_password", OffSpec: true})

	// ---- sessions ----
	signIn := func(email string) (cookie, csrf, accountID string) {
		a := c.do(call{Who: email + " signs in", Method: "POST", Path: "/v1/account/session",
			Body: map[string]string{"email": email, "password": pw}, Want: 200})
		for _, ck := range (&http.Response{Header: a.Header}).Cookies() {
			if ck.Name == "mesh_session" {
				cookie = ck.Value
			}
		}
		var body struct {
			CSRF    string `json:"csrf_token"`
			Account struct {
				ID string `json:"account_id"`
			} `json:"account"`
		}
		_ = json.Unmarshal(a.Body, &body)
		if cookie == "" || body.CSRF == "" {
			t.Fatalf("%s signed in without a cookie or CSRF token: %v %s", email, a.Header, a.Body)
		}
		return cookie, body.CSRF, body.Account.ID
	}
	ada, adaCSRF, _ := signIn("ada@example.org")
	ops, opsCSRF, _ := signIn("ops@example.org")
	busy, _, busyID := signIn("busy@example.org")
	c.do(call{Who: "a wrong password", Method: "POST", Path: "/v1/account/session",
		Body: map[string]string{"email": "ada@example.org", "password": "wrong horse battery"}, Want: 401, Code: "invalid_credentials"})

	// ---- the account's agents ----
	as := func(who, method, path string, body any, want int, code string) answer {
		return c.do(call{Who: who, Method: method, Path: path, Cookie: ada, CSRF: adaCSRF, Body: body, Want: want, Code: code})
	}
	as("ada lists her agents", "GET", "/v1/account/agents", nil, 200, "")
	c.do(call{Who: "ada asks for 0 agents", Method: "GET", Path: "/v1/account/agents?limit=0", Cookie: ada, Want: 400, Code: "invalid_parameter", OffSpec: true})
	c.do(call{Who: "nobody signed in", Method: "GET", Path: "/v1/account/agents", Want: 401, Code: "not_signed_in", OffSpec: true})
	bot := as("ada creates ada-bot", "POST", "/v1/account/agents", map[string]string{"agent_id": "ada-bot", "name": "Ada's bot"}, 201, "")
	helper := as("ada creates a virtual user", "POST", "/v1/account/agents", map[string]string{"agent_id": "ada-helper", "kind": "virtual-user"}, 201, "")
	third := as("ada creates a third agent", "POST", "/v1/account/agents", map[string]string{"agent_id": "ada-third"}, 201, "")
	as("ada creates ada-bot twice", "POST", "/v1/account/agents", map[string]string{"agent_id": "ada-bot"}, 409, "agent_exists")
	c.do(call{Who: "ada asks for a kind that does not exist", Method: "POST", Path: "/v1/account/agents", Cookie: ada, CSRF: adaCSRF,
		Body: map[string]string{"agent_id": "ada-x", "kind": "robot"}, Want: 422, Code: "invalid_kind", OffSpec: true})
	c.do(call{Who: "ada without her CSRF token", Method: "POST", Path: "/v1/account/agents", Cookie: ada,
		Body: map[string]string{"agent_id": "ada-y"}, Want: 403, Code: "csrf_token_invalid", OffSpec: true})
	as("ada lists her agents again", "GET", "/v1/account/agents?limit=2", nil, 200, "")

	rot := as("ada issues ada-bot a new key", "POST", "/v1/account/agents/ada-bot/keys", nil, 201, "")
	as("ada adds a key to an agent that is not hers", "POST", "/v1/account/agents/alice/keys", map[string]bool{}, 404, "agent_not_found")
	as("ada revokes ada-bot's first key", "DELETE", "/v1/account/agents/ada-bot/keys/"+bot.field("key_id"), nil, 200, "")
	as("ada revokes a key ada-bot never had", "DELETE", "/v1/account/agents/ada-bot/keys/AAAAAAAAAAAA", nil, 404, "key_not_found")
	as("ada drains ada-bot", "POST", "/v1/account/agents/ada-bot/drain", nil, 200, "")
	as("ada drains alice", "POST", "/v1/account/agents/alice/drain", nil, 404, "agent_not_found")
	as("ada has ada-bot's friend requests approved by her", "PUT", "/v1/account/agents/ada-bot/policy", map[string]any{"friend_policy": "account"}, 200, "")
	as("ada sets alice's policy", "PUT", "/v1/account/agents/alice/policy", map[string]any{"friend_policy": "account"}, 404, "agent_not_found")
	c.do(call{Who: "ada names a policy that does not exist", Method: "PUT", Path: "/v1/account/agents/ada-bot/policy", Cookie: ada, CSRF: adaCSRF,
		Body: map[string]any{"friend_policy": "anyone"}, Want: 422, Code: "invalid_policy", OffSpec: true})

	// ---- tasks and friend requests of her agents ----
	token := func(apiKey string) string {
		return "Bearer " + c.do(call{Who: "an agent of ada exchanges its key", Method: "POST", Path: "/v1/auth/token",
			Body: map[string]string{"api_key": apiKey}, Want: 200}).field("token")
	}
	botTok, helperTok, thirdTok := token(rot.field("api_key")), token(helper.field("api_key")), token(third.field("api_key"))
	c.do(call{Who: "the admin befriends ada-bot and ada-helper", Method: "POST", Path: "/v1/admin/friendships", Auth: admin,
		Body: map[string]string{"a": "ada-bot", "b": "ada-helper"}, Want: 201})
	sent := c.do(call{Who: "ada-helper writes to ada-bot", Method: "POST", Path: "/v1/messages", Auth: helperTok,
		Body: map[string]any{"to": "ada-bot", "parts": []map[string]any{{"kind": "text", "text": "hello bot"}}}, Want: 202})
	_ = botTok
	as("ada lists ada-bot's tasks", "GET", "/v1/account/agents/ada-bot/tasks?limit=5", nil, 200, "")
	as("ada lists alice's tasks", "GET", "/v1/account/agents/alice/tasks", nil, 404, "agent_not_found")
	as("ada reads the task's timeline", "GET", "/v1/account/agents/ada-bot/tasks/"+sent.field("task_id"), nil, 200, "")
	as("ada reads a task that does not exist", "GET", "/v1/account/agents/ada-bot/tasks/no-such-task", nil, 404, "task_not_found")
	req := c.do(call{Who: "ada-third asks ada-bot to be friends", Method: "POST", Path: "/v1/friends/requests", Auth: thirdTok,
		Body: map[string]string{"to": "ada-bot"}, Want: 201})
	c.do(call{Who: "ada-bot accepts it itself", Method: "POST", Path: "/v1/friends/requests/" + req.field("request_id") + "/accept", Auth: botTok,
		Want: 403, Code: "account_approval_required"})
	as("ada lists the requests to her agents", "GET", "/v1/account/friend-requests", nil, 200, "")
	c.do(call{Who: "ada pages with a cursor that is no number", Method: "GET", Path: "/v1/account/friend-requests?after=x", Cookie: ada, Want: 400, Code: "invalid_parameter", OffSpec: true})
	as("ada approves it", "POST", "/v1/account/friend-requests/"+req.field("request_id"), map[string]string{"decision": "accept"}, 200, "")
	as("ada rejects it after approving it", "POST", "/v1/account/friend-requests/"+req.field("request_id"), map[string]string{"decision": "reject"}, 409, "request_not_pending")
	as("ada decides a request to nobody of hers", "POST", "/v1/account/friend-requests/999999", map[string]string{"decision": "accept"}, 404, "request_not_found")
	c.do(call{Who: "ada decides neither way", Method: "POST", Path: "/v1/account/friend-requests/" + req.field("request_id"), Cookie: ada, CSRF: adaCSRF,
		Body: map[string]string{"decision": "maybe"}, Want: 422, Code: "invalid_decision", OffSpec: true})
	as("ada reads her audit log", "GET", "/v1/account/audit?limit=5", nil, 200, "")
	c.do(call{Who: "ada pages the audit log with a bad cursor", Method: "GET", Path: "/v1/account/audit?before=-1", Cookie: ada, Want: 400, Code: "invalid_parameter", OffSpec: true})

	// ---- the operator's outbox ----
	as("ada looks at the outbox", "GET", "/v1/account/outbox", nil, 403, "operator_only")
	c.do(call{Who: "the operator looks at the outbox", Method: "GET", Path: "/v1/account/outbox", Cookie: ops, Want: 200})
	if _, err := db.Exec("DELETE FROM outbox_queue WHERE recipient = 'ada-bot'"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE outbox_events SET delivery = 'failed', last_error = 'test', sent_at = UTC_TIMESTAMP(6) WHERE recipient = 'ada-bot'"); err != nil {
		t.Fatal(err)
	}
	as("ada redrives", "POST", "/v1/account/outbox/redrive", map[string]string{}, 403, "operator_only")
	c.do(call{Who: "the operator redrives ada-bot's dead letters", Method: "POST", Path: "/v1/account/outbox/redrive", Cookie: ops, CSRF: opsCSRF,
		Body: map[string]string{"recipient": "ada-bot"}, Want: 200})
	c.do(call{Who: "the operator names no agent", Method: "POST", Path: "/v1/account/outbox/redrive", Cookie: ops, CSRF: opsCSRF,
		Body: map[string]string{"recipient": "no agent"}, Want: 422, Code: "invalid_recipient", OffSpec: true})
	c.do(call{Who: "the admin redrives every dead letter", Method: "POST", Path: "/v1/admin/outbox/redrive", Auth: admin, Want: 200})
	c.do(call{Who: "the admin redrives with a wrong key", Method: "POST", Path: "/v1/admin/outbox/redrive", Auth: "Bearer not-the-key", Want: 401, Code: "invalid_admin_key"})

	// ---- the console ----
	c.do(call{Who: "anyone opens the sign-in page", Method: "GET", Path: "/console/signin", Want: 200})
	c.do(call{Who: "a signed-out visitor", Method: "GET", Path: "/console", Want: 303})
	c.do(call{Who: "ada opens the console", Method: "GET", Path: "/console", Cookie: ada, Want: 200})
	for _, page := range []string{"agents", "requests", "friends", "groups", "audit"} {
		c.do(call{Who: "ada opens " + page, Method: "GET", Path: "/console/" + page, Cookie: ada, Want: 200})
	}
	c.do(call{Who: "the operator opens the outbox", Method: "GET", Path: "/console/outbox", Cookie: ops, Want: 200})
	c.do(call{Who: "ada opens the outbox", Method: "GET", Path: "/console/outbox", Cookie: ada, Want: 403})
	c.do(call{Who: "ada opens a page that does not exist", Method: "GET", Path: "/console/nope", Cookie: ada, Want: 404})
	// Busy's budget is spent (set, not drained: draining races the refill
	// on a loaded machine).
	if _, err := db.Exec("UPDATE rate_limits SET tat_us = ? WHERE agent_id = ?", time.Now().Add(time.Hour).UnixMicro(), "account:"+busyID); err != nil {
		t.Fatal(err)
	}
	c.do(call{Who: "busy, past the account's budget", Method: "GET", Path: "/console", Cookie: busy, Want: 429})

	// ---- deletion ----
	as("ada deletes ada-third", "DELETE", "/v1/account/agents/ada-third", nil, 204, "")
	as("ada deletes ada-third again", "DELETE", "/v1/account/agents/ada-third", nil, 204, "")
	as("ada deletes alice, not hers", "DELETE", "/v1/account/agents/alice", nil, 404, "agent_not_found")
	as("ada registers ada-third again", "POST", "/v1/account/agents", map[string]string{"agent_id": "ada-third"}, 409, "agent_id_retired")
	c.do(call{Who: "the admin deletes ada-helper", Method: "DELETE", Path: "/v1/admin/agents/ada-helper", Auth: admin, Want: 204})
	c.do(call{Who: "the admin deletes an agent that never was", Method: "DELETE", Path: "/v1/admin/agents/never-was", Auth: admin, Want: 404, Code: "agent_not_found"})
	c.do(call{Who: "the admin deletes with a wrong key", Method: "DELETE", Path: "/v1/admin/agents/ada-bot", Auth: "Bearer not-the-key", Want: 401, Code: "invalid_admin_key"})
	as("ada deletes her account with ada-bot left", "DELETE", "/v1/account", nil, 409, "account_has_agents")
	c.do(call{Who: "ada says with_agents=maybe", Method: "DELETE", Path: "/v1/account?with_agents=maybe", Cookie: ada, CSRF: adaCSRF, Want: 400, Code: "invalid_parameter", OffSpec: true})

	// ---- signing out, and sign-in failures past their budget ----
	c.do(call{Who: "ada signs out", Method: "DELETE", Path: "/v1/account/session", Cookie: ada, CSRF: adaCSRF, Want: 204})
	c.do(call{Who: "ada signs out again", Method: "DELETE", Path: "/v1/account/session", Cookie: ada, CSRF: adaCSRF, Want: 401, Code: "not_signed_in"})
	gone, goneCSRF, _ := signIn("ada@example.org")
	c.do(call{Who: "ada deletes her account with her agents", Method: "DELETE", Path: "/v1/account?with_agents=true", Cookie: gone, CSRF: goneCSRF, Want: 204})
	c.do(call{Who: "ada deletes her account again", Method: "DELETE", Path: "/v1/account", Cookie: gone, CSRF: goneCSRF, Want: 401, Code: "not_signed_in"})
	c.do(call{Who: "someone guessing ops's password", Method: "POST", Path: "/v1/account/session",
		Body: map[string]string{"email": "ops@example.org", "password": strings.Repeat("x", 12)}, Drain: 20, Want: 429, Code: "rate_limited"})
}
