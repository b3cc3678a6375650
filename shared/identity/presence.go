package identity

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// Presence timing: meshd heartbeats every HeartbeatInterval; the scanner
// marks an agent inactive after PresenceTimeout without one (three missed
// beats).
const (
	HeartbeatInterval = 30 * time.Second
	PresenceTimeout   = 90 * time.Second
	// MaxStatsBytes caps the free-form stats object of a heartbeat.
	MaxStatsBytes = 8 << 10
	// scanBatch bounds the rows one scanner statement locks.
	scanBatch = 1000
)

// HeartbeatResult is the answer to a heartbeat.
type HeartbeatResult = api.HeartbeatResult

// validInstanceID accepts 1-128 visible ASCII characters.
func validInstanceID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// Heartbeat records that agentID's meshd instanceID is alive. It makes the
// agent active, except that the instance which went offline (DELETE
// /v1/agents/me/online) keeps the agent draining: only a new instance (a
// restarted meshd) revives it. stats, if given, must be a JSON object.
func (s *Service) Heartbeat(ctx context.Context, agentID, instanceID string, stats json.RawMessage) (HeartbeatResult, error) {
	if !validInstanceID(instanceID) {
		return HeartbeatResult{}, mesh.Errorf(mesh.KindUnprocessable, "invalid_instance_id", "instance_id must be 1-128 visible ASCII characters")
	}
	var statsArg any
	if st := bytes.TrimSpace(stats); len(st) > 0 && !bytes.Equal(st, []byte("null")) {
		// Invalid UTF-8 would fail the insert into the utf8mb4 column (a 5xx).
		if st[0] != '{' || !utf8.Valid(st) {
			return HeartbeatResult{}, mesh.Errorf(mesh.KindUnprocessable, "invalid_stats", "stats must be a JSON object")
		}
		if len(st) > MaxStatsBytes {
			return HeartbeatResult{}, mesh.Errorf(mesh.KindUnprocessable, "stats_too_large", "stats must be at most %d bytes", MaxStatsBytes)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, st); err != nil {
			return HeartbeatResult{}, mesh.Errorf(mesh.KindUnprocessable, "invalid_stats", "stats must be a JSON object")
		}
		statsArg = compact.String()
	}
	now := s.Now()
	var out HeartbeatResult
	err := s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if err := TakeRate(ctx, tx, agentID, now); err != nil {
			return err
		}
		// status is assigned before instance_id, so its CASE sees the
		// instance that drained (MySQL assigns left to right; MariaDB's
		// default does too, and both read the old row for status here).
		if _, err := tx.ExecContext(ctx, `UPDATE agents SET
  status = CASE WHEN status = 'draining' AND instance_id = ? THEN 'draining' ELSE 'active' END,
  instance_id = ?, last_heartbeat_at = ?, stats = COALESCE(?, stats)
WHERE agent_id = ?`, instanceID, instanceID, now, statsArg, agentID); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT a.status, a.key_epoch, c.last_seq
FROM agents a JOIN inbox_counters c ON c.recipient = a.agent_id WHERE a.agent_id = ?`, agentID).Scan(&out.Status, &out.KeyEpoch, &out.LastSeq)
	})
	return out, err
}

// GoOffline marks agentID draining: its meshd is stopping and will finish
// in-flight work, and peers see it is going away. The agent's current
// instance is remembered as the one that drained. If instanceID is given and
// is not the agent's current instance (a late stop from an instance that was
// already replaced), nothing changes. An inactive agent stays inactive.
func (s *Service) GoOffline(ctx context.Context, agentID, instanceID string) (string, error) {
	if instanceID != "" && !validInstanceID(instanceID) {
		return "", mesh.Errorf(mesh.KindUnprocessable, "invalid_instance_id", "instance_id must be 1-128 visible ASCII characters")
	}
	now := s.Now()
	var status string
	err := s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if err := TakeRate(ctx, tx, agentID, now); err != nil {
			return err
		}
		var current sql.NullString
		if err := tx.QueryRowContext(ctx, "SELECT status, instance_id FROM agents WHERE agent_id = ? FOR UPDATE", agentID).Scan(&status, &current); err != nil {
			return err
		}
		if status != mesh.PresenceActive || instanceID != "" && instanceID != current.String {
			return nil
		}
		status = mesh.PresenceDraining
		if _, err := tx.ExecContext(ctx, "UPDATE agents SET status = 'draining' WHERE agent_id = ?", agentID); err != nil {
			return err
		}
		// A drain by a person (an account) is audited with the change; the
		// agent's own goodbye at every meshd stop is not.
		if a := actorOr(ctx, Actor{}); a.Kind != "" {
			return Audit(ctx, tx, a, now, AuditAgentDrained, agentID, "", "status draining")
		}
		return nil
	})
	return status, err
}

// scanPresenceSQL is the scanner's statement. It is a range scan of the
// agents_presence (status, last_heartbeat_at) index: inactive agents, the
// bulk of the table, are never read. A heartbeat that commits first wins: the
// UPDATE re-checks last_heartbeat_at on the latest row version it locks.
const scanPresenceSQL = "UPDATE agents SET status = 'inactive' WHERE status IN ('active', 'draining') AND last_heartbeat_at < ? LIMIT 1000"

// MarkInactive turns agents without a heartbeat for PresenceTimeout inactive,
// in batches, and returns how many it changed.
func (s *Service) MarkInactive(ctx context.Context) (int64, error) {
	cutoff := s.Now().Add(-PresenceTimeout)
	var total int64
	for {
		res, err := s.DB.ExecContext(ctx, scanPresenceSQL, cutoff)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
		if n < scanBatch {
			return total, nil
		}
	}
}

// ScanPresence is the PresenceScannerFunction job.
func (s *Service) ScanPresence(ctx context.Context) error {
	_, err := s.MarkInactive(ctx)
	return err
}

// Me is the caller's own profile: presence plus what only it may see.
type Me = api.Me

// GetMe returns agentID's own profile.
func (s *Service) GetMe(ctx context.Context, agentID string) (Me, error) {
	if err := s.takeReadRate(ctx, agentID); err != nil {
		return Me{}, err
	}
	var m Me
	var hb sql.NullTime
	var inst, stats sql.NullString
	err := s.DB.QueryRowContext(ctx, `SELECT a.agent_id, a.name, a.status, a.last_heartbeat_at, a.instance_id, a.key_epoch, c.last_seq, a.stats, a.created_at
FROM agents a JOIN inbox_counters c ON c.recipient = a.agent_id WHERE a.agent_id = ?`, agentID).
		Scan(&m.AgentID, &m.Name, &m.Status, &hb, &inst, &m.KeyEpoch, &m.LastSeq, &stats, &m.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return m, errAgentNotFound
	}
	if err != nil {
		return m, err
	}
	m.LastHeartbeatAt = timePtr(hb)
	if inst.Valid {
		m.InstanceID = &inst.String
	}
	if stats.Valid {
		m.Stats = json.RawMessage(stats.String)
	}
	return m, nil
}

// AgentProfile is what another agent may see of an agent.
type AgentProfile = api.Agent

// GetAgent returns id's profile if caller may reach it (itself, a friend or a
// group mate). Anything else, existing or not, is the same 404, so the route
// does not reveal which agents exist.
func (s *Service) GetAgent(ctx context.Context, caller, id string) (AgentProfile, error) {
	if err := s.takeReadRate(ctx, caller); err != nil {
		return AgentProfile{}, err
	}
	var p AgentProfile
	if !mesh.ValidAgentID(id) {
		return p, errAgentNotFound
	}
	if id != caller {
		ok, err := CanCommunicate(ctx, s.DB, caller, id)
		if err != nil {
			return p, err
		}
		if !ok {
			return p, errAgentNotFound
		}
	}
	var hb sql.NullTime
	err := s.DB.QueryRowContext(ctx, "SELECT agent_id, name, status, last_heartbeat_at, created_at FROM agents WHERE agent_id = ?", id).
		Scan(&p.AgentID, &p.Name, &p.Status, &hb, &p.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return p, errAgentNotFound
	}
	p.LastHeartbeatAt = timePtr(hb)
	return p, err
}
