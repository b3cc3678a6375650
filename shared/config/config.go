// Package config reads the mesh's settings from the environment, the way a
// Lambda function and the local stack both receive them. Secrets may come as
// plain values (local) or as Secrets Manager ARNs (AWS); see secrets.go.
package config

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// JWTKey is one token signing key with its kid: Secret (32 bytes or more)
// seeds an Ed25519 key pair. Only the token function holds it; every other
// function verifies with the public half (JWTPublicKey).
type JWTKey struct {
	ID     string
	Secret []byte
}

// Signer is the Ed25519 private key the secret seeds (its SHA-256 is the
// seed, so any secret of 32 bytes or more will do).
func (k JWTKey) Signer() ed25519.PrivateKey {
	seed := sha256.Sum256(k.Secret)
	return ed25519.NewKeyFromSeed(seed[:])
}

// Public is the key's public half.
func (k JWTKey) Public() JWTPublicKey {
	return JWTPublicKey{ID: k.ID, Key: k.Signer().Public().(ed25519.PublicKey)}
}

// JWTPublicKey verifies the tokens signed with the JWTKey of the same kid.
type JWTPublicKey struct {
	ID  string
	Key ed25519.PublicKey
}

// Config is everything the functions need.
type Config struct {
	MySQLDSN string
	// DBCredentials, when set, supplies the user and password of each new
	// database connection (they override the DSN's); fresh asks for them to
	// be read again because the server refused the last ones (a rotated
	// secret). LoadAWS sets it when the password comes from Secrets Manager.
	DBCredentials func(ctx context.Context, fresh bool) (user, password string, err error)
	// AppDBUser and AppDBPassword are the application user the migration
	// creates with DML only (MESH_DB_APP_SECRET_ARN; the migration only):
	// RDS Proxy logs in as it with the password, the functions with IAM.
	AppDBUser     string
	AppDBPassword string
	// AdminKey authenticates admin routes.
	AdminKey string
	// JWTKeys: the first signs (two live at once during rotation). Only
	// the token function is given them.
	JWTKeys []JWTKey
	// JWTPublicKeys verify tokens (MESH_JWT_PUBLIC_KEYS, plus the public
	// halves of JWTKeys when those are set, as in the local stack).
	JWTPublicKeys []JWTPublicKey
	// InboxMasterKey derives each agent's sealing key.
	InboxMasterKey []byte
	TokenTTL       time.Duration

	KafkaBrokers    []string
	KafkaTopic      string
	KafkaPartitions int
	// KafkaAuth is "none" (local) or "aws-msk-iam" (MSK, with TLS).
	KafkaAuth string
	// KafkaPublicBrokers is what meshd is told to use (defaults to KafkaBrokers).
	KafkaPublicBrokers []string

	MaxMessageBytes int
	TaskIdleTimeout time.Duration
	OutboxRetention time.Duration
	// Retention is how long the retention janitor keeps finished rows
	// (shared/retention; defaults equal to its Default*Retention).
	Retention RetentionConfig
	// MaxLongPolls caps the concurrent long polls of GET /v1/inbox per
	// agent (MESH_MAX_LONG_POLLS, default 2).
	MaxLongPolls int

	// PushURL is the push channel's WebSocket URL announced to meshd in the
	// token response as push_url (MESH_PUSH_URL; empty: no push channel).
	PushURL string
	// PushEndpoint is the @connections management endpoint of the push
	// channel's WebSocket API stage (MESH_PUSH_ENDPOINT), for a function
	// that can reach it directly.
	PushEndpoint string
	// PushRelayFunction names the function outside the VPC that relays
	// @connections calls for functions inside it (MESH_PUSH_RELAY_FUNCTION).
	PushRelayFunction string
	// PushMaxConnAge is how long a push connection may live
	// (MESH_PUSH_MAX_CONN_AGE, default 2 h: API Gateway's limit; shorter
	// in tests that simulate it).
	PushMaxConnAge time.Duration

	// A2AURL is the public base of the A2A gateway's routes (MESH_A2A_URL,
	// e.g. http://127.0.0.1:8080; on AWS empty: the gateway derives it from
	// its Function URL's domain). Agent cards live under
	// {A2AURL}/a2a/agents/{agent_id}.
	A2AURL string
	// PublicAPIURL is the public base of the HTTP API (MESH_PUBLIC_API_URL),
	// for absolute links such as the OAuth token endpoint an agent card
	// declares ({PublicAPIURL}/v1/oauth/token).
	PublicAPIURL string
}

