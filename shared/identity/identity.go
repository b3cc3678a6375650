// Package identity provides agents, API keys, tokens and their
// verification, presence, the social graph (friends, groups and blocks), the
// canCommunicate rule and the per-agent rate limit. It returns typed results
// (the wire types of shared/api where the agent API has one) and mesh.Error
// values; its HTTP routes live in the adapter package identityhttp.
package identity

import (
	"context"
	"database/sql"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/config"
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
type KafkaInfo = api.KafkaInfo

// Service implements identity on MySQL. Every method takes its notion of
// "now" from Clock, so tests drive presence and rate limits with a fake clock.
type Service struct {
	DB       *mysql.DB
	Clock    mesh.Clock
	AdminKey string
	JWTKeys  []config.JWTKey
	// JWTPublicKeys verify agent tokens (with the public halves of JWTKeys).
	JWTPublicKeys []config.JWTPublicKey
	// TokenTTL is the lifetime of issued tokens, and the longest any token is
	// accepted for, whatever its exp claim says.
	TokenTTL time.Duration
	Sealer   *seal.Sealer
	Kafka    KafkaInfo
	// RequestCoolDown is how long a rejected friend request blocks the same
	// request again (DefaultRequestCoolDown when zero).
	RequestCoolDown time.Duration
	// PushURL is the push channel's WebSocket URL, announced in every token
	// response as push_url ("" when the mesh has none).
	PushURL string
	// OnKeysRevoked, when set, is called with the API keys a revocation
	// revoked, after its transaction committed (never inside it, and never
	// for a revocation that changed nothing): the push channel closes the
	// connections those keys opened. It must not fail the revocation, so it
	// returns nothing; the push janitor catches whatever it misses.
	OnKeysRevoked func(ctx context.Context, keyIDs []string)

	verified verifiedTokens
}

// keysRevoked runs the OnKeysRevoked hook, if any, for keyIDs.
func (s *Service) keysRevoked(ctx context.Context, keyIDs []string) {
	if s.OnKeysRevoked != nil && len(keyIDs) > 0 {
		s.OnKeysRevoked(ctx, keyIDs)
	}
}

// New builds the service from configuration.
func New(db *mysql.DB, cfg config.Config) (*Service, error) {
	// Each function holds only the secrets it uses (template.yaml): the
	// admin key only admin routes, the inbox master key only the token
	// function. Whatever is missing fails closed where it is needed: admin
	// authentication refuses every key, issuing a token is an error.
	var s *seal.Sealer
	if len(cfg.InboxMasterKey) > 0 {
		var err error
		if s, err = seal.New(cfg.InboxMasterKey); err != nil {
			return nil, err
		}
	}
	return &Service{
		DB: db, Clock: mesh.SystemClock, AdminKey: cfg.AdminKey, JWTKeys: cfg.JWTKeys, JWTPublicKeys: cfg.JWTPublicKeys,
		TokenTTL: cfg.TokenTTL, Sealer: s, PushURL: cfg.PushURL,
		Kafka: KafkaInfo{Brokers: append([]string{}, cfg.KafkaPublicBrokers...), Topic: cfg.KafkaTopic, Auth: cfg.KafkaAuth},
	}, nil
}

// Now is the service's clock, defaulting to the system clock: adapters spend
// rate budget at the same instant the domain would.
func (s *Service) Now() time.Time {
	if s.Clock == nil {
		return mesh.SystemClock()
	}
	return s.Clock()
}
