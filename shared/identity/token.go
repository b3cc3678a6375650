package identity

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// TokenResponse is the body of POST /v1/auth/token.
type TokenResponse = api.TokenResponse

// InboxKey is the agent's AES-256-GCM key (base64) for the records sealed
// under KeyEpoch.
type InboxKey = api.InboxKey

// MaxInboxKeys bounds the keys of one token response: the newest epochs.
// Events of older epochs (an agent rotated more often than this within the
// retention) are still served opened by GET /v1/inbox.
const MaxInboxKeys = 64

// oldestEpochSQL reads the key epoch of the oldest event the agent's
// outbox still holds: one row of the unique key (recipient, seq). Epochs
// never go down as seq grows, so no retained event is older.
const oldestEpochSQL = `SELECT key_epoch FROM outbox_events WHERE recipient = ? ORDER BY seq LIMIT 1`

// inboxKeys returns agentID's keys from the oldest retained epoch (at most
// MaxInboxKeys back) to current.
func (s *Service) inboxKeys(ctx context.Context, agentID string, current int) ([]InboxKey, error) {
	oldest := current
	err := s.DB.QueryRowContext(ctx, oldestEpochSQL, agentID).Scan(&oldest)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	oldest = max(min(oldest, current), current-MaxInboxKeys+1, 1)
	keys := make([]InboxKey, 0, current-oldest+1)
	for e := oldest; e <= current; e++ {
		keys = append(keys, InboxKey{KeyEpoch: e, Key: base64.StdEncoding.EncodeToString(s.Sealer.AgentKey(agentID, e))})
	}
	return keys, nil
}

var errBadKey = mesh.Errorf(mesh.KindUnauthorized, "invalid_api_key", "the API key is unknown, revoked or malformed")

// IssueToken exchanges an API key for a JWT, the agent's routing id and its
// inbox keys. The
// exchange spends one request of the agent's rate budget, so a leaked key
// cannot be used to hammer the database through this public route either.
// sourceAddr is the client's address ("" when unknown): failures are
// throttled per key id and per address.
func (s *Service) IssueToken(ctx context.Context, apiKey, sourceAddr string) (TokenResponse, error) {
	keyID, hash, ok := parseAPIKey(apiKey)
	return guarded(ctx, s, authThrottles(keyID, sourceAddr),
		func() (TokenResponse, error) { return s.issueToken(ctx, keyID, hash, ok) },
		func(err error) bool { return mesh.AsError(err).Code == errBadKey.Code })
}

// guarded runs an authentication attempt under throttles: while any of
// them is spent it is refused with 429 before the credential is looked at,
// and an attempt that fails (failed(err)) spends them all.
func guarded[T any](ctx context.Context, s *Service, throttles []throttle, attempt func() (T, error), failed func(error) bool) (T, error) {
	now := s.Now()
	if err := s.checkThrottles(ctx, throttles, now); err != nil {
		var zero T
		return zero, err
	}
	out, err := attempt()
	if err != nil && failed(err) {
		if err := s.spend(ctx, throttles, now); err != nil {
			var zero T
			return zero, err
		}
	}
	return out, err
}

// issueToken is IssueToken once the failure budgets allowed the attempt.
func (s *Service) issueToken(ctx context.Context, keyID string, hash []byte, ok bool) (TokenResponse, error) {
	if !ok {
		return TokenResponse{}, errBadKey
	}
	if s.Sealer == nil {
		return TokenResponse{}, errors.New("identity: no inbox master key configured (MESH_INBOX_MASTER_KEY)")
	}
	agentID, epoch, err := s.liveKey(ctx, keyID, hash)
	if err != nil {
		return TokenResponse{}, err
	}
	if err := TakeRate(ctx, s.DB, agentID, s.Now()); err != nil {
		return TokenResponse{}, err
	}
	keys, err := s.inboxKeys(ctx, agentID, epoch)
	if err != nil {
		return TokenResponse{}, err
	}
	tok, err := s.sign(agentID, keyID)
	if err != nil {
		return TokenResponse{}, err
	}
	return TokenResponse{
		Token: tok, TokenType: "Bearer", ExpiresIn: int(s.TokenTTL.Seconds()), AgentID: agentID,
		RoutingID: s.Sealer.RoutingID(agentID), InboxKeys: keys, Kafka: s.Kafka, PushURL: s.PushURL,
	}, nil
}