// RetentionConfig is how long finished rows are kept: terminal tasks after
// their last change (MESH_TASK_RETENTION, 720h), audit entries
// (MESH_AUDIT_RETENTION, 8760h), answered friend requests
// (MESH_FRIEND_REQUEST_RETENTION, 720h), expired sessions
// (MESH_SESSION_RETENTION, 168h) and revoked keys
// (MESH_REVOKED_KEY_RETENTION, 720h).
type RetentionConfig struct {
	Tasks, AuditLog, FriendRequests, Sessions, RevokedKeys time.Duration
}

// Getenv is the lookup Load uses; tests pass a map.
type Getenv func(string) string

// Load reads the configuration. Missing secrets are errors: a function must
// not start with a guessable key.
func Load(getenv Getenv) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Config{
		MySQLDSN:          getenv("MYSQL_DSN"),
		AdminKey:          getenv("MESH_ADMIN_KEY"),
		KafkaTopic:        or(getenv("KAFKA_TOPIC"), "inbox.events"),
		KafkaAuth:         or(getenv("KAFKA_AUTH"), "none"),
		KafkaBrokers:      splitList(getenv("KAFKA_BROKERS")),
		TokenTTL:          time.Hour,
		MaxMessageBytes:   256 << 10,
		TaskIdleTimeout:   24 * time.Hour,
		OutboxRetention:   7 * 24 * time.Hour,
		KafkaPartitions:   12,
		MaxLongPolls:      2,
		PushURL:           getenv("MESH_PUSH_URL"),
		PushEndpoint:      getenv("MESH_PUSH_ENDPOINT"),
		PushRelayFunction: getenv("MESH_PUSH_RELAY_FUNCTION"),
		PushMaxConnAge:    2 * time.Hour,
		A2AURL:            strings.TrimRight(getenv("MESH_A2A_URL"), "/"),
		PublicAPIURL:      strings.TrimRight(getenv("MESH_PUBLIC_API_URL"), "/"),
	}
	c.KafkaPublicBrokers = splitList(getenv("KAFKA_PUBLIC_BROKERS"))
	if len(c.KafkaPublicBrokers) == 0 {
		c.KafkaPublicBrokers = c.KafkaBrokers
	}
	var err error
	if c.JWTKeys, err = ParseJWTKeys(getenv("MESH_JWT_KEYS")); err != nil {
		return c, err
	}
	if c.JWTPublicKeys, err = ParseJWTPublicKeys(getenv("MESH_JWT_PUBLIC_KEYS")); err != nil {
		return c, err
	}
	for _, k := range c.JWTKeys {
		c.JWTPublicKeys = append(c.JWTPublicKeys, k.Public())
	}
	if v := getenv("MESH_INBOX_MASTER_KEY"); v != "" {
		if c.InboxMasterKey, err = base64.StdEncoding.DecodeString(v); err != nil || len(c.InboxMasterKey) != 32 {
			return c, fmt.Errorf("config: MESH_INBOX_MASTER_KEY must be 32 bytes, base64")
		}
	}
	if c.MaxMessageBytes, err = intVar(getenv, "MESH_MAX_MESSAGE_BYTES", c.MaxMessageBytes); err != nil {
		return c, err
	}
	if c.MaxLongPolls, err = intVar(getenv, "MESH_MAX_LONG_POLLS", c.MaxLongPolls); err != nil {
		return c, err
	}
	if c.KafkaPartitions, err = intVar(getenv, "KAFKA_PARTITIONS", c.KafkaPartitions); err != nil {
		return c, err
	}
	if c.TaskIdleTimeout, err = durVar(getenv, "MESH_TASK_IDLE_TIMEOUT", c.TaskIdleTimeout); err != nil {
		return c, err
	}
	if c.OutboxRetention, err = durVar(getenv, "MESH_OUTBOX_RETENTION", c.OutboxRetention); err != nil {
		return c, err
	}
	if c.PushMaxConnAge, err = durVar(getenv, "MESH_PUSH_MAX_CONN_AGE", c.PushMaxConnAge); err != nil {
		return c, err
	}
	c.Retention = RetentionConfig{Tasks: 720 * time.Hour, AuditLog: 8760 * time.Hour,
		FriendRequests: 720 * time.Hour, Sessions: 168 * time.Hour, RevokedKeys: 720 * time.Hour}
	for name, d := range map[string]*time.Duration{
		"MESH_TASK_RETENTION":           &c.Retention.Tasks,
		"MESH_AUDIT_RETENTION":          &c.Retention.AuditLog,
		"MESH_FRIEND_REQUEST_RETENTION": &c.Retention.FriendRequests,
		"MESH_SESSION_RETENTION":        &c.Retention.Sessions,
		"MESH_REVOKED_KEY_RETENTION":    &c.Retention.RevokedKeys,
	} {
		if *d, err = durVar(getenv, name, *d); err != nil {
			return c, err
		}
	}
	return c, nil
}

