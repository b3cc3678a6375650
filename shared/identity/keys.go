package identity

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
	"strings"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// API keys look like "amk_<key_id>_<secret>": a 12-character key id (9 random
// bytes) that finds the row, and a 43-character secret (32 random bytes), both
// unpadded base64url. Only SHA-256 of the secret is stored (the secret has 256
// bits of entropy, so a slow hash would add nothing), and the comparison is
// constant-time. The key id may itself contain '_', so the key is split by
// position, not by separator.
const (
	apiKeyPrefix    = "amk_"
	apiKeyIDLen     = 12
	apiKeySecretLen = 43
)

// NewAPIKey mints a key id, the full key to show once, and the stored hash.
func NewAPIKey() (keyID, key string, hash []byte) {
	idb := make([]byte, 9)
	sec := make([]byte, 32)
	_, _ = rand.Read(idb)
	_, _ = rand.Read(sec)
	keyID = base64.RawURLEncoding.EncodeToString(idb)
	secret := base64.RawURLEncoding.EncodeToString(sec)
	h := sha256.Sum256([]byte(secret))
	return keyID, apiKeyPrefix + keyID + "_" + secret, h[:]
}

// parseAPIKey splits a key into id and secret hash; ok is false if malformed.
func parseAPIKey(key string) (keyID string, hash []byte, ok bool) {
	rest, found := strings.CutPrefix(key, apiKeyPrefix)
	if !found || len(rest) != apiKeyIDLen+1+apiKeySecretLen || rest[apiKeyIDLen] != '_' {
		return "", nil, false
	}
	keyID, secret := rest[:apiKeyIDLen], rest[apiKeyIDLen+1:]
	if !isBase64URL(keyID) || !isBase64URL(secret) {
		return "", nil, false
	}
	h := sha256.Sum256([]byte(secret))
	return keyID, h[:], true
}

func isBase64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// validKeyID reports whether id has the shape of a key id (path parameter).
func validKeyID(id string) bool { return len(id) == apiKeyIDLen && isBase64URL(id) }

// reservedAgentID cannot be registered: GET /v1/agents/me is the caller's own
// profile, so an agent called "me" could never be looked up by others.
const reservedAgentID = "me"

// DeletedAgentID stands for a deleted agent in the history its other
// parties keep (package tasks rewrites the deleted id into it): it cannot
// be registered, so nobody can ever act as it.
const DeletedAgentID = "deleted"

// NewAgent is the answer to creating an agent: its first API key, shown once.
type NewAgent struct {
	api.NewAgent
	// Kind is the agent's kind; it is not part of the operator's answer.
	Kind string `json:"-"`
}

// CreateAgent registers an agent and returns its first API key (shown once).
// The agent's counter and rate-limit rows are created with it, so writers
// only ever UPDATE them (locks on existing rows, in a fixed order).
func (s *Service) CreateAgent(ctx context.Context, agentID, name string) (keyID, apiKey string, err error) {
	a, err := s.createAgent(ctx, agentID, name)
	return a.KeyID, a.APIKey, err
}

func (s *Service) createAgent(ctx context.Context, agentID, name string) (NewAgent, error) {
	return s.CreateAgentFor(ctx, OperatorAccount, KindNormal, agentID, name)
}