// liveKey returns the agent and key epoch of the live API key keyID whose
// secret hashes to hash, or errBadKey (unknown, revoked or wrong secret:
// one answer, the secret compared in constant time).
func (s *Service) liveKey(ctx context.Context, keyID string, hash []byte) (agentID string, epoch int, err error) {
	var stored []byte
	var revoked sql.NullTime
	err = s.DB.QueryRowContext(ctx, `SELECT k.agent_id, k.secret_hash, k.revoked_at, a.key_epoch
FROM api_keys k JOIN agents a ON a.agent_id = k.agent_id WHERE k.key_id = ?`, keyID).Scan(&agentID, &stored, &revoked, &epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, errBadKey
	}
	if err != nil {
		return "", 0, err
	}
	if subtle.ConstantTimeCompare(stored, hash) != 1 || revoked.Valid {
		return "", 0, errBadKey
	}
	return agentID, epoch, nil
}

// claims are the JWT claims: sub = agent id, akid = the API key it came from.
type claims struct {
	KeyID string `json:"akid"`
	jwt.RegisteredClaims
}

const tokenIssuer = "agentmesh"

var errNoSigningKey = errors.New("identity: no JWT signing key configured (MESH_JWT_KEYS)")

// sign mints an Ed25519 (EdDSA) token with the first configured key; every
// configured public key verifies, so a new key can be put first while tokens
// signed by the old one stay valid until they expire. Only the token
// function holds the private keys.
func (s *Service) sign(agentID, keyID string) (string, error) {
	if len(s.JWTKeys) == 0 {
		return "", errNoSigningKey
	}
	now := s.Now()
	k := s.JWTKeys[0]
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims{KeyID: keyID, RegisteredClaims: jwt.RegisteredClaims{
		Subject: agentID, Issuer: tokenIssuer, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(s.TokenTTL)),
	}})
	t.Header["kid"] = k.ID
	return t.SignedString(k.Signer())
}

// publicKeys are the keys that verify: JWTPublicKeys (New puts the public
// halves of the signing keys there too), or for a Service built with
// signing keys only, as in tests, their public halves.
func (s *Service) publicKeys() []config.JWTPublicKey {
	if len(s.JWTPublicKeys) > 0 {
		return s.JWTPublicKeys
	}
	keys := make([]config.JWTPublicKey, len(s.JWTKeys))
	for i, k := range s.JWTKeys {
		keys[i] = k.Public()
	}
	return keys
}

// maxClockSkew is how far a token's exp may lie beyond now + TokenTTL
// (clocks of function instances differ slightly).
const maxClockSkew = time.Minute

var errBadToken = mesh.Errorf(mesh.KindUnauthorized, "invalid_token", "the token is expired, malformed or not signed by this mesh")

// Caller is the agent an agent token stands for, and the API key it was
// issued for.
type Caller struct {
	AgentID string
	KeyID   string
}

// AuthenticateAgent verifies an EdDSA JWT (kid selects the public key;
// alg=none, HS256 and other algorithms are refused) and that its API key is
// still live.
func (s *Service) AuthenticateAgent(ctx context.Context, token string) (Caller, error) {
	c, err := s.verifyToken(token)
	if err != nil {
		return Caller{}, err
	}
	// A revoked key invalidates its tokens at once, not at expiry.
	if err := CheckKey(ctx, s.DB, c.Subject, c.KeyID); err != nil {
		return Caller{}, err
	}
	return Caller{AgentID: c.Subject, KeyID: c.KeyID}, nil
}

