// Package identity provides agents, API keys, tokens, the authenticator used
// by every HTTP function, presence, the social graph (friends and groups),
// the canCommunicate rule and the per-agent rate limit.
package identity

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// Querier is satisfied by *sql.DB, *sql.Tx and *sql.Conn.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// KafkaInfo tells meshd where its inbox is.
type KafkaInfo struct {
	Brokers []string `json:"brokers"`
	Topic   string   `json:"topic"`
	Auth    string   `json:"auth"`
}

// Service implements identity on MySQL.
type Service struct {
	DB       *mysql.DB
	Clock    mesh.Clock
	AdminKey string
	JWTKeys  []config.JWTKey
	TokenTTL time.Duration
	Sealer   *seal.Sealer
	Kafka    KafkaInfo
}

// New builds the service from configuration.
func New(db *mysql.DB, cfg config.Config) (*Service, error) {
	if err := cfg.Require("MESH_ADMIN_KEY", "MESH_JWT_KEYS", "MESH_INBOX_MASTER_KEY"); err != nil {
		return nil, err
	}
	s, err := seal.New(cfg.InboxMasterKey)
	if err != nil {
		return nil, err
	}
	return &Service{
		DB: db, Clock: mesh.SystemClock, AdminKey: cfg.AdminKey, JWTKeys: cfg.JWTKeys,
		TokenTTL: cfg.TokenTTL, Sealer: s,
		Kafka: KafkaInfo{Brokers: cfg.KafkaPublicBrokers, Topic: cfg.KafkaTopic, Auth: cfg.KafkaAuth},
	}, nil
}

// API keys look like "amk_<key_id>_<secret>": the key id finds the row, only
// SHA-256 of the secret is stored (the secret is 256 random bits, so a slow
// hash would add nothing), and the comparison is constant-time.
const apiKeyPrefix = "amk_"

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
	if !found || len(rest) < 13 || rest[12] != '_' {
		return "", nil, false
	}
	h := sha256.Sum256([]byte(rest[13:]))
	return rest[:12], h[:], true
}

// CreateAgent registers an agent and returns its first API key (shown once).
// The agent's counter and rate-limit rows are created with it, so writers
// only ever UPDATE them (locks on existing rows, in a fixed order).
func (s *Service) CreateAgent(ctx context.Context, agentID, name string) (keyID, apiKey string, err error) {
	if !mesh.ValidAgentID(agentID) {
		return "", "", mesh.Errorf(mesh.KindUnprocessable, "invalid_agent_id", "agent_id must match %s", mesh.AgentIDPattern)
	}
	if name == "" {
		name = agentID
	}
	if len(name) > 200 {
		return "", "", mesh.Errorf(mesh.KindUnprocessable, "invalid_name", "name is longer than 200 characters")
	}
	keyID, apiKey, hash := NewAPIKey()
	now := s.Clock()
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO agents (agent_id, name, status, created_at) VALUES (?, ?, 'inactive', ?)", agentID, name, now); err != nil {
			if mysql.IsDuplicate(err) {
				return mesh.Errorf(mesh.KindConflict, "agent_exists", "agent %q already exists", agentID)
			}
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO api_keys (key_id, agent_id, secret_hash, created_at) VALUES (?, ?, ?, ?)", keyID, agentID, hash, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO inbox_counters (recipient, last_seq) VALUES (?, 0)", agentID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO rate_limits (agent_id, tat_us) VALUES (?, 0)", agentID)
		return err
	})
	return keyID, apiKey, err
}

// TokenResponse is the body of POST /v1/auth/token.
type TokenResponse struct {
	Token     string    `json:"token"`
	TokenType string    `json:"token_type"`
	ExpiresIn int       `json:"expires_in"`
	AgentID   string    `json:"agent_id"`
	InboxKey  string    `json:"inbox_key"`
	KeyEpoch  int       `json:"key_epoch"`
	Kafka     KafkaInfo `json:"kafka"`
}

var errBadKey = mesh.Errorf(mesh.KindUnauthorized, "invalid_api_key", "the API key is unknown, revoked or malformed")

// IssueToken exchanges an API key for a JWT and the agent's inbox key.
func (s *Service) IssueToken(ctx context.Context, apiKey string) (TokenResponse, error) {
	keyID, hash, ok := parseAPIKey(apiKey)
	if !ok {
		return TokenResponse{}, errBadKey
	}
	var agentID string
	var stored []byte
	var revoked sql.NullTime
	var epoch int
	err := s.DB.QueryRowContext(ctx, `SELECT k.agent_id, k.secret_hash, k.revoked_at, a.key_epoch
FROM api_keys k JOIN agents a ON a.agent_id = k.agent_id WHERE k.key_id = ?`, keyID).Scan(&agentID, &stored, &revoked, &epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return TokenResponse{}, errBadKey
	}
	if err != nil {
		return TokenResponse{}, err
	}
	if subtle.ConstantTimeCompare(stored, hash) != 1 || revoked.Valid {
		return TokenResponse{}, errBadKey
	}
	tok, err := s.sign(agentID, keyID)
	if err != nil {
		return TokenResponse{}, err
	}
	return TokenResponse{
		Token: tok, TokenType: "Bearer", ExpiresIn: int(s.TokenTTL.Seconds()), AgentID: agentID,
		InboxKey: base64.StdEncoding.EncodeToString(s.Sealer.AgentKey(agentID, epoch)), KeyEpoch: epoch,
		Kafka: s.Kafka,
	}, nil
}