// ParseJWTKeys parses "kid:base64secret,kid2:base64secret".
func ParseJWTKeys(v string) ([]JWTKey, error) {
	var keys []JWTKey
	for _, item := range splitList(v) {
		kid, sec, ok := strings.Cut(item, ":")
		raw, err := base64.StdEncoding.DecodeString(sec)
		if !ok || kid == "" || err != nil || len(raw) < 32 {
			return nil, fmt.Errorf("config: MESH_JWT_KEYS must be kid:base64(>=32 bytes) pairs separated by commas")
		}
		keys = append(keys, JWTKey{ID: kid, Secret: raw})
	}
	return keys, nil
}

// FormatJWTKeys is the inverse of ParseJWTKeys.
func FormatJWTKeys(keys []JWTKey) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.ID + ":" + base64.StdEncoding.EncodeToString(k.Secret)
	}
	return strings.Join(parts, ",")
}

// ParseJWTPublicKeys parses "kid:base64(32-byte Ed25519 public key),...".
func ParseJWTPublicKeys(v string) ([]JWTPublicKey, error) {
	var keys []JWTPublicKey
	for _, item := range splitList(v) {
		kid, pub, ok := strings.Cut(item, ":")
		raw, err := base64.StdEncoding.DecodeString(pub)
		if !ok || kid == "" || err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("config: MESH_JWT_PUBLIC_KEYS must be kid:base64(32-byte Ed25519 public key) pairs separated by commas")
		}
		keys = append(keys, JWTPublicKey{ID: kid, Key: ed25519.PublicKey(raw)})
	}
	return keys, nil
}

// FormatJWTPublicKeys is the inverse of ParseJWTPublicKeys.
func FormatJWTPublicKeys(keys []JWTPublicKey) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.ID + ":" + base64.StdEncoding.EncodeToString(k.Key)
	}
	return strings.Join(parts, ",")
}

// Require reports the first missing setting among the named ones.
func (c Config) Require(names ...string) error {
	for _, n := range names {
		missing := false
		switch n {
		case "MYSQL_DSN":
			missing = c.MySQLDSN == ""
		case "MESH_ADMIN_KEY":
			missing = c.AdminKey == ""
		case "MESH_JWT_KEYS":
			missing = len(c.JWTKeys) == 0
		case "MESH_INBOX_MASTER_KEY":
			missing = len(c.InboxMasterKey) == 0
		case "KAFKA_BROKERS":
			missing = len(c.KafkaBrokers) == 0
		}
		if missing {
			return fmt.Errorf("config: %s is not set", n)
		}
	}
	return nil
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func intVar(getenv Getenv, name string, def int) (int, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("config: %s must be a positive integer, got %q", name, v)
	}
	return n, nil
}

func durVar(getenv Getenv, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("config: %s must be a positive duration like 24h, got %q", name, v)
	}
	return d, nil
}
