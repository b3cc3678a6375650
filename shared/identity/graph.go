package identity

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"strconv"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// CanCommunicate reports whether from may send to to: they are friends or
// share a group, and neither has blocked the other. An agent is neither its
// own friend nor its own group mate, so from == to is false.
//
// When q is the transaction of a send, the answer holds until that
// transaction ends, so a send racing a block, an unfriend or a group exit is
// either refused or committed before it, never after:
//   - the agents rows of both are share-locked first (LockAgents, in the key
//     order of lockPair), so a block, which locks both rows exclusively
//     before it writes, waits for the send or makes it wait;
//   - every read is a locking read, which sees the latest committed rows
//     (not the transaction's snapshot) and holds the friendship and
//     membership rows it found, so an unfriend or a group exit waits for the
//     send.
//
// Outside a transaction (a profile read) each lock lasts one statement.
func CanCommunicate(ctx context.Context, q Querier, from, to string) (bool, error) {
	if from == to {
		return false, nil
	}
	if err := LockAgents(ctx, q, []string{from, to}); err != nil {
		return false, err
	}
	var blocked bool
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) > 0 FROM agent_blocks
WHERE (agent_id = ? AND blocked_id = ?) OR (agent_id = ? AND blocked_id = ?) LOCK IN SHARE MODE`,
		from, to, to, from).Scan(&blocked); err != nil || blocked {
		return false, err
	}
	var friends bool
	if err := q.QueryRowContext(ctx, "SELECT COUNT(*) > 0 FROM friendships WHERE agent_id = ? AND friend_id = ? LOCK IN SHARE MODE",
		from, to).Scan(&friends); err != nil || friends {
		return friends, err
	}
	var mates bool
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) > 0 FROM group_members a JOIN group_members b ON b.group_id = a.group_id
WHERE a.agent_id = ? AND b.agent_id = ? LOCK IN SHARE MODE`, from, to).Scan(&mates)
	return mates, err
}

// maxLockChunk bounds the IN list of one LockAgents statement.
const maxLockChunk = 500

