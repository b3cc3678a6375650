package accounts

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// Key is one API key of an agent (never its secret).
type Key = api.AccountKey

// AgentView is one of the account's agents with what its owner watches.
type AgentView = api.AccountAgent

// MaxAgentsPage bounds one page of an account's agents: with heartbeat
// stats at their 8 KiB limit and 20 keys each, a page stays far inside a
// Lambda response.
const MaxAgentsPage = 50

// ListAgents returns a page of acc's agents by id, after the id after.
func (s *Service) ListAgents(ctx context.Context, acc Account, after string, limit int) ([]AgentView, string, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT a.agent_id, a.name, x.kind, a.status, a.last_heartbeat_at, x.friend_policy, x.same_account_auto, c.last_seq, a.stats
FROM agent_accounts x JOIN agents a ON a.agent_id = x.agent_id JOIN inbox_counters c ON c.recipient = a.agent_id
WHERE x.account_id = ? AND x.agent_id > ? ORDER BY x.agent_id LIMIT ?`, acc.AccountID, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	list := []AgentView{}
	for rows.Next() {
		var v AgentView
		var hb sql.NullTime
		var stats sql.NullString
		if err := rows.Scan(&v.AgentID, &v.Name, &v.Kind, &v.Status, &hb, &v.FriendPolicy, &v.SameAccountAuto, &v.LastSeq, &stats); err != nil {
			rows.Close()
			return nil, "", err
		}
		if hb.Valid {
			v.LastHeartbeatAt = &hb.Time
		}
		if stats.Valid && json.Valid([]byte(stats.String)) {
			v.Stats = json.RawMessage(stats.String)
			var st struct {
				LastSeq int64 `json:"last_seq"`
				Parked  int64 `json:"parked"`
			}
			_ = json.Unmarshal(v.Stats, &st)
			v.HandledSeq, v.Parked = st.LastSeq, st.Parked
		}
		v.InboxLag = max(v.LastSeq-v.HandledSeq, 0)
		list = append(list, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if len(list) > limit {
		list = list[:limit]
		next = list[len(list)-1].AgentID
	}
	for i := range list {
		v := &list[i]
		if err := s.DB.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM outbox_queue WHERE recipient = ?) + COALESCE(SUM(delivery = 'pending'), 0), COALESCE(SUM(delivery = 'failed'), 0)
FROM outbox_events WHERE delivery IN ('pending', 'failed') AND recipient = ?`, v.AgentID, v.AgentID).Scan(&v.Pending, &v.DeadLetters); err != nil {
			return nil, "", err
		}
		if v.Keys, err = s.keys(ctx, v.AgentID); err != nil {
			return nil, "", err
		}
	}
	return list, next, nil
}

// maxKeysShown bounds the keys listed per agent (the newest).
const maxKeysShown = 20

