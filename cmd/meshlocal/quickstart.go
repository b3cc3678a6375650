package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/agentmesh/agentmesh/shared/localstack"
)

// printQuickstart writes the credentials and a copy-paste quickstart to the
// terminal. This is the only place credentials are written, and it writes
// to the terminal only: never to the structured log.
func printQuickstart(w io.Writer, base, a2aBase string, s localstack.Secrets, creds *demoCreds, secretsPath string) {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	rule := strings.Repeat("─", 78)
	line("")
	line(rule)
	line("Credentials (printed here only; never logged)")
	line("  admin key      %s", s.AdminKey)
	if creds != nil {
		line("  alice API key  %s", creds.Keys["alice"])
		line("  bob API key    %s", creds.Keys["bob"])
		line("  console        %s/console  (sign in as %s, password %s)", base, creds.AccountEmail, creds.AccountPassword)
	}
	line("  Kept in %s (mode 0600): the admin, JWT and inbox", secretsPath)
	line("  master keys, unless MESH_ADMIN_KEY, MESH_JWT_KEYS or MESH_INBOX_MASTER_KEY is set.")
	line("  alice's and bob's API keys are kept in %s (mode 0600)", filepath.Join(filepath.Dir(secretsPath), demoKeysFile))
	line("  and printed again at each start, so exported keys and MCP configs keep working.")
	line("")
	line("A2A 1.0 (for agents that publish their card: PUT /v1/agents/me/a2a-card)")
	line("  endpoint  %s/a2a/agents/<agent_id>", a2aBase)
	line("  card      %s/a2a/agents/<agent_id>/.well-known/agent-card.json", a2aBase)
	line("  OAuth     %s/v1/oauth/token  (client_id = agent id, client_secret = its API key)", base)
	line("")
	line("Quickstart (copy-paste into another terminal):")
	line("  export MESH_API_URL=%s", base)
	line("  export MESH_ADMIN_KEY='%s'", s.AdminKey)
	if creds != nil {
		line("  export ALICE_KEY='%s' BOB_KEY='%s'", creds.Keys["alice"], creds.Keys["bob"])
	} else {
		line("  # create an agent first (prints its api_key once):")
		line(`  curl -s -X POST "$MESH_API_URL/v1/admin/agents" -H "Authorization: Bearer $MESH_ADMIN_KEY" \`)
		line(`       -H 'Content-Type: application/json' -d '{"agent_id":"alice","name":"Alice"}'`)
		line("  export ALICE_KEY=<api_key from above> BOB_KEY=<another agent's key>")
	}
	line("  token() { curl -s -X POST \"$MESH_API_URL/v1/auth/token\" -H 'Content-Type: application/json' \\")
	line(`      -d "{\"api_key\":\"$1\"}" | sed -E 's/.*"token":"([^"]+)".*/\1/'; }`)
	line(`  ALICE=$(token "$ALICE_KEY"); BOB=$(token "$BOB_KEY")`)
	line("  # alice sends bob a message (202 {task_id, message_id, ...}); bob's demo meshd,")
	line("  # inside meshlocal, prints it and replies in the meshlocal terminal:")
	line(`  curl -s -X POST "$MESH_API_URL/v1/messages" -H "Authorization: Bearer $ALICE" \`)
	line(`       -H 'Content-Type: application/json' -d '{"to":"bob","parts":[{"kind":"text","text":"hello from curl"}]}'; echo`)
	line("  # bob's inbox, straight from the database (long-polls up to 5 s when empty):")
	line(`  curl -s "$MESH_API_URL/v1/inbox?after=0&wait=5" -H "Authorization: Bearer $BOB"; echo`)
	line("  # your own agent host: an agent carol (created, or given a new key when she exists),")
	line("  # friends with alice, running meshd with a handler that gets each event as JSON on stdin:")
	line(`  key() { sed -nE 's/.*"api_key":"([^"]+)".*/\1/p'; }`)
	line(`  CAROL_KEY=$(curl -s -X POST "$MESH_API_URL/v1/admin/agents" -H "Authorization: Bearer $MESH_ADMIN_KEY" \`)
	line(`       -H 'Content-Type: application/json' -d '{"agent_id":"carol"}' | key)`)
	line(`  [ -n "$CAROL_KEY" ] || CAROL_KEY=$(curl -s -X POST "$MESH_API_URL/v1/admin/agents/carol/keys" \`)
	line(`       -H "Authorization: Bearer $MESH_ADMIN_KEY" -H 'Content-Type: application/json' -d '{"revoke_existing":true}' | key)`)
	line(`  curl -s -X POST "$MESH_API_URL/v1/admin/friendships" -H "Authorization: Bearer $MESH_ADMIN_KEY" \`)
	line(`       -H 'Content-Type: application/json' -d '{"a":"alice","b":"carol"}'; echo`)
	line(`  MESH_API_KEY=$CAROL_KEY MESH_STATE_DIR=.local/carol go run ./cmd/meshd run -- cat &`)
	line(`  MESH_API_KEY=$ALICE_KEY go run ./cmd/meshd send --to carol "hello carol"`)
	line("  # routes: openapi.yaml; all settings: README.md")
	line(rule)
	_, _ = io.WriteString(w, b.String())
}