// CreateAgentFor registers an agent of kind (KindNormal or KindVirtualUser)
// owned by accountID and returns its first API key (shown once). The admin
// routes create the operator account's agents; accounts create their own.
func (s *Service) CreateAgentFor(ctx context.Context, accountID, kind, agentID, name string) (NewAgent, error) {
	if kind != KindNormal && kind != KindVirtualUser {
		return NewAgent{}, mesh.Errorf(mesh.KindUnprocessable, "invalid_kind", "kind must be %s or %s", KindNormal, KindVirtualUser)
	}
	if !mesh.ValidAgentID(agentID) {
		return NewAgent{}, errInvalidAgentID("agent_id")
	}
	if agentID == reservedAgentID {
		return NewAgent{}, mesh.Errorf(mesh.KindUnprocessable, "reserved_agent_id", "agent_id %q is reserved: /v1/agents/me names the caller", reservedAgentID)
	}
	if agentID == DeletedAgentID {
		return NewAgent{}, mesh.Errorf(mesh.KindUnprocessable, "reserved_agent_id", "agent_id %q is reserved: it stands for deleted agents", DeletedAgentID)
	}
	if name == "" {
		name = agentID
	}
	if err := validName(name); err != nil {
		return NewAgent{}, err
	}
	keyID, apiKey, hash := NewAPIKey()
	now := s.Now()
	err := s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO agents (agent_id, name, status, created_at) VALUES (?, ?, 'inactive', ?)", agentID, name, now); err != nil {
			if mysql.IsDuplicate(err) {
				return mesh.Errorf(mesh.KindConflict, "agent_exists", "agent %q already exists", agentID)
			}
			return err
		}
		// Read after the INSERT, which waited for a deletion of the same id
		// holding its row: this snapshot sees that deletion's audit row.
		if err := checkNotRetired(ctx, tx, agentID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO api_keys (key_id, agent_id, secret_hash, created_at) VALUES (?, ?, ?, ?)", keyID, agentID, hash, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO inbox_counters (recipient, last_seq) VALUES (?, 0)", agentID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO rate_limits (agent_id, tat_us) VALUES (?, 0)", agentID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO agent_accounts (agent_id, account_id, kind, friend_policy, same_account_auto) VALUES (?, ?, ?, ?, 0)",
			agentID, accountID, kind, PolicyAgent); err != nil {
			return err
		}
		return Audit(ctx, tx, AdminActor, now, AuditAgentCreated, agentID, "", auditDetail("kind %s, account %s, key %s", kind, accountID, keyID))
	})
	if err != nil {
		return NewAgent{}, err
	}
	return NewAgent{NewAgent: api.NewAgent{AgentID: agentID, Name: name, KeyID: keyID, APIKey: apiKey, KeyEpoch: 1, CreatedAt: now}, Kind: kind}, nil
}

// checkNotRetired refuses an id whose deletion the audit log still
// records: the audit log keeps the deleted agent's history under its id,
// and a new agent must not inherit it. Once the log's retention has
// dropped the deletion (its newest row), nothing names the id and it is
// free again.
func checkNotRetired(ctx context.Context, q Querier, agentID string) error {
	var n int
	if err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM audit_log WHERE agent_id = ? AND action = ?", agentID, AuditAgentDeleted).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return mesh.Errorf(mesh.KindConflict, "agent_id_retired", "agent %q was deleted; its id is not given out again while the audit log holds its history", agentID)
	}
	return nil
}

// RotateOptions are the optional parts of a key rotation.
type RotateOptions = api.RotateKeyRequest

// RotatedKey is the answer to a rotation: the new key, shown once.
type RotatedKey = api.RotatedKey