func (s *Service) keys(ctx context.Context, agentID string) ([]Key, error) {
	rows, err := s.DB.QueryContext(ctx, "SELECT key_id, created_at, revoked_at FROM api_keys WHERE agent_id = ? ORDER BY created_at DESC, key_id LIMIT ?", agentID, maxKeysShown)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Key{}
	for rows.Next() {
		var k Key
		var rv sql.NullTime
		if err := rows.Scan(&k.KeyID, &k.CreatedAt, &rv); err != nil {
			return nil, err
		}
		if rv.Valid {
			k.RevokedAt = &rv.Time
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// CreatedAgent is a new agent with its kind and first API key.
type CreatedAgent = api.AccountNewAgent

// CreateAgent creates an agent of kind owned by acc; its API key is in the
// answer only.
func (s *Service) CreateAgent(ctx context.Context, acc Account, agentID, name, kind string) (CreatedAgent, error) {
	if kind == "" {
		kind = identity.KindNormal
	}
	a, err := s.Identity.CreateAgentFor(actAs(ctx, acc), acc.AccountID, kind, agentID, name)
	if err != nil {
		return CreatedAgent{}, err
	}
	return CreatedAgent{AgentID: a.AgentID, Name: a.Name, Kind: a.Kind, KeyID: a.KeyID, APIKey: a.APIKey, KeyEpoch: a.KeyEpoch, CreatedAt: a.CreatedAt}, nil
}

// RotateKey issues a new key for one of acc's agents.
func (s *Service) RotateKey(ctx context.Context, acc Account, agentID string, opt identity.RotateOptions) (identity.RotatedKey, error) {
	if err := s.ownAgent(ctx, acc, agentID); err != nil {
		return identity.RotatedKey{}, err
	}
	return s.Identity.RotateKey(actAs(ctx, acc), agentID, opt)
}

// RevokeKey revokes a key of one of acc's agents.
func (s *Service) RevokeKey(ctx context.Context, acc Account, agentID, keyID string) (identity.RevokedKey, error) {
	if err := s.ownAgent(ctx, acc, agentID); err != nil {
		return identity.RevokedKey{}, err
	}
	return s.Identity.RevokeKey(actAs(ctx, acc), agentID, keyID)
}

// Drain marks one of acc's agents draining, as meshd's stop does.
func (s *Service) Drain(ctx context.Context, acc Account, agentID string) (string, error) {
	if err := s.ownAgent(ctx, acc, agentID); err != nil {
		return "", err
	}
	// GoOffline audits the drain in its own transaction, as the account.
	return s.Identity.GoOffline(actAs(ctx, acc), agentID, "")
}

// PolicyInput is the body of the policy route.
type PolicyInput = api.PolicyRequest

// SetPolicy sets how friend requests to one of acc's agents are decided.
func (s *Service) SetPolicy(ctx context.Context, acc Account, agentID string, in PolicyInput) (identity.AgentPolicy, error) {
	if in.FriendPolicy != identity.PolicyAgent && in.FriendPolicy != identity.PolicyAccount {
		return identity.AgentPolicy{}, mesh.Errorf(mesh.KindUnprocessable, "invalid_policy", "friend_policy must be agent or account")
	}
	if err := s.ownAgent(ctx, acc, agentID); err != nil {
		return identity.AgentPolicy{}, err
	}
	ctx = actAs(ctx, acc)
	var out identity.AgentPolicy
	err := s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE agent_accounts SET friend_policy = ?, same_account_auto = ? WHERE agent_id = ? AND account_id = ?",
			in.FriendPolicy, in.SameAccountAuto, agentID, acc.AccountID); err != nil {
			return err
		}
		var err error
		if out, err = identity.PolicyOf(ctx, tx, agentID); err != nil {
			return err
		}
		detail := "friend_policy " + in.FriendPolicy
		if in.SameAccountAuto {
			detail += ", same-account requests accepted at once"
		}
		return identity.Audit(ctx, tx, identity.Actor{}, s.now(), identity.AuditPolicyChanged, agentID, "", detail)
	})
	return out, err
}

// ListTasks pages through one of acc's agents' tasks, as the agent's own
// GET /v1/tasks does.
func (s *Service) ListTasks(ctx context.Context, acc Account, agentID string, q tasks.ListQuery) (tasks.ListResult, error) {
	if err := s.ownAgent(ctx, acc, agentID); err != nil {
		return tasks.ListResult{}, err
	}
	return s.Tasks.ListTasks(ctx, agentID, q)
}

// Timeline is one task of an agent with a page of its messages (status
// notes included) from after, and its recent artifacts: at most
// tasks.MaxMessagePageBytes and tasks.DetailArtifactBytes of JSON, which
// fit one Lambda response together.
type Timeline = api.Timeline

// GetTimeline returns the task taskID of one of acc's agents.
func (s *Service) GetTimeline(ctx context.Context, acc Account, agentID, taskID, after string, limit int) (Timeline, error) {
	if err := s.ownAgent(ctx, acc, agentID); err != nil {
		return Timeline{}, err
	}
	t, err := s.Tasks.GetTask(ctx, agentID, taskID)
	if err != nil {
		return Timeline{}, err
	}
	page, err := s.Tasks.ListMessages(ctx, agentID, taskID, after, limit)
	return Timeline{Task: t.Task, Messages: page, Artifacts: t.Artifacts, EarlierArtifacts: t.EarlierArtifacts}, err
}
