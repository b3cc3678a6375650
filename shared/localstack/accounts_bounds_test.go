package localstack_test

import (
	"encoding/json"
	"strings"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// The bounds of the account routes' lists (see bounds in bounds_test.go).
func init() {
	maxTask := tasks.Task{TaskID: maxID, ContextID: maxID, GroupID: maxID, Initiator: maxID, Recipient: maxID, Status: "input-required", CreatedAt: maxTime, UpdatedAt: maxTime}
	// Heartbeat stats at their limit, in a character JSON escapes.
	stats, _ := json.Marshal(map[string]string{"x": strings.Repeat("<", identity.MaxStatsBytes-8)})
	keys := make([]accounts.Key, 20)
	for i := range keys {
		keys[i] = accounts.Key{KeyID: strings.Repeat("k", 12), CreatedAt: maxTime, RevokedAt: &maxTime}
	}
	maxAgent := accounts.AgentView{AgentID: maxID, Name: maxName, Kind: "virtual-user", Status: "inactive", LastHeartbeatAt: &maxTime,
		FriendPolicy: "account", SameAccountAuto: true, LastSeq: 1 << 62, HandledSeq: 1 << 62, InboxLag: 1 << 62, Pending: 1 << 62,
		DeadLetters: 1 << 62, Parked: 1 << 62, Stats: stats, Keys: keys}
	other := maxID
	lastErr := strings.Repeat("<", 500)
	for route, b := range map[string]listBound{
		"GET /v1/account/agents":                      {count: accounts.MaxAgentsPage, item: maxAgent, also: map[string]string{"next_after": maxID}},
		"GET /v1/account/agents/{id}/tasks":           {count: tasks.MaxListLimit, item: maxTask, also: map[string]string{"next_cursor": strings.Repeat("a", 200)}},
		"GET /v1/account/agents/{id}/tasks/{task_id}": {pageBytes: tasks.MaxMessagePageBytes + tasks.DetailArtifactBytes, also: maxTask},
		"GET /v1/account/friend-requests":             {count: accounts.MaxRequestsPage, item: identity.FriendRequest{RequestID: "18446744073709551615", From: maxID, To: maxID, Status: "pending", CreatedAt: maxTime, DecidedAt: &maxTime}},
		"GET /v1/account/audit": {count: accounts.MaxAuditPage, item: accounts.AuditEntry{ID: "18446744073709551615", OccurredAt: maxTime,
			Actor: api.AuditActor{Kind: "account", ID: maxID}, Action: identity.AuditFriendshipRemoved, AgentID: maxID, OtherID: &other, Detail: strings.Repeat("<", 500)}},
		// 50 dead letters and 10 backlog rows.
		"GET /v1/account/outbox": {count: 60, item: accounts.DeadLetter{Recipient: maxID, Seq: 1 << 62, EventID: strings.Repeat("e", 40), Type: "artifact", LastError: &lastErr, FailedAt: maxTime}},
		// As the admin route: nothing caps an agent's live keys.
		"POST /v1/account/agents/{id}/keys": {count: 100000, item: strings.Repeat("k", 12), also: identity.RotatedKey{AgentID: maxID, KeyID: strings.Repeat("k", 12), APIKey: strings.Repeat("s", 128), CreatedAt: maxTime}},
		"POST /v1/account/outbox/redrive":   {count: accounts.MaxRedriveRecipients, item: maxID, also: accounts.Redriven{Requeued: 1 << 62}},
		"POST /v1/admin/outbox/redrive":     {count: accounts.MaxRedriveRecipients, item: maxID, also: accounts.Redriven{Requeued: 1 << 62}},
	} {
		bounds[route] = b
	}
}