// RotateKey issues a new API key for agentID.
func (s *Service) RotateKey(ctx context.Context, agentID string, opt RotateOptions) (RotatedKey, error) {
	if !mesh.ValidAgentID(agentID) {
		return RotatedKey{}, errAgentNotFound
	}
	keyID, apiKey, hash := NewAPIKey()
	now := s.Now()
	out := RotatedKey{AgentID: agentID, KeyID: keyID, APIKey: apiKey, CreatedAt: now}
	err := s.DB.InTx(ctx, func(tx *sql.Tx) error {
		out.RevokedKeyIDs = []string{}
		// Locking the agent row serialises rotations of one agent.
		err := tx.QueryRowContext(ctx, "SELECT key_epoch FROM agents WHERE agent_id = ? FOR UPDATE", agentID).Scan(&out.KeyEpoch)
		if errors.Is(err, sql.ErrNoRows) {
			return errAgentNotFound
		}
		if err != nil {
			return err
		}
		if opt.RevokeExisting {
			rows, err := tx.QueryContext(ctx, "SELECT key_id FROM api_keys WHERE agent_id = ? AND revoked_at IS NULL ORDER BY key_id FOR UPDATE", agentID)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				out.RevokedKeyIDs = append(out.RevokedKeyIDs, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "UPDATE api_keys SET revoked_at = ? WHERE agent_id = ? AND revoked_at IS NULL", now, agentID); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO api_keys (key_id, agent_id, secret_hash, created_at) VALUES (?, ?, ?, ?)", keyID, agentID, hash, now); err != nil {
			return err
		}
		if opt.RotateInboxKey || len(out.RevokedKeyIDs) > 0 {
			if err := bumpEpoch(ctx, tx, agentID); err != nil {
				return err
			}
			out.KeyEpoch++
		}
		return Audit(ctx, tx, AdminActor, now, AuditKeyRotated, agentID, "", auditDetail("new key %s, revoked %v", keyID, out.RevokedKeyIDs))
	})
	if err == nil {
		s.keysRevoked(ctx, out.RevokedKeyIDs)
	}
	return out, err
}

// bumpEpoch retires the agent's current inbox key: events appended after
// this commit are sealed under the next epoch (outbox.Append reads key_epoch
// with a shared lock, so none slips through under the old one).
func bumpEpoch(ctx context.Context, tx *sql.Tx, agentID string) error {
	_, err := tx.ExecContext(ctx, "UPDATE agents SET key_epoch = key_epoch + 1 WHERE agent_id = ?", agentID)
	return err
}

// RevokedKey is the answer to a revocation.
type RevokedKey = api.RevokedKey

// RevokeKey revokes one key of agentID. Tokens minted from it stop working at
// once (AuthenticateAgent checks the key on every request), and the agent's
// inbox key epoch is bumped: an inbox key handed out with the revoked key
// opens nothing written afterwards. Revoking a revoked key is a no-op that
// reports the original time.
func (s *Service) RevokeKey(ctx context.Context, agentID, keyID string) (RevokedKey, error) {
	notFound := mesh.Errorf(mesh.KindNotFound, "key_not_found", "agent has no key with that id")
	if !mesh.ValidAgentID(agentID) || !validKeyID(keyID) {
		return RevokedKey{}, notFound
	}
	out := RevokedKey{AgentID: agentID, KeyID: keyID}
	var revokedNow bool
	err := s.DB.InTx(ctx, func(tx *sql.Tx) error {
		revokedNow = false // a retried transaction starts over
		// The agents row first, as RotateKey locks it: one lock order.
		err := tx.QueryRowContext(ctx, "SELECT key_epoch FROM agents WHERE agent_id = ? FOR UPDATE", agentID).Scan(&out.KeyEpoch)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound
		}
		if err != nil {
			return err
		}
		var revoked sql.NullTime
		err = tx.QueryRowContext(ctx, "SELECT revoked_at FROM api_keys WHERE key_id = ? AND agent_id = ? FOR UPDATE", keyID, agentID).Scan(&revoked)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound
		}
		if err != nil {
			return err
		}
		if revoked.Valid {
			out.RevokedAt = revoked.Time
			return nil
		}
		out.RevokedAt = s.Now()
		if _, err = tx.ExecContext(ctx, "UPDATE api_keys SET revoked_at = ? WHERE key_id = ?", out.RevokedAt, keyID); err != nil {
			return err
		}
		out.KeyEpoch++
		if err := bumpEpoch(ctx, tx, agentID); err != nil {
			return err
		}
		revokedNow = true
		return Audit(ctx, tx, AdminActor, out.RevokedAt, AuditKeyRevoked, agentID, "", auditDetail("key %s", keyID))
	})
	if err == nil && revokedNow {
		s.keysRevoked(ctx, []string{keyID})
	}
	return out, err
}
