// Package queries is a fixture for the SQL grammar test's collector: every
// shape of SQL string the project writes, and strings that only look like it.
package queries

import (
	"context"
	"database/sql"
	"strings"
)

const agentColumns = "agent_id, name"

const selectAgent = "SELECT " + agentColumns + " FROM agents WHERE agent_id = ?"

func queries(ctx context.Context, db *sql.DB, ids []string) {
	_, _ = db.ExecContext(ctx, "UPDATE agents SET name = ? WHERE agent_id = ?", "n", "a")
	_, _ = db.QueryContext(ctx, `SELECT agent_id
FROM agents
WHERE status = ?
ORDER BY agent_id`, "active")
	in := strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",")
	_, _ = db.QueryContext(ctx, "SELECT agent_id FROM agents WHERE agent_id IN ("+in+") FOR UPDATE")
	_, _ = db.ExecContext(ctx, "DROP DATABASE "+ids[0])
	_ = db.QueryRowContext(ctx, "select count(*) from agents")
	_ = db.QueryRow(selectAgent, "a")
	_ = []string{
		"Update the agent when its name changes",
		"DELETE /v1/friends/{id}",
		"SELECT",
		"SETTINGS are read at start",
	}
}