// CheckKey returns ErrKeyRevoked unless keyID is a live key of agentID.
func CheckKey(ctx context.Context, q Querier, agentID, keyID string) error {
	var live int
	err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM api_keys WHERE key_id = ? AND agent_id = ? AND revoked_at IS NULL", keyID, agentID).Scan(&live)
	if err != nil {
		return err
	}
	if live != 1 {
		return ErrKeyRevoked
	}
	return nil
}

// ErrKeyRevoked answers a token whose API key was revoked.
var ErrKeyRevoked = mesh.Errorf(mesh.KindUnauthorized, "key_revoked", "the API key behind this token was revoked")

// VerifyAgentToken is AuthenticateAgent without the key's liveness: for a
// route that checks the key inside its own transaction (tasks' send, with
// OpenSendGate), saving the separate round trip.
func (s *Service) VerifyAgentToken(token string) (Caller, error) {
	c, err := s.verifyToken(token)
	if err != nil {
		return Caller{}, err
	}
	return Caller{AgentID: c.Subject, KeyID: c.KeyID}, nil
}

// AuthenticateAgentFrom is AuthenticateAgent for an entry point that
// answers before any rate budget of the agent is spent (the push channel's
// handshake): failed attempts are throttled per source address (sourceAddr,
// "" when unknown) with the budget failed API keys spend, and while it is
// spent every attempt is refused with 429 before the token is looked at, so
// a handshake flood learns nothing.
func (s *Service) AuthenticateAgentFrom(ctx context.Context, token, sourceAddr string) (Caller, error) {
	return guarded(ctx, s, authThrottles("", sourceAddr),
		func() (Caller, error) { return s.AuthenticateAgent(ctx, token) },
		func(err error) bool { return mesh.AsError(err).Kind == mesh.KindUnauthorized })
}

// AuthenticateAdmin compares the admin key in constant time. Failures are
// throttled per source address (sourceAddr, "" when unknown), and the admin
// routes share one request budget, like an agent's.
func (s *Service) AuthenticateAdmin(ctx context.Context, key, sourceAddr string) error {
	now := s.Now()
	throttles := authThrottles("", sourceAddr)
	if err := s.checkThrottles(ctx, throttles, now); err != nil {
		return err
	}
	// Hash both sides so the comparison time does not depend on lengths.
	a := sha256.Sum256([]byte(key))
	b := sha256.Sum256([]byte(s.AdminKey))
	if s.AdminKey == "" || subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		if err := s.spend(ctx, throttles, now); err != nil {
			return err
		}
		return mesh.Errorf(mesh.KindUnauthorized, "invalid_admin_key", "admin routes need the admin key")
	}
	return s.takeAdmin(ctx, now)
}

// verifyToken checks a token's signature, algorithm, kid, issuer and expiry
// (everything but the key's liveness, which needs the database).
func (s *Service) verifyToken(token string) (claims, error) {
	now := s.Now()
	sum := sha256.Sum256([]byte(token))
	if c, ok := s.verified.get(sum, now); ok {
		return c, nil
	}
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		for _, k := range s.publicKeys() {
			if subtle.ConstantTimeCompare([]byte(k.ID), []byte(kid)) == 1 {
				return k.Key, nil
			}
		}
		return nil, fmt.Errorf("unknown kid")
	}, jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithIssuer(tokenIssuer), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }))
	if err != nil || !mesh.ValidAgentID(c.Subject) || !validKeyID(c.KeyID) {
		return claims{}, errBadToken
	}
	// However validly signed, a token never outlives the configured
	// lifetime: one minted with a far-future exp (a leaked signing key, a
	// bug) must not work for years.
	if c.ExpiresAt.Time.After(now.Add(s.TokenTTL + maxClockSkew)) {
		return claims{}, errBadToken
	}
	s.verified.put(sum, c, now)
	return c, nil
}