// LockAgents share-locks the agents rows of ids (sorted in place) in
// ascending key order, the order lockPair takes them exclusively and
// outbox.Append share-locks recipients in. A write that relies on the
// relationships of these agents takes them first, before any other locking
// read of the graph: a block locks both its agents rows before it writes
// any row of the graph, so waiting for it here cannot close a cycle.
func LockAgents(ctx context.Context, q Querier, ids []string) error {
	sort.Strings(ids)
	for start := 0; start < len(ids); start += maxLockChunk {
		chunk := ids[start:min(start+maxLockChunk, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := q.QueryContext(ctx, "SELECT agent_id FROM agents WHERE agent_id IN ("+mysql.Placeholders(len(chunk))+
			") ORDER BY agent_id LOCK IN SHARE MODE", args...)
		if err != nil {
			return err
		}
		for rows.Next() { // the locks are the point, not the ids
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Friend is one entry of a friends list, with the friend's presence.
type Friend = api.Friend

// Presence is the public profile and presence of an agent.
type Presence = api.Presence

// FriendRequest is a friend request and its outcome.
type FriendRequest = api.FriendRequest

// Friend request states.
const (
	RequestPending   = "pending"
	RequestAccepted  = "accepted"
	RequestRejected  = "rejected"
	RequestWithdrawn = "withdrawn"
)

var (
	errAgentNotFound   = mesh.Errorf(mesh.KindNotFound, "agent_not_found", "no such agent")
	errRequestNotFound = mesh.Errorf(mesh.KindNotFound, "request_not_found", "no such friend request")
	errNotFriends      = mesh.Errorf(mesh.KindNotFound, "not_friends", "you are not friends with that agent")
)

// lockPair locks the agents rows of a and b in key order (the one lock order
// of every friendship change, so concurrent requests between the same two
// agents serialise instead of crossing) and reports which exist.
func lockPair(ctx context.Context, tx *sql.Tx, a, b string) (map[string]bool, error) {
	rows, err := tx.QueryContext(ctx, "SELECT agent_id FROM agents WHERE agent_id IN (?, ?) ORDER BY agent_id FOR UPDATE", a, b)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		found[id] = true
	}
	return found, rows.Err()
}

func areFriends(ctx context.Context, q Querier, a, b string) (bool, error) {
	var ok bool
	err := q.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM friendships WHERE agent_id = ? AND friend_id = ?)", a, b).Scan(&ok)
	return ok, err
}

// befriend stores the friendship in both directions and settles every
// pending request between the two as accepted. The caller holds lockPair.
func befriend(ctx context.Context, tx *sql.Tx, by Actor, a, b string, now time.Time) error {
	if err := Audit(ctx, tx, by, now, AuditFriendshipCreated, a, b, auditDetail("%s and %s are friends", a, b)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO friendships (agent_id, friend_id, created_at) VALUES (?, ?, ?), (?, ?, ?)
ON DUPLICATE KEY UPDATE created_at = created_at`, a, b, now, b, a, now); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE friend_requests SET status = 'accepted', decided_at = ?
WHERE status = 'pending' AND ((from_agent = ? AND to_agent = ?) OR (from_agent = ? AND to_agent = ?))`, now, a, b, b, a)
	return err
}

// SendFriendRequest asks to befriend to. A pending request in the same
// direction is returned as is (created = false: sending twice is harmless);
// a pending request the other way round means both want it, so the two
// become friends at once and the new request is recorded as accepted.
func (s *Service) SendFriendRequest(ctx context.Context, from, to string) (req FriendRequest, created bool, err error) {
	if !mesh.ValidAgentID(to) {
		return req, false, errInvalidAgentID("to")
	}
	if to == from {
		return req, false, mesh.Errorf(mesh.KindUnprocessable, "self_request", "an agent cannot befriend itself")
	}
	now := s.Now()
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		created = false
		if err := TakeRate(ctx, tx, from, now); err != nil {
			return err
		}
		found, err := lockPair(ctx, tx, from, to)
		if err != nil {
			return err
		}
		if !found[to] {
			return s.unseenRequest(ctx, tx, from, to, now)
		}
		if blocked, err := blockedEither(ctx, tx, from, to); err != nil {
			return err
		} else if blocked == from {
			return mesh.Errorf(mesh.KindConflict, "agent_blocked", "you blocked %q: unblock it first", to)
		} else if blocked == to {
			return s.unseenRequest(ctx, tx, from, to, now)
		}
		if err := s.coolDown(ctx, tx, from, to, now); err != nil {
			return err
		}
		if ok, err := areFriends(ctx, tx, from, to); err != nil || ok {
			if err == nil {
				err = mesh.Errorf(mesh.KindConflict, "already_friends", "you are already friends with %q", to)
			}
			return err
		}
		var id int64
		err = tx.QueryRowContext(ctx, `SELECT request_id, created_at FROM friend_requests
WHERE from_agent = ? AND status = 'pending' AND to_agent = ? ORDER BY request_id LIMIT 1`, from, to).Scan(&id, &req.CreatedAt)
		if err == nil {
			req = FriendRequest{RequestID: strconv.FormatInt(id, 10), From: from, To: to, Status: RequestPending, CreatedAt: req.CreatedAt}
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var reverse bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM friend_requests
WHERE from_agent = ? AND status = 'pending' AND to_agent = ?)`, to, from).Scan(&reverse); err != nil {
			return err
		}
		req = FriendRequest{From: from, To: to, Status: RequestPending, CreatedAt: now}
		var decided any
		if !reverse {
			// Agents of one account whose policy says so befriend at once.
			if reverse, err = sameAccountAuto(ctx, tx, from, to); err != nil {
				return err
			}
		}
		if err := Audit(ctx, tx, agentActor(from), now, AuditRequestSent, from, to, auditDetail("%s asked %s", from, to)); err != nil {
			return err
		}
		if reverse {
			if err := befriend(ctx, tx, agentActor(from), from, to, now); err != nil {
				return err
			}
			req.Status, req.DecidedAt, decided = RequestAccepted, &now, now
		}
		res, err := tx.ExecContext(ctx, "INSERT INTO friend_requests (from_agent, to_agent, status, created_at, decided_at) VALUES (?, ?, ?, ?, ?)",
			from, to, req.Status, now, decided)
		if err != nil {
			return err
		}
		if id, err = res.LastInsertId(); err != nil {
			return err
		}
		req.RequestID, created = strconv.FormatInt(id, 10), true
		return nil
	})
	var unseen *unseenError
	if errors.As(err, &unseen) {
		return unseen.req, true, nil
	}
	return req, created, err
}

// A request to an agent that does not exist, or that blocked the sender,
// must answer exactly as a new request would, or the answer tells whether an
// id exists (and who blocked whom). unseenRequest inserts the row to draw a
// request id from the same sequence as real requests, then returns an
// unseenError so that InTx rolls the row back: nothing is stored, and the id
// (auto-increment values are not reused after a rollback) looks like any
// other.
func (s *Service) unseenRequest(ctx context.Context, tx *sql.Tx, from, to string, now time.Time) error {
	res, err := tx.ExecContext(ctx, "INSERT INTO friend_requests (from_agent, to_agent, status, created_at, decided_at) VALUES (?, ?, ?, ?, ?)",
		from, to, RequestPending, now, nil)
	if err != nil {
		return err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return err
	}
	return &unseenError{req: FriendRequest{RequestID: strconv.FormatInt(id, 10), From: from, To: to, Status: RequestPending, CreatedAt: now}}
}

// unseenError carries the answer of an unseen request out of a transaction
// that must roll back.
type unseenError struct{ req FriendRequest }

func (e *unseenError) Error() string { return "friend request not stored" }

// DefaultRequestCoolDown is how long a rejected requester waits before asking
// the same agent again.
const DefaultRequestCoolDown = 24 * time.Hour

// coolDown refuses a request from -> to while the latest rejection of the
// same pair is younger than the cool-down.
func (s *Service) coolDown(ctx context.Context, tx *sql.Tx, from, to string, now time.Time) error {
	wait := s.RequestCoolDown
	if wait == 0 {
		wait = DefaultRequestCoolDown
	}
	var last sql.NullTime
	if err := tx.QueryRowContext(ctx, `SELECT MAX(decided_at) FROM friend_requests
WHERE from_agent = ? AND status = 'rejected' AND to_agent = ?`, from, to).Scan(&last); err != nil {
		return err
	}
	if !last.Valid || !now.Before(last.Time.Add(wait)) {
		return nil
	}
	left := last.Time.Add(wait).Sub(now)
	return &mesh.Error{Kind: mesh.KindRateLimited, Code: "request_cool_down",
		Message:    "that agent rejected your last request; you can ask again after the cool-down",
		RetryAfter: int((left + time.Second - 1) / time.Second)}
}

// FriendRequests are the caller's pending requests, oldest first.
type FriendRequests = api.FriendRequests

// MaxListedRequests caps each direction of the pending-requests list.
const MaxListedRequests = 500

// ListFriendRequests returns pending requests to and from agentID.
func (s *Service) ListFriendRequests(ctx context.Context, agentID string, incoming, outgoing bool) (FriendRequests, error) {
	if err := s.takeReadRate(ctx, agentID); err != nil {
		return FriendRequests{}, err
	}
	out := FriendRequests{Incoming: []FriendRequest{}, Outgoing: []FriendRequest{}}
	var err error
	if incoming {
		if out.Incoming, err = s.pendingRequests(ctx, `SELECT request_id, from_agent, to_agent, status, created_at, decided_at
FROM friend_requests WHERE to_agent = ? AND status = 'pending' ORDER BY request_id LIMIT ?`, agentID); err != nil {
			return out, err
		}
	}
	if outgoing {
		if out.Outgoing, err = s.pendingRequests(ctx, `SELECT request_id, from_agent, to_agent, status, created_at, decided_at
FROM friend_requests WHERE from_agent = ? AND status = 'pending' ORDER BY request_id LIMIT ?`, agentID); err != nil {
			return out, err
		}
	}
	return out, nil
}

func (s *Service) pendingRequests(ctx context.Context, query, agentID string) ([]FriendRequest, error) {
	rows, err := s.DB.QueryContext(ctx, query, agentID, MaxListedRequests)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	list := []FriendRequest{}
	for rows.Next() {
		r, err := scanRequest(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, r)
	}
	return list, rows.Err()
}

type scanner interface{ Scan(dest ...any) error }

func scanRequest(row scanner) (FriendRequest, error) {
	var r FriendRequest
	var id int64
	var decided sql.NullTime
	if err := row.Scan(&id, &r.From, &r.To, &r.Status, &r.CreatedAt, &decided); err != nil {
		return r, err
	}
	r.RequestID = strconv.FormatInt(id, 10)
	if decided.Valid {
		r.DecidedAt = &decided.Time
	}
	return r, nil
}

// parseRequestID turns a path id into a request id; anything else is a 404.
func parseRequestID(id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != id {
		return 0, errRequestNotFound
	}
	return n, nil
}

// decideRequest runs decide, in one transaction after taking caller's rate,
// on the friend request requestID, and returns the request as decide left
// it. An id that is not a request id is a 404 before anything is read.
func (s *Service) decideRequest(ctx context.Context, caller, requestID string, decide func(tx *sql.Tx, id int64, now time.Time) (FriendRequest, error)) (FriendRequest, error) {
	id, err := parseRequestID(requestID)
	if err != nil {
		return FriendRequest{}, err
	}
	now := s.Now()
	var req FriendRequest
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if err := TakeRate(ctx, tx, caller, now); err != nil {
			return err
		}
		var err error
		req, err = decide(tx, id, now)
		return err
	})
	return req, err
}

// stillPending reports whether req waits for a decision. A request already
// decided as decision answers the same again (false and no error); one
// settled otherwise is a 409.
func stillPending(req FriendRequest, decision string) (bool, error) {
	switch req.Status {
	case RequestPending:
		return true, nil
	case decision:
		return false, nil
	default:
		return false, mesh.Errorf(mesh.KindConflict, "request_not_pending", "the request was already %s", req.Status)
	}
}

// lockRequest reads the friend request id and locks its row until the
// transaction ends; sql.ErrNoRows when there is none.
func lockRequest(ctx context.Context, tx *sql.Tx, id int64) (FriendRequest, error) {
	return scanRequest(tx.QueryRowContext(ctx, `SELECT request_id, from_agent, to_agent, status, created_at, decided_at
FROM friend_requests WHERE request_id = ? FOR UPDATE`, id))
}

// AcceptFriendRequest lets the recipient accept a request. Accepting an
// accepted request answers the same again; a rejected or withdrawn one is a
// 409. Only the two parties learn that a request exists: anyone else gets 404.
func (s *Service) AcceptFriendRequest(ctx context.Context, caller, requestID string) (FriendRequest, error) {
	return s.decideRequest(ctx, caller, requestID, func(tx *sql.Tx, id int64, now time.Time) (req FriendRequest, err error) {
		// Read the pair first (no lock) so the agents rows are locked before
		// the request row, the order SendFriendRequest uses.
		var from, to string
		err = tx.QueryRowContext(ctx, "SELECT from_agent, to_agent FROM friend_requests WHERE request_id = ?", id).Scan(&from, &to)
		if errors.Is(err, sql.ErrNoRows) || err == nil && caller != from && caller != to {
			return req, errRequestNotFound
		}
		if err != nil {
			return req, err
		}
		if caller == from {
			return req, mesh.Errorf(mesh.KindForbidden, "cannot_accept_own_request", "only the recipient can accept a friend request")
		}
		if !decidedByAccount(ctx) {
			p, err := PolicyOf(ctx, tx, to)
			if err != nil {
				return req, err
			}
			if p.FriendPolicy == PolicyAccount {
				return req, errAccountApproval
			}
		}
		if _, err := lockPair(ctx, tx, from, to); err != nil {
			return req, err
		}
		if req, err = lockRequest(ctx, tx, id); err != nil {
			return req, err
		}
		if pending, err := stillPending(req, RequestAccepted); !pending {
			return req, err
		}
		if err := befriend(ctx, tx, agentActor(caller), from, to, now); err != nil {
			return req, err
		}
		req.Status, req.DecidedAt = RequestAccepted, &now
		return req, nil
	})
}

// RejectFriendRequest lets the recipient reject a request, or the sender
// withdraw it. Repeating the same decision answers the same again; any other
// settled state is a 409.
func (s *Service) RejectFriendRequest(ctx context.Context, caller, requestID string) (FriendRequest, error) {
	return s.decideRequest(ctx, caller, requestID, func(tx *sql.Tx, id int64, now time.Time) (req FriendRequest, err error) {
		req, err = lockRequest(ctx, tx, id)
		if errors.Is(err, sql.ErrNoRows) || err == nil && caller != req.From && caller != req.To {
			return req, errRequestNotFound
		}
		if err != nil {
			return req, err
		}
		want := RequestRejected
		if caller == req.From {
			want = RequestWithdrawn
		}
		if pending, err := stillPending(req, want); !pending {
			return req, err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE friend_requests SET status = ?, decided_at = ? WHERE request_id = ?", want, now, id); err != nil {
			return req, err
		}
		action := AuditRequestRejected
		if want == RequestWithdrawn {
			action = AuditRequestWithdrawn
		}
		if err := Audit(ctx, tx, agentActor(caller), now, action, req.To, req.From, auditDetail("request %d from %s to %s", id, req.From, req.To)); err != nil {
			return req, err
		}
		req.Status, req.DecidedAt = want, &now
		return req, nil
	})
}

// ListFriends returns a page of agentID's friends with their presence,
// ordered by agent id.
func (s *Service) ListFriends(ctx context.Context, agentID string, p Page) (api.FriendPage, error) {
	if err := s.takeReadRate(ctx, agentID); err != nil {
		return api.FriendPage{}, err
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT a.agent_id, a.name, a.status, a.last_heartbeat_at, f.created_at
FROM friendships f JOIN agents a ON a.agent_id = f.friend_id
WHERE f.agent_id = ? AND f.friend_id > ? ORDER BY f.friend_id LIMIT ?`, agentID, p.After, p.Limit+1)
	if err != nil {
		return api.FriendPage{}, err
	}
	defer rows.Close()
	list := []Friend{}
	for rows.Next() {
		var f Friend
		var hb sql.NullTime
		if err := rows.Scan(&f.AgentID, &f.Name, &f.Status, &hb, &f.Since); err != nil {
			return api.FriendPage{}, err
		}
		f.LastHeartbeatAt = timePtr(hb)
		list = append(list, f)
	}
	if err := rows.Err(); err != nil {
		return api.FriendPage{}, err
	}
	list, next := cutPage(list, p.Limit, func(x Friend) string { return x.AgentID })
	return api.FriendPage{Friends: list, NextAfter: next}, nil
}

// RemoveFriend ends the friendship of a and b (both directions).
func (s *Service) RemoveFriend(ctx context.Context, a, b string) error {
	if !mesh.ValidAgentID(b) || a == b {
		return errNotFriends
	}
	now := s.Now()
	return s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if err := TakeRate(ctx, tx, a, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM friendships WHERE (agent_id = ? AND friend_id = ?) OR (agent_id = ? AND friend_id = ?)", a, b, b, a)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = errNotFriends
			}
			return err
		}
		return Audit(ctx, tx, agentActor(a), now, AuditFriendshipRemoved, a, b, auditDetail("%s and %s are no longer friends", a, b))
	})
}

