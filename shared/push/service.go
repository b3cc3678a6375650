package push

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// Bounds of the connection registry.
const (
	// ClientFrameBurst and ClientFramePer are the budget of data frames a
	// client may send on one connection (GCRA: a burst, then one per
	// period: 20 a minute). meshd sends none (pings are control frames,
	// answered by API Gateway without a function), so the budget only
	// bounds what a misbehaving client costs in function runs.
	ClientFrameBurst = 20
	ClientFramePer   = 3 * time.Second
	// MaxClientFrameBytes is the largest data frame a client may send; a
	// larger one closes the connection like a flood does.
	MaxClientFrameBytes = 4 << 10
	// MaxIDLength bounds connection and instance ids (the columns' width).
	MaxIDLength = 128
	// ExpireGrace is how long past its expires_at a row is kept before the
	// janitor forgets it: API Gateway closes a connection at its age limit
	// by itself, and $disconnect usually deletes the row first.
	ExpireGrace = time.Minute
	// ExpireBatch bounds the rows one janitor run handles per kind
	// (expired, revoked); the next run takes the rest.
	ExpireBatch = 500
	// ForgetMinAge is how old a row must be before a 410 from the
	// management API may forget it: API Gateway answers 410 to a
	// connection until its $connect returned, and the row is committed
	// before that. A young row that is really gone is deleted by
	// $disconnect or, past its age, by the janitor.
	ForgetMinAge = 30 * time.Second
	// DefaultRelayTimeout bounds the relay work a request does after its
	// transaction committed (byes and closes on $connect, $default and
	// revocations): well inside the callers' own limits (API Gateway's
	// 29 s, meshd's dial timeout). What it cuts short the janitor closes.
	DefaultRelayTimeout = 2 * time.Second
	// maxInList bounds the ids of one IN (...) list; larger inputs are
	// queried in chunks.
	maxInList = 500
)

// ConnectRequest is the $connect route's handshake.
type ConnectRequest struct {
	// ConnectionID is API Gateway's id of the new connection.
	ConnectionID string
	// Token is the agent's mesh token (from the Authorization header or
	// the bearer.<token> subprotocol).
	Token string
	// InstanceID is meshd's X-Mesh-Instance ("" when not sent).
	InstanceID string
	// SourceAddr is the client's address, for throttling failed handshakes
	// ("" when unknown).
	SourceAddr string
}

// Conn is one live connection of an agent.
type Conn struct {
	ConnectionID string
	AgentID      string
	KeyID        string
	// RoutingID is the agent's routing id when the service's identity holds
	// the inbox master key (its Sealer), else "": the $connect function, by
	// least privilege, does not. Nothing routes by it; it is for operators.
	RoutingID   string
	InstanceID  string
	ConnectedAt time.Time
	ExpiresAt   time.Time
}

// Service is the registry of the push channel's connections, in MySQL. It
// is safe for concurrent use.
type Service struct {
	DB       *mysql.DB
	Identity *identity.Service
	// Relay reaches the connections; nil closes a connection by forgetting
	// its row only (no bye, no DeleteConnection).
	Relay Relay
	// MaxConnAge is how long a connection is served (MaxConnAge when zero).
	MaxConnAge time.Duration
	// RelayTimeout bounds the relay work after a request's commit
	// (DefaultRelayTimeout when zero).
	RelayTimeout time.Duration
	// Clock is the service's time (mesh.SystemClock when nil).
	Clock mesh.Clock
	// Log receives relay failures (slog.Default when nil). Tokens are
	// never logged.
	Log *slog.Logger

	// afterAuth, in tests, runs between the token check and the
	// transaction: where a racing revocation lands.
	afterAuth func()
	// beforeDelete, in tests, runs inside each deleting transaction before
	// its statement; an error it returns is the statement's.
	beforeDelete func() error
}

