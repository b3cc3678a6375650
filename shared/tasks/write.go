package tasks

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

const (
	insertIdemSQL = `INSERT INTO idempotency_keys (sender, message_id, request_hash, response, created_at) VALUES (?, ?, ?, '', ?)`
	// readIdemSQL is the fresh locking read after a duplicate key: a locking
	// read sees the latest committed row whatever the transaction's snapshot.
	// It is a shared lock, not FOR UPDATE: the failed INSERT already holds a
	// shared lock on the row, and parallel retries all upgrading to exclusive
	// would deadlock one another.
	readIdemSQL = `SELECT request_hash, response FROM idempotency_keys WHERE sender = ? AND message_id = ? LOCK IN SHARE MODE`
	saveIdemSQL = `UPDATE idempotency_keys SET response = ? WHERE sender = ? AND message_id = ?`

	lockTaskSQL      = `SELECT task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at FROM tasks WHERE task_id = ? FOR UPDATE`
	insertTaskSQL    = `INSERT INTO tasks (task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	touchTaskSQL     = `UPDATE tasks SET updated_at = ? WHERE task_id = ?`
	moveTaskSQL      = `UPDATE tasks SET status = ?, updated_at = ? WHERE task_id = ?`
	insertMessageSQL = `INSERT INTO task_messages (task_id, message_id, sender, parts, created_at) VALUES (?, ?, ?, ?, ?)`
	insertArtifact   = `INSERT INTO task_artifacts (task_id, artifact_id, name, parts, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?)`

	// The group statements are locking reads, so the membership and the
	// blocks a fan-out relies on hold until it commits: a member's exit or
	// a block committing meanwhile waits for the fan-out (see
	// identity.CanCommunicate). The order is group_members, agents (all
	// members, ascending), agent_blocks; no writer takes two of them the
	// other way round.
	memberGroupSQL = `SELECT g.context_id FROM mesh_groups g JOIN group_members m ON m.group_id = g.group_id WHERE g.group_id = ? AND m.agent_id = ? LOCK IN SHARE MODE`
	// groupOthersSQL lists the other members (a primary key range).
	groupOthersSQL = `SELECT agent_id FROM group_members WHERE group_id = ? AND agent_id <> ? ORDER BY agent_id LOCK IN SHARE MODE`
	// blockedBySQL and blockersOfSQL are both directions of the sender's
	// blocks (agent_blocks' primary key and its (blocked_id, agent_id) key);
	// a fan-out skips the members on the other side of either.
	blockedBySQL    = `SELECT blocked_id FROM agent_blocks WHERE agent_id = ? LOCK IN SHARE MODE`
	blockersOfSQL   = `SELECT agent_id FROM agent_blocks WHERE blocked_id = ? LOCK IN SHARE MODE`
	maxRowsPerWrite = 500
	maxBytesPerStmt = 4 << 20
)

var (
	errTaskNotFound = mesh.Errorf(mesh.KindNotFound, "task_not_found", "no such task among yours")
	errTaskTerminal = mesh.Errorf(mesh.KindConflict, "task_terminal", "the task is finished (completed, failed, canceled or rejected)")
	errIDConflict   = mesh.Errorf(mesh.KindConflict, "message_id_conflict", "this message_id was already used by you for a different request")
)

// The write routes' bodies and answers are shared/api's wire types.
type (
	// SendRequest is the body of POST /v1/messages.
	SendRequest = api.SendRequest
	// SendResult answers a send or a reply.
	SendResult = api.SendResult
	// ReplyRequest is the body of POST /v1/tasks/{id}/messages.
	ReplyRequest = api.ReplyRequest
	// StatusRequest is the body of POST /v1/tasks/{id}/status.
	StatusRequest = api.StatusRequest
	// StatusResult answers a status move.
	StatusResult = api.StatusResult
	// ArtifactRequest is the body of POST /v1/tasks/{id}/artifacts.
	ArtifactRequest = api.ArtifactRequest
	// ArtifactResult identifies an added artifact.
	ArtifactResult = api.ArtifactResult
	// GroupSendRequest is the body of POST /v1/groups/{id}/messages.
	GroupSendRequest = api.GroupSendRequest
	// GroupSendResult answers a group send: one task per recipient.
	GroupSendResult = api.GroupSendResult
	// GroupTask is the task a group send opened with one member.
	GroupTask = api.GroupTask
)

// writeCtx is what a write's body gets besides its transaction.
type writeCtx struct {
	caller    string
	messageID string // the client's, or one minted for this request
	now       time.Time
	traceID   string
}

// write runs one write transaction: rate limit (first statement, so a 429
// rolls everything back), the idempotency claim when the client named its
// message, the body, the stored result and the commit. A retry of a
// committed request (same sender, message_id and content) returns the
// original result, decoded from its stored JSON, and writes nothing but its
// rate token.
func write[T any](ctx context.Context, s *Service, caller, clientID string, hashOf any,
	body func(ctx context.Context, tx *sql.Tx, w writeCtx) (T, error)) (T, error) {
	var zero T
	w, hash, err := s.startWrite(ctx, caller, clientID, hashOf)
	if err != nil {
		return zero, err
	}
	var out T
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		out = zero // a deadlock retry starts afresh
		w.now = s.Clock()
		if err := identity.TakeRate(ctx, tx, caller, w.now); err != nil {
			return err
		}
		if clientID != "" {
			stored, done, err := claimKey(ctx, tx, caller, clientID, hash[:], w.now)
			if err != nil || done {
				if err == nil {
					err = json.Unmarshal(stored, &out)
				}
				return err
			}
		}
		res, err := body(ctx, tx, w)
		if err != nil {
			return err
		}
		if clientID != "" {
			b, err := json.Marshal(res)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, saveIdemSQL, string(b), caller, clientID); err != nil {
				return err
			}
		}
		out = res
		if s.Failpoint != nil {
			return s.Failpoint(ctx, FailpointBeforeCommit)
		}
		return nil
	})
	if err != nil {
		return zero, err
	}
	return out, nil
}

// startWrite is what a write knows before its transaction: its context,
// with the message id minted once outside it (a deadlock retry reuses it),
// and the hash of the request that decides whether a reused client
// message_id is a retry or a conflict.
func (s *Service) startWrite(ctx context.Context, caller, clientID string, hashOf any) (writeCtx, [sha256.Size]byte, error) {
	w := writeCtx{caller: caller, messageID: clientID, traceID: s.traceID(ctx)}
	if w.messageID == "" {
		w.messageID = newID()
	}
	canon, err := json.Marshal(hashOf)
	if err != nil {
		return writeCtx{}, [sha256.Size]byte{}, mesh.Internal(err)
	}
	return w, sha256.Sum256(canon), nil
}

// storedResponse reads the idempotency row of sender's messageID with query
// (readIdemSQL or idemReadSQL): its stored response when the request hash
// matches, errIDConflict when it does not, sql.ErrNoRows when there is none.
func storedResponse(ctx context.Context, tx identity.Querier, query, sender, messageID string, hash []byte) ([]byte, error) {
	var stored, response []byte
	if err := tx.QueryRowContext(ctx, query, sender, messageID).Scan(&stored, &response); err != nil {
		return nil, err
	}
	if string(stored) != string(hash) {
		return nil, errIDConflict
	}
	return response, nil
}

// claimKey inserts the idempotency key, which also serialises concurrent
// retries of one request on its row. If the key exists, it returns the stored
// response (done) or a 409 when the content differs.
func claimKey(ctx context.Context, tx *sql.Tx, sender, messageID string, hash []byte, now time.Time) ([]byte, bool, error) {
	_, err := tx.ExecContext(ctx, insertIdemSQL, sender, messageID, hash, now)
	if err == nil {
		return nil, false, nil
	}
	if !mysql.IsDuplicate(err) {
		return nil, false, err
	}
	response, err := storedResponse(ctx, tx, readIdemSQL, sender, messageID, hash)
	if err != nil {
		return nil, false, err
	}
	return response, true, nil
}

// lockTask reads a task FOR UPDATE and checks caller is one of its parties;
// to anyone else the task does not exist.
func lockTask(ctx context.Context, tx *sql.Tx, taskID, caller string) (*Task, error) {
	t := &Task{}
	var group sql.NullString
	err := tx.QueryRowContext(ctx, lockTaskSQL, taskID).Scan(&t.TaskID, &t.ContextID, &group, &t.Initiator, &t.Recipient, &t.Status, &t.CreatedAt, &t.UpdatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errTaskNotFound
	}
	if err != nil {
		return nil, err
	}
	t.GroupID = group.String
	if role(t, caller) == "" {
		return nil, errTaskNotFound
	}
	return t, nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// event builds the outbox event of t for recipient to.
func (w writeCtx) event(typ, to string, t *Task, body any) (outbox.Event, error) {
	b, err := json.Marshal(body)
	return outbox.Event{
		Type: typ, To: to, From: w.caller, TaskID: t.TaskID, ContextID: t.ContextID, GroupID: t.GroupID,
		MessageID: w.messageID, OccurredAt: w.now, Body: b, TraceID: w.traceID,
	}, err
}

// ---- POST /v1/messages ----

// hashed is what the request hash covers: the operation and everything the
// client chose, so a reused message_id on another route or with other
// content is a conflict.
type hashed struct {
	Op        string          `json:"op"`
	To        string          `json:"to,omitempty"`
	TaskID    string          `json:"task_id,omitempty"`
	ContextID string          `json:"context_id,omitempty"`
	GroupID   string          `json:"group_id,omitempty"`
	Status    string          `json:"status,omitempty"`
	Name      string          `json:"name,omitempty"`
	Parts     json.RawMessage `json:"parts,omitempty"`
}

// Send implements POST /v1/messages: a new task to req.To, or one more
// message in req.TaskID (a task of the caller whose other party is req.To).
//
// Who may send to whom: only friends and group mates. An unknown recipient
// gets the same 403 not_reachable as an existing stranger, so the route
// does not reveal which agent ids exist.
func (s *Service) Send(ctx context.Context, caller string, req SendRequest) (SendResult, error) {
	return s.SendKey(ctx, caller, "", req)
}

// checkSendTo refuses a send's recipient before anything is read.
func checkSendTo(caller, to string) error {
	switch {
	case to == "":
		return mesh.Errorf(mesh.KindInvalid, "invalid_recipient", "to is required")
	case !mesh.ValidAgentID(to):
		return mesh.Errorf(mesh.KindInvalid, "invalid_recipient", "to must be an agent id (%s)", mesh.AgentIDPattern)
	case to == caller:
		return mesh.Errorf(mesh.KindUnprocessable, "cannot_message_self", "an agent cannot send a message to itself")
	}
	return nil
}

// SendKey is Send for a caller whose token was verified but not its API
// key's liveness (keyID; "" when already checked): a revoked key is 401
// key_revoked, checked inside the send's transaction (newTask) or just
// before it (a message in an existing task).
func (s *Service) SendKey(ctx context.Context, caller, keyID string, req SendRequest) (SendResult, error) {
	s.WithDefaults()
	if err := checkSendTo(caller, req.To); err != nil {
		return SendResult{}, err
	}
	parts, h, err := s.sendInput(req)
	if err != nil {
		return SendResult{}, err
	}
	if req.TaskID == "" {
		res, _, err := s.newTask(ctx, caller, keyID, req, parts, h)
		return res, err
	}
	if keyID != "" {
		if err := identity.CheckKey(ctx, s.DB, caller, keyID); err != nil {
			return SendResult{}, err
		}
	}
	return write(ctx, s, caller, req.MessageID, h, func(ctx context.Context, tx *sql.Tx, w writeCtx) (SendResult, error) {
		gate, err := identity.OpenSendGate(ctx, tx, caller, req.To, "")
		if err != nil {
			return SendResult{}, err
		}
		if !gate.Reachable {
			return SendResult{}, mesh.ErrNotReachable
		}
		t, err := lockTask(ctx, tx, req.TaskID, caller)
		if err != nil {
			return SendResult{}, err
		}
		switch {
		case other(t, caller) != req.To:
			return SendResult{}, mesh.Errorf(mesh.KindUnprocessable, "recipient_mismatch", "task %s is between you and another agent, not %s", t.TaskID, req.To)
		case req.ContextID != "" && req.ContextID != t.ContextID:
			return SendResult{}, mesh.Errorf(mesh.KindUnprocessable, "context_mismatch", "task %s belongs to context %s", t.TaskID, t.ContextID)
		case mesh.TerminalTaskState(t.Status):
			return SendResult{}, errTaskTerminal
		}
		t.UpdatedAt = w.now
		if _, err := tx.ExecContext(ctx, touchTaskSQL, w.now, t.TaskID); err != nil {
			return SendResult{}, err
		}
		return s.appendMessage(ctx, tx, w, t, parts)
	})
}

// idemReadSQL is the new-task send's idempotency lookup, a plain read (a
// locking one would hold a gap of the sender's keys and deadlock two sends
// of one sender). A send reads it only when it has something else to say:
// a fresh message_id, the usual case, is known fresh by the final INSERT
// on the primary key, and one already taken fails there and reruns, reading
// it first.
const (
	idemReadSQL = `SELECT request_hash, response FROM idempotency_keys WHERE sender = ? AND message_id = ?`
	putIdemSQL  = `INSERT INTO idempotency_keys (sender, message_id, request_hash, response, created_at) VALUES (?, ?, ?, ?, ?)`
	// maxSendAttempts bounds the reruns of a new-task send whose idempotency
	// key was taken: by a committed request (a retry) or by a duplicate
	// committing meanwhile. The rerun answers it.
	maxSendAttempts = 2
)

// errReplay rolls back a new-task send that found its request already
// committed (its counter bump must not stay); errKeyTaken one whose
// idempotency key was taken.
var (
	errReplay   = errors.New("tasks: replay of a committed send")
	errKeyTaken = errors.New("tasks: idempotency key taken")
)

// newTask is a send that opens a task, in as few round trips as it can.
//
// Without a context, its first attempt is one round trip: START
// TRANSACTION, the CALL of the send procedure (callNewTask) and COMMIT.
// The procedure does what the pipe below does when the send goes through,
// and refuses everything else with one signal; the pipe then runs and says
// why. A message_id taken meanwhile fails the procedure on its key, and the
// pipe's second attempt reads its answer.
//
// Otherwise (a context to claim, or a failpoint to stop at before the
// commit) a mysql.Pipe sends its 8 statements (with a client message_id)
// in 3.
//
//  1. START TRANSACTION and identity.TakeRateBumping: the sender's rate
//     token and the recipient's counter (the event's seq; the row stays
//     locked until commit, so seqs are gapless and in commit order);
//  2. identity.OpenSendGate: the key's liveness, who may talk to whom (held
//     by share locks), the recipient's key_epoch;
//  3. the task (a context the server mints is the task's own id, which
//     claimContext recognizes: no task_contexts row to write), its message,
//     the outbox event, the idempotency row with its final answer, and
//     COMMIT. The server stops at the first failing statement, so a
//     COMMIT never follows a failed insert.
//
// The stored answer of the message_id is read only when the send would
// refuse (the stored answer or its conflict comes first, after the key's
// 401, as it always did) and on a rerun. A retry of a committed request
// or a concurrent duplicate fails on the idempotency key at the end, rolls
// back (the seq it took must not stay) and reruns, finding the stored
// answer; a replay spends its rate token on its own, as it always did.
// replayed says the answer is a committed request's (SendA2A tells a
// client's retry from its reuse of a message id by it).
func (s *Service) newTask(ctx context.Context, caller, keyID string, req SendRequest, parts json.RawMessage, h hashed) (res SendResult, replayed bool, err error) {
	clientID := req.MessageID
	w, hash, err := s.startWrite(ctx, caller, clientID, h)
	if err != nil {
		return SendResult{}, false, err
	}
	var out SendResult
	// stored answers with the replay (errReplay, out set) or conflict of a
	// committed request with clientID, nil when there is none.
	stored := func(tx identity.Querier) error {
		resp, err := storedResponse(ctx, tx, idemReadSQL, caller, clientID, hash[:])
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		if err := json.Unmarshal(resp, &out); err != nil {
			return err
		}
		return errReplay
	}
	first := 1
	if req.ContextID == "" && s.Failpoint == nil {
		res, err := s.callNewTask(ctx, w, keyID, req, parts, hash[:])
		switch {
		case err == nil:
			return res, false, nil
		case mysql.IsDuplicate(err):
			// The message_id is taken: the pipe reads its answer first.
			first = 2
		case !mysql.IsSignal(err, sendRefused):
			return SendResult{}, false, err
		}
	}
	for attempt := first; ; attempt++ {
		err = s.DB.InPipe(ctx, func(tx *mysql.Pipe) error {
			out = SendResult{}
			w.now = s.Clock()
			seq, err := identity.TakeRateBumping(ctx, tx, caller, keyID, req.To, w.now)
			if err != nil {
				return err
			}
			gate, err := identity.OpenSendGate(ctx, tx, caller, req.To, keyID)
			if err != nil {
				return err
			}
			if clientID != "" && attempt > 1 {
				if err := stored(tx); err != nil {
					return err
				}
			}
			res, err := s.insertTask(ctx, tx, w, req, parts, gate, seq)
			if err != nil {
				var refusal *mesh.Error
				if clientID != "" && attempt == 1 && errors.As(err, &refusal) {
					// A retry of a committed request gets its answer, not
					// the refusal a changed graph would give it now.
					if serr := stored(tx); serr != nil {
						return serr
					}
				}
				return err
			}
			if clientID != "" {
				b, err := json.Marshal(res)
				if err != nil {
					return err
				}
				// Sent with the commit: a key taken meanwhile fails it
				// with a duplicate, answered below.
				tx.Queue(putIdemSQL, caller, clientID, hash[:], string(b), w.now)
			}
			out = res
			if s.Failpoint != nil {
				return s.Failpoint(ctx, FailpointBeforeCommit)
			}
			return nil
		})
		switch {
		case err == nil:
			return out, false, nil
		case errors.Is(err, errReplay):
			// The replay's own rate token, as a replay inside one
			// transaction spent it; the answer stands regardless.
			if err := identity.TakeRate(ctx, s.DB, caller, s.Clock()); err != nil && mesh.AsError(err).Kind != mesh.KindRateLimited {
				return SendResult{}, false, err
			}
			return out, true, nil
		case mysql.IsDuplicate(err) && attempt < maxSendAttempts:
			// Of the inserts sent with the commit, only the idempotency
			// key can be taken: the task's id is new and the seq locked.
			continue
		case mysql.IsDuplicate(err):
			return SendResult{}, false, mesh.Internal(errors.Join(errKeyTaken, err))
		}
		return SendResult{}, false, err
	}
}

// The send procedure (send_new_task_v2, migrations/0013_outbox_queue.sql; v1 in 0012): its CALL, with
// identity.SendProcedureArgs first, and the signal of any refusal.
const (
	sendNewTaskSQL = `CALL send_new_task_v2(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sendRefused    = "send_new_task: refused"
)

// callNewTask is newTask's first attempt at a send without a context: START
// TRANSACTION, the procedure's CALL and COMMIT in one round trip. The
// procedure refuses anything but a send that goes through with sendRefused.
func (s *Service) callNewTask(ctx context.Context, w writeCtx, keyID string, req SendRequest, parts json.RawMessage, hash []byte) (SendResult, error) {
	var out SendResult
	err := s.DB.InPipe(ctx, func(tx *mysql.Pipe) error {
		out = SendResult{}
		w.now = s.Clock()
		t := openTask(w, req)
		ev, err := openingEvent(w, req.To, t, parts)
		if err != nil {
			return err
		}
		res := sent(w, t)
		var idem, reqHash, response any // NULL: no client message_id, no row
		if req.MessageID != "" {
			b, err := json.Marshal(res)
			if err != nil {
				return err
			}
			idem, reqHash, response = req.MessageID, hash, string(b)
		}
		args := append(identity.SendProcedureArgs(w.caller, req.To, keyID, w.now),
			t.TaskID, t.Status, w.messageID, string(parts), w.now,
			outbox.NewEventID(), ev.Type, string(ev.Body), nullable(ev.TraceID), idem, reqHash, response)
		tx.Queue(sendNewTaskSQL, args...)
		out = res
		return nil
	})
	return out, err
}

// openTask is the task a send opens with req.To, submitted at w.now. A
// context the client did not name is the task's own id, which claimContext
// knows as this pair's without a task_contexts row.
func openTask(w writeCtx, req SendRequest) *Task {
	t := &Task{TaskID: newID(), ContextID: req.ContextID, Initiator: w.caller, Recipient: req.To,
		Status: mesh.TaskSubmitted, CreatedAt: w.now, UpdatedAt: w.now}
	if t.ContextID == "" {
		t.ContextID = t.TaskID
	}
	return t
}

// openingEvent is recipient to's event of a new task's first message.
func openingEvent(w writeCtx, to string, t *Task, parts json.RawMessage) (outbox.Event, error) {
	msg := EventMessage{MessageID: w.messageID, From: w.caller, Parts: parts, CreatedAt: w.now}
	return w.event(mesh.EventMessage, to, t, MessageBody{Message: msg, Task: ref(t)})
}

// sent is the answer to a message of w.caller in t.
func sent(w writeCtx, t *Task) SendResult {
	return SendResult{TaskID: t.TaskID, MessageID: w.messageID, ContextID: t.ContextID, Status: t.Status}
}

// insertTask writes newTask's task, its first message and the outbox event
// at seq, once gate allows it; a refusal is a *mesh.Error.
func (s *Service) insertTask(ctx context.Context, tx *mysql.Pipe, w writeCtx, req SendRequest, parts json.RawMessage, gate identity.SendGate, seq int64) (SendResult, error) {
	if !gate.Reachable {
		return SendResult{}, mesh.ErrNotReachable
	}
	t := openTask(w, req)
	if req.ContextID != "" {
		var err error
		if t.GroupID, err = claimContext(ctx, tx, t.ContextID, w.caller, req.To, w.now); err != nil {
			return SendResult{}, err
		}
	}
	// The three rows travel with the commit; their errors are its.
	tx.Queue(insertTaskSQL, t.TaskID, t.ContextID, nullable(t.GroupID), t.Initiator, t.Recipient, t.Status, w.now, w.now)
	tx.Queue(insertMessageSQL, t.TaskID, w.messageID, w.caller, string(parts), w.now)
	ev, err := openingEvent(w, req.To, t, parts)
	if err != nil {
		return SendResult{}, err
	}
	ev.Seq = seq
	if err := outbox.InsertTaken(ctx, tx.Queued(), &ev, gate.ToEpoch); err != nil {
		return SendResult{}, err
	}
	return sent(w, t), nil
}

// sendInput checks a send's ids and parts, and returns the parts as stored
// and the request's idempotency hash. Send and SendA2A share both, so a
// retry is recognized whichever of the two took the message first.
func (s *Service) sendInput(req SendRequest) (json.RawMessage, hashed, error) {
	for _, f := range [][2]string{{"message_id", req.MessageID}, {"task_id", req.TaskID}, {"context_id", req.ContextID}} {
		if err := checkID(f[0], f[1]); err != nil {
			return nil, hashed{}, err
		}
	}
	parts, err := validateParts(req.Parts, s.MaxMessageBytes)
	if err != nil {
		return nil, hashed{}, err
	}
	return parts, hashed{Op: "send", To: req.To, TaskID: req.TaskID, ContextID: req.ContextID, Parts: parts}, nil
}

// appendMessage stores a message of w.caller in t and its event for the
// other party.
func (s *Service) appendMessage(ctx context.Context, tx *sql.Tx, w writeCtx, t *Task, parts json.RawMessage) (SendResult, error) {
	if _, err := tx.ExecContext(ctx, insertMessageSQL, t.TaskID, w.messageID, w.caller, string(parts), w.now); err != nil {
		return SendResult{}, err
	}
	msg := EventMessage{MessageID: w.messageID, From: w.caller, Parts: parts, CreatedAt: w.now}
	ev, err := w.event(mesh.EventMessage, other(t, w.caller), t, MessageBody{Message: msg, Task: ref(t)})
	if err != nil {
		return SendResult{}, err
	}
	if err := outbox.Append(ctx, tx, []outbox.Event{ev}); err != nil {
		return SendResult{}, err
	}
	return sent(w, t), nil
}

// ---- POST /v1/tasks/{id}/messages ----

// Reply adds a message of either party to a task; it goes to the other
// party (for a group task: back to the one who sent to the group, or to the
// member it was sent to). It needs no friendship: taking part in the task is
// enough, so a task can be finished after the parties drift apart.
func (s *Service) Reply(ctx context.Context, caller, taskID string, req ReplyRequest) (SendResult, error) {
	s.WithDefaults()
	if !idPattern.MatchString(taskID) {
		return SendResult{}, errTaskNotFound
	}
	if err := checkID("message_id", req.MessageID); err != nil {
		return SendResult{}, err
	}
	parts, err := validateParts(req.Parts, s.MaxMessageBytes)
	if err != nil {
		return SendResult{}, err
	}
	h := hashed{Op: "reply", TaskID: taskID, Parts: parts}
	return write(ctx, s, caller, req.MessageID, h, func(ctx context.Context, tx *sql.Tx, w writeCtx) (SendResult, error) {
		t, err := lockTask(ctx, tx, taskID, caller)
		if err != nil {
			return SendResult{}, err
		}
		if mesh.TerminalTaskState(t.Status) {
			return SendResult{}, errTaskTerminal
		}
		t.UpdatedAt = w.now
		if _, err := tx.ExecContext(ctx, touchTaskSQL, w.now, t.TaskID); err != nil {
			return SendResult{}, err
		}
		return s.appendMessage(ctx, tx, w, t, parts)
	})
}

// ---- POST /v1/tasks/{id}/status ----

// UpdateStatus moves a task through the state machine (see moves) and tells
// the other party with a "status" event.
func (s *Service) UpdateStatus(ctx context.Context, caller, taskID string, req StatusRequest) (StatusResult, error) {
	s.WithDefaults()
	if !idPattern.MatchString(taskID) {
		return StatusResult{}, errTaskNotFound
	}
	if !validState(req.Status) {
		return StatusResult{}, mesh.Errorf(mesh.KindInvalid, "invalid_status", "status must be one of %s", strings.Join(States, ", "))
	}
	if err := checkID("message_id", req.MessageID); err != nil {
		return StatusResult{}, err
	}
	var note json.RawMessage
	if req.Message != nil {
		var err error
		if note, err = validateParts(req.Message.Parts, s.MaxMessageBytes); err != nil {
			return StatusResult{}, err
		}
	}
	h := hashed{Op: "status", TaskID: taskID, Status: req.Status, Parts: note}
	return write(ctx, s, caller, req.MessageID, h, func(ctx context.Context, tx *sql.Tx, w writeCtx) (StatusResult, error) {
		t, err := lockTask(ctx, tx, taskID, caller)
		if err != nil {
			return StatusResult{}, err
		}
		mover := role(t, caller)
		if !CanMove(mover, t.Status, req.Status) {
			return StatusResult{}, mesh.Errorf(mesh.KindConflict, "illegal_transition", "the %s cannot move a task from %s to %s", mover, t.Status, req.Status)
		}
		change := StatusChange{State: req.Status, Previous: t.Status, By: caller}
		t.Status, t.UpdatedAt = req.Status, w.now
		if _, err := tx.ExecContext(ctx, moveTaskSQL, t.Status, w.now, t.TaskID); err != nil {
			return StatusResult{}, err
		}
		if note != nil {
			if _, err := tx.ExecContext(ctx, insertMessageSQL, t.TaskID, w.messageID, caller, string(note), w.now); err != nil {
				return StatusResult{}, err
			}
			change.Message = &EventMessage{MessageID: w.messageID, From: caller, Parts: note, CreatedAt: w.now}
		}
		ev, err := w.event(mesh.EventStatus, other(t, caller), t, StatusBody{Status: change, Task: ref(t)})
		if err != nil {
			return StatusResult{}, err
		}
		if err := outbox.Append(ctx, tx, []outbox.Event{ev}); err != nil {
			return StatusResult{}, err
		}
		return StatusResult{TaskID: t.TaskID, Status: t.Status, PreviousStatus: change.Previous, MessageID: w.messageID}, nil
	})
}

// ---- POST /v1/tasks/{id}/artifacts ----

// AddArtifact stores an output of a task. Only its recipient (the one doing
// the work) adds artifacts, and only while the task is not terminal; the
// initiator gets an "artifact" event.
func (s *Service) AddArtifact(ctx context.Context, caller, taskID string, req ArtifactRequest) (ArtifactResult, error) {
	s.WithDefaults()
	if !idPattern.MatchString(taskID) {
		return ArtifactResult{}, errTaskNotFound
	}
	// Characters, as the column (VARCHAR(200)), the spec and agent and
	// group names count them.
	if req.Name == "" || utf8.RuneCountInString(req.Name) > 200 {
		return ArtifactResult{}, mesh.Errorf(mesh.KindInvalid, "invalid_name", "an artifact needs a name of 1-200 characters")
	}
	if !mesh.PrintableName(req.Name) {
		// Names are shown to the other party as they are, like agent and
		// group names: the same printable rule.
		return ArtifactResult{}, mesh.Errorf(mesh.KindInvalid, "invalid_name", "an artifact name must be printable UTF-8: no control characters, line separators or bidirectional formatting")
	}
	if err := checkID("message_id", req.MessageID); err != nil {
		return ArtifactResult{}, err
	}
	parts, err := validateParts(req.Parts, s.MaxMessageBytes)
	if err != nil {
		return ArtifactResult{}, err
	}
	h := hashed{Op: "artifact", TaskID: taskID, Name: req.Name, Parts: parts}
	artifactID := newID()
	return write(ctx, s, caller, req.MessageID, h, func(ctx context.Context, tx *sql.Tx, w writeCtx) (ArtifactResult, error) {
		t, err := lockTask(ctx, tx, taskID, caller)
		if err != nil {
			return ArtifactResult{}, err
		}
		if role(t, caller) != RoleRecipient {
			return ArtifactResult{}, mesh.Errorf(mesh.KindForbidden, "not_task_recipient", "only the task's recipient adds artifacts")
		}
		if mesh.TerminalTaskState(t.Status) {
			return ArtifactResult{}, errTaskTerminal
		}
		t.UpdatedAt = w.now
		if _, err := tx.ExecContext(ctx, touchTaskSQL, w.now, t.TaskID); err != nil {
			return ArtifactResult{}, err
		}
		if _, err := tx.ExecContext(ctx, insertArtifact, t.TaskID, artifactID, req.Name, string(parts), caller, w.now); err != nil {
			return ArtifactResult{}, err
		}
		a := EventArtifact{ArtifactID: artifactID, Name: req.Name, Parts: parts, CreatedBy: caller, CreatedAt: w.now}
		ev, err := w.event(mesh.EventArtifact, t.Initiator, t, ArtifactBody{Artifact: a, Task: ref(t)})
		if err != nil {
			return ArtifactResult{}, err
		}
		if err := outbox.Append(ctx, tx, []outbox.Event{ev}); err != nil {
			return ArtifactResult{}, err
		}
		return ArtifactResult{TaskID: t.TaskID, ArtifactID: artifactID, MessageID: w.messageID}, nil
	})
}

// ---- POST /v1/groups/{id}/messages ----

// SendToGroup fans a message out to every other member of a group the caller
// belongs to, in one transaction: one two-party task per member (replies go
// back to the caller only), all in the group's context, each event carrying
// the group id. outbox.Append locks the members' counters in ascending order,
// so concurrent fan-outs over the same members cannot deadlock.
func (s *Service) SendToGroup(ctx context.Context, caller, groupID string, req GroupSendRequest) (GroupSendResult, error) {
	s.WithDefaults()
	errNoGroup := mesh.Errorf(mesh.KindNotFound, "group_not_found", "no such group among yours")
	if !idPattern.MatchString(groupID) {
		return GroupSendResult{}, errNoGroup
	}
	if err := checkID("message_id", req.MessageID); err != nil {
		return GroupSendResult{}, err
	}
	parts, err := validateParts(req.Parts, s.MaxMessageBytes)
	if err != nil {
		return GroupSendResult{}, err
	}
	h := hashed{Op: "group", GroupID: groupID, Parts: parts}
	return write(ctx, s, caller, req.MessageID, h, func(ctx context.Context, tx *sql.Tx, w writeCtx) (GroupSendResult, error) {
		var contextID string
		err := tx.QueryRowContext(ctx, memberGroupSQL, groupID, caller).Scan(&contextID)
		if errors.Is(err, sql.ErrNoRows) {
			return GroupSendResult{}, errNoGroup // non-members do not learn whether the group exists
		}
		if err != nil {
			return GroupSendResult{}, err
		}
		members, err := reachableMembers(ctx, tx, groupID, caller)
		if err != nil {
			return GroupSendResult{}, err
		}
		if len(members) == 0 {
			return GroupSendResult{}, mesh.Errorf(mesh.KindUnprocessable, "no_recipients", "no other member of this group can be reached")
		}
		if total := len(parts) * len(members); total > s.MaxFanoutBytes {
			return GroupSendResult{}, mesh.Errorf(mesh.KindTooLarge, "fanout_too_large",
				"%d bytes to %d members is %d bytes; a group send may write at most %d", len(parts), len(members), total, s.MaxFanoutBytes)
		}
		// A fan-out costs what it writes: one unit per recipient (write
		// already spent the first). Over the budget, the 429 rolls it all back.
		if err := identity.TakeRateN(ctx, tx, caller, w.now, len(members), 1); err != nil {
			return GroupSendResult{}, err
		}
		res := GroupSendResult{GroupID: groupID, ContextID: contextID, MessageID: w.messageID, Tasks: make([]GroupTask, len(members))}
		tasks := make([]*Task, len(members))
		for i, m := range members {
			tasks[i] = &Task{TaskID: newID(), ContextID: contextID, GroupID: groupID, Initiator: caller, Recipient: m,
				Status: mesh.TaskSubmitted, CreatedAt: w.now, UpdatedAt: w.now}
			res.Tasks[i] = GroupTask{To: m, TaskID: tasks[i].TaskID}
		}
		if err := insertRows(ctx, tx, insertTaskSQL, len(tasks), func(i int) ([]any, int) {
			t := tasks[i]
			return []any{t.TaskID, t.ContextID, t.GroupID, t.Initiator, t.Recipient, t.Status, w.now, w.now}, 0
		}); err != nil {
			return GroupSendResult{}, err
		}
		if err := insertRows(ctx, tx, insertMessageSQL, len(tasks), func(i int) ([]any, int) {
			return []any{tasks[i].TaskID, w.messageID, caller, string(parts), w.now}, len(parts)
		}); err != nil {
			return GroupSendResult{}, err
		}
		msg := EventMessage{MessageID: w.messageID, From: caller, Parts: parts, CreatedAt: w.now}
		events := make([]outbox.Event, len(tasks))
		for i, t := range tasks {
			if events[i], err = w.event(mesh.EventMessage, t.Recipient, t, MessageBody{Message: msg, Task: ref(t)}); err != nil {
				return GroupSendResult{}, err
			}
		}
		if err := outbox.Append(ctx, tx, events); err != nil {
			return GroupSendResult{}, err
		}
		return res, nil
	})
}

// insertRows runs stmt (an INSERT ending in one VALUES tuple) as multi-row
// INSERTs over n rows, cut at maxRowsPerWrite rows or maxBytesPerStmt bytes
// (row reports its argument and its size).
func insertRows(ctx context.Context, tx *sql.Tx, stmt string, n int, row func(i int) ([]any, int)) error {
	tuple := stmt[strings.LastIndex(stmt, "VALUES ")+len("VALUES "):]
	for start := 0; start < n; {
		var args []any
		rows, size := 0, 0
		for start+rows < n && rows < maxRowsPerWrite {
			a, sz := row(start + rows)
			if rows > 0 && size+sz > maxBytesPerStmt {
				break
			}
			args = append(args, a...)
			size += sz
			rows++
		}
		q := stmt + strings.Repeat(", "+tuple, rows-1)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		start += rows
	}
	return nil
}

// reachableMembers lists, in agent id order, the members of groupID other
// than caller that neither blocked caller nor were blocked by it.
func reachableMembers(ctx context.Context, tx *sql.Tx, groupID, caller string) ([]string, error) {
	others, err := mysql.QueryStrings(ctx, tx, groupOthersSQL, groupID, caller)
	if err != nil {
		return nil, err
	}
	// Refused before any member row is locked: a huge group must not hold
	// every member's heartbeat to answer 413.
	if len(others) > MaxFanoutMembers {
		return nil, errFanoutMembers(len(others))
	}
	// The agents rows before agent_blocks, as identity.CanCommunicate
	// does: a block between the caller and a member holds both rows.
	if err := identity.LockAgents(ctx, tx, append([]string{caller}, others...)); err != nil {
		return nil, err
	}
	skip := map[string]bool{}
	for _, q := range []string{blockedBySQL, blockersOfSQL} {
		ids, err := mysql.QueryStrings(ctx, tx, q, caller)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			skip[id] = true
		}
	}
	members := others[:0]
	for _, m := range others {
		if !skip[m] {
			members = append(members, m)
		}
	}
	return members, nil
}

// errFanoutMembers refuses a group send to more members than one answer
// (one task each) and one transaction may hold.
func errFanoutMembers(n int) error {
	return mesh.Errorf(mesh.KindTooLarge, "fanout_too_large",
		"the group has %d other members; a group send reaches at most %d", n, MaxFanoutMembers)
}