// AdminFriendship is the answer to the admin friendship route.
type AdminFriendship = api.Friendship

// AdminCreateFriendship makes a and b friends without a request (operator
// bootstrap). created is false when they already were.
func (s *Service) AdminCreateFriendship(ctx context.Context, a, b string) (f AdminFriendship, created bool, err error) {
	if !mesh.ValidAgentID(a) {
		return f, false, errInvalidAgentID("a")
	}
	if !mesh.ValidAgentID(b) {
		return f, false, errInvalidAgentID("b")
	}
	if a == b {
		return f, false, mesh.Errorf(mesh.KindUnprocessable, "self_friendship", "a and b must be different agents")
	}
	now := s.Now()
	f = AdminFriendship{A: a, B: b}
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		found, err := lockPair(ctx, tx, a, b)
		if err != nil {
			return err
		}
		if !found[a] || !found[b] {
			return errAgentNotFound
		}
		err = tx.QueryRowContext(ctx, "SELECT created_at FROM friendships WHERE agent_id = ? AND friend_id = ?", a, b).Scan(&f.Since)
		if err == nil {
			created = false
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		f.Since, created = now, true
		return befriend(ctx, tx, AdminActor, a, b, now)
	})
	return f, created, err
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	return &v
}

// sameAccountAuto reports whether a request from from to to is accepted at
// once: both agents belong to one account and to's policy says so.
func sameAccountAuto(ctx context.Context, q Querier, from, to string) (bool, error) {
	pt, err := PolicyOf(ctx, q, to)
	if err != nil || !pt.SameAccountAuto {
		return false, err
	}
	pf, err := PolicyOf(ctx, q, from)
	return err == nil && pf.AccountID == pt.AccountID, err
}
