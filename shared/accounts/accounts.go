// Package accounts provides the people agents belong to: accounts with
// email and password, their sessions (token, CSRF token, expiry, throttled
// failures), the management of an account's own agents, the audit log as
// accounts read it, and the operator's dead-letter redrive. Its methods
// return typed results and mesh errors; the HTTP routes (cookies, request
// decoding, status codes) are in accountshttp.
//
// Account methods act for one of the account's agents through the very
// service methods the agent's own routes use (identity, tasks), under
// identity.WithActor, so both paths decide alike and the audit log names
// the account.
package accounts

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/argon2"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// DefaultSessionTTL is how long a session lasts from sign-in.
const DefaultSessionTTL = 12 * time.Hour

// Service implements accounts on MySQL.
type Service struct {
	DB       *mysql.DB
	Identity *identity.Service
	Tasks    *tasks.Service
	// Cards are the agents' A2A cards; nil: on DB with Clock and no
	// BaseURL (card URLs empty).
	Cards *cards.Service
	Clock mesh.Clock
	// SessionTTL is a session's lifetime (DefaultSessionTTL when zero).
	SessionTTL time.Duration
}

// New builds the service over the identity and task services.
func New(id *identity.Service, ts *tasks.Service) *Service {
	return &Service{DB: id.DB, Identity: id, Tasks: ts, Clock: mesh.SystemClock}
}

func (s *Service) now() time.Time {
	if s.Clock == nil {
		return mesh.SystemClock()
	}
	return s.Clock()
}

// SessionLifetime is how long a session lasts from sign-in (the cookie's
// Max-Age).
func (s *Service) SessionLifetime() time.Duration {
	if s.SessionTTL <= 0 {
		return DefaultSessionTTL
	}
	return s.SessionTTL
}

// Account is an account as the API shows it (never its password hash).
type Account = api.Account

// NewAccountInput is the admin route's body.
type NewAccountInput = api.CreateAccountRequest

// Password length bounds, in bytes: long enough to resist guessing under the
// sign-in throttle, short enough that hashing stays cheap.
const (
	MinPasswordBytes = 12
	MaxPasswordBytes = 256
)

var emailPattern = regexp.MustCompile(`^[^\s@<>"'&]{1,64}@[A-Za-z0-9.-]{1,189}$`)

// normalEmail lower-cases an email and checks its shape.
func normalEmail(email string) (string, bool) {
	e := strings.ToLower(email)
	return e, len(e) <= 254 && emailPattern.MatchString(e)
}

// CreateAccount registers an account (the operator's admin route).
func (s *Service) CreateAccount(ctx context.Context, in NewAccountInput) (Account, error) {
	email, ok := normalEmail(in.Email)
	if !ok {
		return Account{}, mesh.Errorf(mesh.KindUnprocessable, "invalid_email", "email must look like name@example.org (at most 254 characters)")
	}
	if n := len(in.Password); n < MinPasswordBytes || n > MaxPasswordBytes {
		return Account{}, mesh.Errorf(mesh.KindUnprocessable, "invalid_password", "password must be %d to %d bytes long", MinPasswordBytes, MaxPasswordBytes)
	}
	name := in.Name
	if name == "" {
		name = email
	}
	if !mesh.PrintableName(name) {
		return Account{}, mesh.Errorf(mesh.KindUnprocessable, "invalid_name", "name must be 1-200 printable characters")
	}
	a := Account{AccountID: uuid.NewString(), Email: email, Name: name, Operator: in.Operator, CreatedAt: s.now()}
	_, err := s.DB.ExecContext(ctx, "INSERT INTO accounts (account_id, email, name, password_hash, operator, created_at) VALUES (?, ?, ?, ?, ?, ?)",
		a.AccountID, a.Email, a.Name, hashPassword(in.Password), a.Operator, a.CreatedAt)
	if mysql.IsDuplicate(err) {
		return Account{}, mesh.Errorf(mesh.KindConflict, "account_exists", "an account with this email exists")
	}
	return a, err
}

// argon2id parameters (OWASP's first recommendation: 19 MiB, 2 passes, 1 lane).
const (
	argonTime    = 2
	argonMemory  = 19 * 1024
	argonThreads = 1
	argonKeyLen  = 32
)

// hashPassword is argon2id in the PHC string format.
func hashPassword(pw string) string {
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	return encodeHash(salt, argonTime, argonMemory, argonThreads, argon2.IDKey([]byte(pw), salt, argonTime, argonMemory, argonThreads, argonKeyLen))
}

func encodeHash(salt []byte, t, m uint32, p uint8, key []byte) string {
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=19$m=%d,t=%d,p=%d$%s$%s", m, t, p, b64.EncodeToString(salt), b64.EncodeToString(key))
}

// dummyHash is checked against when the email is unknown, so that an
// unknown email costs as much time as a wrong password.
var dummyHash = hashPassword("not a password of anyone")

// checkPassword verifies pw against a PHC argon2id string in constant time.
func checkPassword(encoded, pw string) bool {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" || parts[2] != "v=19" {
		return false
	}
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m > 256*1024 || t > 10 || p == 0 || p > 8 {
		return false
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[4])
	key, err2 := base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(key) == 0 || len(key) > 64 {
		return false
	}
	got := argon2.IDKey([]byte(pw), salt, t, m, p, uint32(len(key)))
	return subtle.ConstantTimeCompare(got, key) == 1
}

// getAccount reads an account by id.
func (s *Service) getAccount(ctx context.Context, q identity.Querier, id string) (Account, error) {
	var a Account
	err := q.QueryRowContext(ctx, "SELECT account_id, email, name, operator, created_at FROM accounts WHERE account_id = ?", id).
		Scan(&a.AccountID, &a.Email, &a.Name, &a.Operator, &a.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return a, errSignedOut
	}
	return a, err
}

// errAgentNotFound is what every account route answers for an agent the
// account does not own, existing or not: nothing tells another account's
// agents apart from agents that do not exist.
var errAgentNotFound = mesh.Errorf(mesh.KindNotFound, "agent_not_found", "you have no agent with this id")

// ownAgent checks that acc owns agentID.
func (s *Service) ownAgent(ctx context.Context, acc Account, agentID string) error {
	if !mesh.ValidAgentID(agentID) {
		return errAgentNotFound
	}
	var owner string
	err := s.DB.QueryRowContext(ctx, "SELECT account_id FROM agent_accounts WHERE agent_id = ?", agentID).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) || err == nil && owner != acc.AccountID {
		return errAgentNotFound
	}
	return err
}

// ActorOf is acc as the audit log names it.
func ActorOf(acc Account) identity.Actor {
	return identity.Actor{Kind: identity.ActorAccount, ID: acc.AccountID}
}

// actAs is ctx under which identity and tasks record acc as the actor.
func actAs(ctx context.Context, acc Account) context.Context {
	return identity.WithActor(ctx, ActorOf(acc))
}
