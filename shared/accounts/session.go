package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"errors"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// Session is a signed-in account.
type Session struct {
	Account Account
	// CSRF must come back in the X-CSRF-Token header of every write: a
	// cross-site form or fetch can send the cookie but cannot read the token.
	CSRF      string
	ExpiresAt time.Time
}

// SignedIn is the sign-in route's answer (the token itself only travels in
// the HttpOnly cookie).
type SignedIn = api.SignedIn

var (
	errBadCredentials = mesh.Errorf(mesh.KindUnauthorized, "invalid_credentials", "wrong email or password")
	errSignedOut      = mesh.Errorf(mesh.KindUnauthorized, "not_signed_in", "sign in first (POST /v1/account/session)")
	errCSRF           = mesh.Errorf(mesh.KindForbidden, "csrf_token_invalid", "a write needs the session's CSRF token in the X-CSRF-Token header")
)

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// SignIn checks email and password and opens a session; it returns the
// session's token for the cookie. Failures are throttled per email and per
// client address sourceAddr ("" when unknown) by identity's failure
// budgets: while a budget is spent, even the right password gets 429, so
// guessing gets no answer.
func (s *Service) SignIn(ctx context.Context, email, password, sourceAddr string) (SignedIn, string, error) {
	e, ok := normalEmail(email)
	if !ok || len(password) > MaxPasswordBytes {
		return SignedIn{}, "", errBadCredentials
	}
	if err := s.Identity.CheckSignIn(ctx, e, sourceAddr); err != nil {
		return SignedIn{}, "", err
	}
	var id string
	var hash sql.NullString
	err := s.DB.QueryRowContext(ctx, "SELECT account_id, password_hash FROM accounts WHERE email = ?", e).Scan(&id, &hash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return SignedIn{}, "", err
	}
	stored := dummyHash
	if hash.Valid {
		stored = hash.String
	}
	if !checkPassword(stored, password) || !hash.Valid {
		if err := s.Identity.FailSignIn(ctx, e, sourceAddr); err != nil {
			return SignedIn{}, "", err
		}
		return SignedIn{}, "", errBadCredentials
	}
	acc, err := s.getAccount(ctx, s.DB, id)
	if err != nil {
		return SignedIn{}, "", err
	}
	token, csrf := randomToken(), randomToken()
	now := s.now()
	out := SignedIn{Account: acc, CSRFToken: csrf, ExpiresAt: now.Add(s.SessionLifetime())}
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		// Expired sessions of this account go now: the table stays bounded
		// by live sessions.
		if _, err := tx.ExecContext(ctx, "DELETE FROM account_sessions WHERE account_id = ? AND expires_at < ? LIMIT 100", id, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT IGNORE INTO rate_limits (agent_id, tat_us) VALUES (?, 0)", rateBucket(id)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO account_sessions (token_hash, account_id, csrf_token, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
			tokenHash(token), id, csrf, now, out.ExpiresAt); err != nil {
			return err
		}
		return dropOldSessions(ctx, tx, id)
	})
	return out, token, err
}

// MaxSessions bounds an account's live sessions: signing in once more ends
// the oldest, so repeated sign-ins cannot grow the table without end.
const MaxSessions = 20

// dropOldSessions ends acc's sessions beyond the newest MaxSessions.
func dropOldSessions(ctx context.Context, tx *sql.Tx, accountID string) error {
	rows, err := tx.QueryContext(ctx, "SELECT token_hash FROM account_sessions WHERE account_id = ? ORDER BY expires_at DESC, token_hash LIMIT 100 OFFSET ?", accountID, MaxSessions)
	if err != nil {
		return err
	}
	var old [][]byte
	for rows.Next() {
		var h []byte
		if err := rows.Scan(&h); err != nil {
			rows.Close()
			return err
		}
		old = append(old, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, h := range old {
		if _, err := tx.ExecContext(ctx, "DELETE FROM account_sessions WHERE token_hash = ?", h); err != nil {
			return err
		}
	}
	return nil
}

// SignOut ends the session of token (a no-op for an unknown one).
func (s *Service) SignOut(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	_, err := s.DB.ExecContext(ctx, "DELETE FROM account_sessions WHERE token_hash = ?", tokenHash(token))
	return err
}

// Authenticate returns the live session of token: 401 when it is missing,
// unknown or expired.
func (s *Service) Authenticate(ctx context.Context, token string) (Session, error) {
	if token == "" || len(token) > 100 {
		return Session{}, errSignedOut
	}
	var sess Session
	var id string
	err := s.DB.QueryRowContext(ctx, "SELECT account_id, csrf_token, expires_at FROM account_sessions WHERE token_hash = ?", tokenHash(token)).
		Scan(&id, &sess.CSRF, &sess.ExpiresAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, errSignedOut
	}
	if err != nil {
		return Session{}, err
	}
	if !s.now().Before(sess.ExpiresAt) {
		return Session{}, mesh.Errorf(mesh.KindUnauthorized, "session_expired", "the session expired; sign in again")
	}
	if sess.Account, err = s.getAccount(ctx, s.DB, id); err != nil {
		return Session{}, err
	}
	return sess, nil
}

// Session authenticates the session of token, spends one request of the
// account's budget and, for a write (every method but GET), checks csrf,
// the X-CSRF-Token the request carried: the one check every account route
// and console page makes.
func (s *Service) Session(ctx context.Context, token, csrf string, write bool) (Session, error) {
	sess, err := s.Authenticate(ctx, token)
	if err != nil {
		return Session{}, err
	}
	if err := identity.TakeRate(ctx, s.DB, rateBucket(sess.Account.AccountID), s.now()); err != nil {
		return Session{}, err
	}
	if write {
		if err := sess.CheckCSRF(csrf); err != nil {
			return Session{}, err
		}
	}
	return sess, nil
}

// CheckCSRF compares a write's X-CSRF-Token with the session's.
func (sess Session) CheckCSRF(got string) error {
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRF)) != 1 {
		return errCSRF
	}
	return nil
}

// rateBucket is an account's request budget in rate_limits, the agents' own
// budget (50/s, bursts of 100) under a key no agent id can take (':' is not
// allowed in one). Sign-in creates it.
func rateBucket(accountID string) string { return "account:" + accountID }
