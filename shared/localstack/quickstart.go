package localstack

import (
	"fmt"
	"io"
	"strings"
)

// printQuickstart writes the credentials and a copy-paste quickstart to the
// terminal. This is the only place credentials are written, and it writes
// to the terminal only: never to the structured log.
func printQuickstart(w io.Writer, base string, s Secrets, creds *demoCreds, secretsPath string) {
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
	}
	line("  The admin, JWT and inbox master keys persist in %s (mode 0600) unless", secretsPath)
	line("  MESH_ADMIN_KEY / MESH_JWT_KEYS / MESH_INBOX_MASTER_KEY are set; API keys are never")
	line("  stored, so each start gives alice and bob a fresh one (older keys stay valid).")
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
	line("  # alice sends bob a message (202 {task_id, message_id}):")
	line(`  curl -s -X POST "$MESH_API_URL/v1/messages" -H "Authorization: Bearer $ALICE" \`)
	line(`       -H 'Content-Type: application/json' -d '{"to":"bob","parts":[{"kind":"text","text":"hello from curl"}]}'`)
	line("  # bob reads his inbox (long-polls up to 5 s):")
	line(`  curl -s "$MESH_API_URL/v1/inbox?after=0&wait=5" -H "Authorization: Bearer $BOB"`)
	line("  # run bob's agent host; it hands each message to the handler command:")
	line(`  MESH_API_URL=$MESH_API_URL MESH_API_KEY=$BOB_KEY go run ./cmd/meshd run -- cat`)
	line("  # routes: openapi.yaml; all settings: README.md")
	line(rule)
	_, _ = io.WriteString(w, b.String())
}