type claims struct {
	KeyID string `json:"akid"`
	jwt.RegisteredClaims
}

func (s *Service) sign(agentID, keyID string) (string, error) {
	if len(s.JWTKeys) == 0 {
		return "", errors.New("identity: no JWT signing key configured")
	}
	now := s.Clock()
	k := s.JWTKeys[0]
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims{KeyID: keyID, RegisteredClaims: jwt.RegisteredClaims{
		Subject: agentID, Issuer: "agentmesh", IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(s.TokenTTL)),
	}})
	t.Header["kid"] = k.ID
	return t.SignedString(k.Secret)
}

var errBadToken = mesh.Errorf(mesh.KindUnauthorized, "invalid_token", "the token is expired, malformed or not signed by this mesh")

// AuthenticateAgent verifies an HS256 JWT (kid selects the key; alg=none and
// other algorithms are refused) and that its API key is still live.
func (s *Service) AuthenticateAgent(ctx context.Context, token string) (httpapi.Caller, error) {
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		for _, k := range s.JWTKeys {
			if subtle.ConstantTimeCompare([]byte(k.ID), []byte(kid)) == 1 {
				return k.Secret, nil
			}
		}
		return nil, fmt.Errorf("unknown kid")
	}, jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer("agentmesh"), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return s.Clock() }))
	if err != nil || c.Subject == "" || c.KeyID == "" {
		return httpapi.Caller{}, errBadToken
	}
	// A revoked key invalidates its tokens at once, not at expiry.
	var live int
	err = s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM api_keys WHERE key_id = ? AND agent_id = ? AND revoked_at IS NULL", c.KeyID, c.Subject).Scan(&live)
	if err != nil {
		return httpapi.Caller{}, err
	}
	if live != 1 {
		return httpapi.Caller{}, mesh.Errorf(mesh.KindUnauthorized, "key_revoked", "the API key behind this token was revoked")
	}
	return httpapi.Caller{AgentID: c.Subject, KeyID: c.KeyID}, nil
}

// AuthenticateAdmin compares the admin key in constant time.
func (s *Service) AuthenticateAdmin(_ context.Context, key string) error {
	// Hash both sides so the comparison time does not depend on lengths.
	a := sha256.Sum256([]byte(key))
	b := sha256.Sum256([]byte(s.AdminKey))
	if s.AdminKey == "" || subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		return mesh.Errorf(mesh.KindUnauthorized, "invalid_admin_key", "admin routes need the admin key")
	}
	return nil
}

// CanCommunicate reports whether from may send to to: they are friends or
// share a group. q may be a transaction, so the check and the write see the
// same snapshot.
func CanCommunicate(ctx context.Context, q Querier, from, to string) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT
  (SELECT COUNT(*) FROM friendships WHERE agent_id = ? AND friend_id = ?) +
  (SELECT COUNT(*) FROM group_members a JOIN group_members b ON b.group_id = a.group_id
     WHERE a.agent_id = ? AND b.agent_id = ?)`, from, to, from, to).Scan(&n)
	return n > 0, err
}

// Rate limit: 50 requests/s per agent with bursts of 100, as GCRA. The state is
// one row per agent in the database, so it holds across every concurrent
// function instance.
const (
	RatePerSecond = 50
	RateBurst     = 100
)

// TakeRate spends one request of agentID's budget with a single conditional
// UPDATE. Inside a write transaction it adds no commit of its own, and a 429
// rolls the whole transaction back.
func TakeRate(ctx context.Context, q Querier, agentID string, now time.Time) error {
	const interval = int64(time.Second/time.Microsecond) / RatePerSecond
	const tolerance = interval * RateBurst
	nowUS := now.UnixMicro()
	res, err := q.ExecContext(ctx, `UPDATE rate_limits SET tat_us = GREATEST(tat_us, ?) + ?
WHERE agent_id = ? AND GREATEST(tat_us, ?) + ? - ? <= ?`, nowUS, interval, agentID, nowUS, interval, nowUS, tolerance)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	var tat int64
	if err := q.QueryRowContext(ctx, "SELECT tat_us FROM rate_limits WHERE agent_id = ?", agentID).Scan(&tat); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return mesh.ErrUnauthorized
		}
		return err
	}
	waitUS := tat + interval - tolerance - nowUS
	retry := int((waitUS + 999_999) / 1_000_000)
	if retry < 1 {
		retry = 1
	}
	return &mesh.Error{Kind: mesh.KindRateLimited, Code: "rate_limited",
		Message: fmt.Sprintf("more than %d requests/s (burst %d)", RatePerSecond, RateBurst), RetryAfter: retry}
}