// ByeCloser is a Relay that can tell connections bye and close them in one
// step that returns at once (the Lambda relay invokes the relay function
// asynchronously), so that a request never waits on the management API.
type ByeCloser interface {
	// ByeAndClose posts bye to each connection, then closes them all. It
	// returns once the work is handed over; one already gone is no error.
	ByeAndClose(ctx context.Context, connectionIDs []string, bye []byte) error
}

func (s *Service) now() time.Time {
	if s.Clock == nil {
		return mesh.SystemClock()
	}
	return s.Clock()
}

func (s *Service) maxAge() time.Duration {
	if s.MaxConnAge <= 0 {
		return MaxConnAge
	}
	return s.MaxConnAge
}

// relayContext bounds post-commit relay work on a request path, and keeps
// it going when the request itself is cancelled: the commit stands.
func (s *Service) relayContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := s.RelayTimeout
	if d <= 0 {
		d = DefaultRelayTimeout
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

func (s *Service) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

var (
	errNoToken = mesh.Errorf(mesh.KindUnauthorized, "missing_token",
		"the handshake needs the agent's token: Authorization: Bearer <token>, or the subprotocols mesh.v1, bearer.<token>")
	errKeyRevoked = mesh.Errorf(mesh.KindUnauthorized, "key_revoked", "the API key behind this token was revoked")
)

// validID reports whether id can be stored as a connection or instance id:
// printable ASCII without spaces, at most MaxIDLength bytes. API Gateway's
// ids are base64; anything else is a client's or an emulator's mistake.
func validID(id string) bool {
	if id == "" || len(id) > MaxIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// Connect authenticates a handshake and records its connection. Beyond
// MaxConnsPerAgent the agent's oldest connections are forgotten in the same
// transaction and, once it committed, told ByeReplaced and closed.
func (s *Service) Connect(ctx context.Context, req ConnectRequest) (Conn, error) {
	if !validID(req.ConnectionID) {
		return Conn{}, mesh.Errorf(mesh.KindInvalid, "invalid_connection_id", "the connection id must be 1 to %d printable characters", MaxIDLength)
	}
	if req.InstanceID != "" && !validID(req.InstanceID) {
		return Conn{}, mesh.Errorf(mesh.KindInvalid, "invalid_instance_id", "X-Mesh-Instance must be 1 to %d printable characters without spaces", MaxIDLength)
	}
	if strings.TrimSpace(req.Token) == "" {
		return Conn{}, errNoToken
	}
	caller, err := s.Identity.AuthenticateAgentFrom(ctx, req.Token, req.SourceAddr)
	if err != nil {
		return Conn{}, err
	}
	// A handshake is a request of the agent like any other: a valid token
	// cannot reconnect faster than the agent's rate limit allows.
	if err := identity.TakeRate(ctx, s.DB, caller.AgentID, s.now()); err != nil {
		return Conn{}, err
	}
	if s.afterAuth != nil {
		s.afterAuth()
	}
	now := s.now()
	c := Conn{
		ConnectionID: req.ConnectionID, AgentID: caller.AgentID, KeyID: caller.KeyID, InstanceID: req.InstanceID,
		ConnectedAt: now, ExpiresAt: now.Add(s.maxAge()),
	}
	if s.Identity.Sealer != nil {
		c.RoutingID = s.Identity.Sealer.RoutingID(caller.AgentID)
	}
	var evicted []string
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		evicted = nil
		// The agents row first, as RevokeKey and RotateKey lock it: one lock
		// order, and connects of one agent serialise here, so the cap holds
		// under concurrent handshakes. Re-reading the key under that lock
		// closes the race with a revocation: either it committed first (the
		// key reads revoked) or it waits for this commit and its hook then
		// finds this row.
		var one int
		if err := tx.QueryRowContext(ctx, "SELECT 1 FROM agents WHERE agent_id = ? FOR UPDATE", c.AgentID).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return errKeyRevoked
			}
			return err
		}
		var live int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM api_keys WHERE key_id = ? AND agent_id = ? AND revoked_at IS NULL LOCK IN SHARE MODE",
			c.KeyID, c.AgentID).Scan(&live); err != nil {
			return err
		}
		if live != 1 {
			return errKeyRevoked
		}
		// A plain read: the agents row lock already serialises this agent's
		// connects, and its snapshot starts here, after that lock, so it
		// sees every connect that committed before. A locking read would
		// take gap locks that neighbouring agents' INSERTs deadlock on when
		// thousands connect at once.
		rows, err := tx.QueryContext(ctx, "SELECT connection_id FROM push_connections WHERE agent_id = ? ORDER BY connected_at, connection_id", c.AgentID)
		if err != nil {
			return err
		}
		var existing []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			existing = append(existing, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO push_connections
(connection_id, agent_id, key_id, routing_id, instance_id, connected_at, expires_at, frame_tat_us) VALUES (?, ?, ?, ?, ?, ?, ?, 0)`,
			c.ConnectionID, c.AgentID, c.KeyID, c.RoutingID, c.InstanceID, c.ConnectedAt, c.ExpiresAt); err != nil {
			if mysql.IsDuplicate(err) {
				return mesh.Errorf(mesh.KindConflict, "connection_exists", "the connection id is already registered")
			}
			return err
		}
		if over := len(existing) + 1 - MaxConnsPerAgent; over > 0 {
			evicted = existing[:over]
			return deleteIn(ctx, tx, evicted, time.Time{})
		}
		return nil
	})
	if err != nil {
		return Conn{}, err
	}
	rctx, cancel := s.relayContext(ctx)
	defer cancel()
	s.sayByeAndClose(rctx, evicted, api.ByeReplaced)
	return c, nil
}

// Disconnect forgets a connection ($disconnect); an unknown one is no error.
func (s *Service) Disconnect(ctx context.Context, connectionID string) error {
	if !validID(connectionID) {
		return nil
	}
	return s.deleteIn(ctx, []string{connectionID}, time.Time{})
}

// Received spends one unit of the connection's client frame budget for a
// data frame of size bytes. A frame over the budget or over
// MaxClientFrameBytes closes the connection (ByeRateLimited) and forgets
// it. A frame of an unknown connection is ignored.
func (s *Service) Received(ctx context.Context, connectionID string, size int) error {
	if !validID(connectionID) {
		return nil
	}
	if size <= MaxClientFrameBytes {
		n := s.now().UnixMicro()
		iv, tol := ClientFramePer.Microseconds(), ClientFramePer.Microseconds()*ClientFrameBurst
		// One statement: the unit is taken only while the budget allows it.
		res, err := s.DB.ExecContext(ctx, `UPDATE push_connections SET frame_tat_us = GREATEST(frame_tat_us, ?) + ?
WHERE connection_id = ? AND GREATEST(frame_tat_us, ?) + ? - ? <= ?`, n, iv, connectionID, n, iv, tol, n)
		if err != nil {
			return err
		}
		if k, _ := res.RowsAffected(); k == 1 {
			return nil
		}
	}
	var one int
	err := s.DB.QueryRowContext(ctx, "SELECT 1 FROM push_connections WHERE connection_id = ?", connectionID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.closeAndForget(ctx, []string{connectionID}, api.ByeRateLimited, true)
}

// Targets returns the connections of each of agentIDs whose key is not
// revoked, oldest first. Agents without one are absent from the map.
//
// A connection past its expires_at is still served: meshd does not know the
// server's age limit, and one that is past it is still open until API
// Gateway (at its own limit) or the janitor (at expires_at plus
// ExpireGrace) ends it.
func (s *Service) Targets(ctx context.Context, agentIDs []string) (map[string][]string, error) {
	out := map[string][]string{}
	for chunk := range slices.Chunk(UniqueIDs(agentIDs), maxInList) {
		args := make([]any, 0, len(chunk))
		for _, id := range chunk {
			args = append(args, id)
		}
		rows, err := s.DB.QueryContext(ctx, `SELECT c.agent_id, c.connection_id FROM push_connections c
JOIN api_keys k ON k.key_id = c.key_id
WHERE c.agent_id IN (`+mysql.Placeholders(len(chunk))+`) AND k.revoked_at IS NULL
ORDER BY c.agent_id, c.connected_at, c.connection_id`, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var agent, conn string
			if err := rows.Scan(&agent, &conn); err != nil {
				rows.Close()
				return nil, err
			}
			out[agent] = append(out[agent], conn)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Forget deletes the rows of connections that are gone (a 410 from the
// management API); unknown ids are ignored. Rows younger than ForgetMinAge
// are kept: their $connect may still be running, and API Gateway answers
// 410 until it returned.
func (s *Service) Forget(ctx context.Context, connectionIDs []string) error {
	return s.forget(ctx, connectionIDs, s.now().Add(-ForgetMinAge))
}

// forget deletes the rows of connectionIDs connected before olderThan (any
// age when zero).
func (s *Service) forget(ctx context.Context, connectionIDs []string, olderThan time.Time) error {
	for chunk := range slices.Chunk(UniqueIDs(connectionIDs), maxInList) {
		if err := s.deleteIn(ctx, chunk, olderThan); err != nil {
			return err
		}
	}
	return nil
}

// Expire is the push janitor's run: connections past their age (plus
// ExpireGrace) are told ByeExpired, those of revoked keys ByeRevoked; both
// are closed and forgotten. At most ExpireBatch of each per run.
func (s *Service) Expire(ctx context.Context) error {
	now := s.now()
	expired, err := mysql.QueryStrings(ctx, s.DB, "SELECT connection_id FROM push_connections WHERE expires_at < ? ORDER BY expires_at LIMIT ?", now.Add(-ExpireGrace), ExpireBatch)
	if err != nil {
		return err
	}
	revoked, err := mysql.QueryStrings(ctx, s.DB, `SELECT c.connection_id FROM push_connections c JOIN api_keys k ON k.key_id = c.key_id
WHERE k.revoked_at IS NOT NULL ORDER BY c.connection_id LIMIT ?`, ExpireBatch)
	if err != nil {
		return err
	}
	// No request waits on the janitor: its relay work has the run's time.
	return errors.Join(s.closeAndForget(ctx, expired, api.ByeExpired, false), s.closeAndForget(ctx, without(revoked, expired), api.ByeRevoked, false))
}

// CloseKeys closes the connections opened with tokens of keyIDs (ByeRevoked)
// and forgets them: identity's OnKeysRevoked hook.
func (s *Service) CloseKeys(ctx context.Context, keyIDs []string) error {
	var conns []string
	for chunk := range slices.Chunk(UniqueIDs(keyIDs), maxInList) {
		args := make([]any, 0, len(chunk)+1)
		for _, id := range chunk {
			args = append(args, id)
		}
		// Each agent holds at most MaxConnsPerAgent rows; the limit only
		// bounds a pathological table, and the janitor takes any rest.
		args = append(args, ExpireBatch)
		ids, err := mysql.QueryStrings(ctx, s.DB, "SELECT connection_id FROM push_connections WHERE key_id IN ("+mysql.Placeholders(len(chunk))+") ORDER BY connection_id LIMIT ?", args...)
		if err != nil {
			return err
		}
		conns = append(conns, ids...)
	}
	return s.closeAndForget(ctx, conns, api.ByeRevoked, true)
}

// OnKeysRevoked is CloseKeys shaped as identity.Service.OnKeysRevoked: a
// failure is logged (the janitor closes what this missed), never returned
// to the revocation, which has committed.
func (s *Service) OnKeysRevoked(ctx context.Context, keyIDs []string) {
	// The revocation answered its caller already or is about to: its
	// cancellation must not cut the closing short.
	if err := s.CloseKeys(context.WithoutCancel(ctx), keyIDs); err != nil {
		s.log().Warn("push: closing the connections of revoked keys failed; the push janitor will", "keys", len(keyIDs), "err", err)
	}
}

// closeAndForget says bye to conns, closes them and deletes their rows. A
// row whose connection could not be closed is kept for the next janitor run
// (its connection may still be open); one that is gone is forgotten.
// bounded limits the relay work to RelayTimeout (a request path).
func (s *Service) closeAndForget(ctx context.Context, conns []string, reason string, bounded bool) error {
	if len(conns) == 0 {
		return nil
	}
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if bounded {
		rctx, cancel = s.relayContext(ctx)
	}
	err := s.byeAndClose(rctx, conns, reason)
	cancel()
	if err != nil {
		return err
	}
	return s.forget(ctx, conns, time.Time{})
}

// sayByeAndClose tells connections already forgotten why they go and closes
// them; failures are logged: the rows are gone, and API Gateway ends the
// connection at its age limit at the latest.
func (s *Service) sayByeAndClose(ctx context.Context, conns []string, reason string) {
	if err := s.byeAndClose(ctx, conns, reason); err != nil {
		s.log().Warn("push: bye or close failed", "reason", reason, "connections", len(conns), "err", err)
	}
}

// byeAndClose posts the bye frame to conns and then closes them, in one
// step when the relay is a ByeCloser. Gone connections are no error (they
// are being forgotten anyway). Without a relay it does nothing.
func (s *Service) byeAndClose(ctx context.Context, conns []string, reason string) error {
	if len(conns) == 0 || s.Relay == nil {
		return nil
	}
	if bc, ok := s.Relay.(ByeCloser); ok {
		return bc.ByeAndClose(ctx, conns, ByeFrame(reason))
	}
	msgs := make([]Message, len(conns))
	for i, c := range conns {
		msgs[i] = Message{ConnectionID: c, Data: ByeFrame(reason)}
	}
	if _, err := s.Relay.Post(ctx, msgs); err != nil {
		return err
	}
	return s.Relay.Close(ctx, conns)
}

// ByeFrame is the frame {"v":2,"bye":reason} sent before the server closes
// a connection.
func ByeFrame(reason string) []byte {
	b, _ := json.Marshal(api.PushFrame{V: mesh.EnvelopeVersion, Bye: reason})
	return b
}

// execer is *sql.DB, *sql.Tx or *mysql.DB.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// deleteIn deletes the rows of ids (at most maxInList) connected before
// olderThan (any age when zero), in a transaction of its own: a deadlock
// with a concurrent Connect (which locks the agent index, then the primary
// key; a delete by primary key goes the other way) or a lock wait timeout
// is retried, never answered as a failure of $disconnect.
func (s *Service) deleteIn(ctx context.Context, ids []string, olderThan time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	return s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if s.beforeDelete != nil {
			if err := s.beforeDelete(); err != nil {
				return err
			}
		}
		return deleteIn(ctx, tx, ids, olderThan)
	})
}

// deleteIn deletes the rows of ids (at most maxInList) connected before
// olderThan (any age when zero) with q.
func deleteIn(ctx context.Context, q execer, ids []string, olderThan time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, 0, len(ids)+1)
	for _, id := range ids {
		args = append(args, id)
	}
	query := "DELETE FROM push_connections WHERE connection_id IN (" + mysql.Placeholders(len(ids)) + ")"
	if !olderThan.IsZero() {
		query += " AND connected_at < ?"
		args = append(args, olderThan)
	}
	_, err := q.ExecContext(ctx, query, args...)
	return err
}

// UniqueIDs drops repeated and empty ids, keeping the first occurrence's
// order: one statement or call per connection, whoever asks twice.
func UniqueIDs(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// without is a minus b.
func without(a, b []string) []string {
	drop := make(map[string]bool, len(b))
	for _, id := range b {
		drop[id] = true
	}
	var out []string
	for _, id := range a {
		if !drop[id] {
			out = append(out, id)
		}
	}
	return out
}
