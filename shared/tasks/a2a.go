package tasks

// The reads and the one write the A2A gateway (shared/a2agw) needs beyond
// the mesh routes. An A2A task is seen from one pair: the calling agent is
// its initiator and the agent whose endpoint it calls its recipient; to any
// other view the task does not exist. None of these reads spends a rate
// token: the gateway spends a read call's one unit at its front, and
// SendA2A, a write, spends its unit in its own transaction, as Send does
// (when that transaction fails, the gateway spends the unit afterwards).

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

const (
	getPairTaskSQL = `SELECT task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at
FROM tasks WHERE task_id = ? AND initiator = ? AND recipient = ?`
	// listPairSQL walks tasks_initiator (initiator, updated_at) backwards
	// from the cursor and keeps the rows with the recipient: its cost is
	// bounded by the initiator's own tasks.
	listPairSQL = `SELECT task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at FROM tasks
WHERE initiator = ? AND recipient = ? AND updated_at <= ? AND (updated_at < ? OR task_id < ?) AND (? = '' OR status = ?) AND (? = '' OR context_id = ?)
AND updated_at > ?
ORDER BY updated_at DESC, task_id DESC LIMIT ?`
	countPairSQL = `SELECT COUNT(*) FROM tasks WHERE initiator = ? AND recipient = ? AND (? = '' OR status = ?) AND (? = '' OR context_id = ?)
AND updated_at > ?`
	inboxHeadSQL = `SELECT last_seq FROM inbox_counters WHERE recipient = ?`
)

// MaxPairHistory bounds the messages PairTask returns (A2A historyLength).
const MaxPairHistory = 100

// PairTask returns task taskID if initiator started it with recipient, with
// its newest messages (at most history, capped at MaxPairHistory, and
// DetailMessageBytes of JSON) and newest artifacts (as GetTask). Any other
// task, or one that does not exist, is task_not_found.
func (s *Service) PairTask(ctx context.Context, initiator, recipient, taskID string, history int) (*TaskDetail, error) {
	t, _, err := s.pairTask(ctx, initiator, recipient, taskID, history, false)
	return t, err
}

// PairTaskHead is PairTask with InboxHead of the initiator read in the
// same consistent snapshot: the events after head are exactly the changes
// the task detail does not show yet.
func (s *Service) PairTaskHead(ctx context.Context, initiator, recipient, taskID string, history int) (*TaskDetail, int64, error) {
	return s.pairTask(ctx, initiator, recipient, taskID, history, true)
}

func (s *Service) pairTask(ctx context.Context, initiator, recipient, taskID string, history int, withHead bool) (*TaskDetail, int64, error) {
	s.WithDefaults()
	if !idPattern.MatchString(taskID) {
		return nil, 0, errTaskNotFound
	}
	history = max(0, min(history, MaxPairHistory))
	// REPEATABLE READ: every read below sees the snapshot the first makes.
	tx, err := s.DB.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, 0, err
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	rows, err := tx.QueryContext(ctx, getPairTaskSQL, taskID, initiator, recipient)
	if err != nil {
		return nil, 0, err
	}
	list, err := scanTasks(rows)
	if err != nil {
		return nil, 0, err
	}
	if len(list) == 0 {
		return nil, 0, errTaskNotFound
	}
	var head int64
	if withHead {
		if head, err = inboxHead(ctx, tx, initiator); err != nil {
			return nil, 0, err
		}
	}
	t := &TaskDetail{Task: list[0], Messages: []Message{}, Artifacts: []Artifact{}}
	var firstID int64
	if history > 0 {
		msgs, err := readContent(ctx, tx, s.scanMessage, recentMessagesSQL, taskID, history)
		if err != nil {
			return nil, 0, err
		}
		t.Messages, firstID = recentSlice(msgs, history, DetailMessageBytes)
		if t.EarlierMessages, err = countBefore(ctx, tx, countMessagesBeforeSQL, taskID, firstID); err != nil {
			return nil, 0, err
		}
	}
	arts, err := readContent(ctx, tx, s.scanArtifact, recentArtifactsSQL, taskID, DetailArtifacts)
	if err != nil {
		return nil, 0, err
	}
	t.Artifacts, firstID = recentSlice(arts, DetailArtifacts, DetailArtifactBytes)
	if t.EarlierArtifacts, err = countBefore(ctx, tx, countArtifactsBeforeSQL, taskID, firstID); err != nil {
		return nil, 0, err
	}
	return t, head, nil
}

// PairPage is one page of ListPair.
type PairPage struct {
	Tasks      []Task
	NextCursor string // "" on the last page
	Total      int    // tasks matching the filters, over every page
}

// ListPair pages through the tasks initiator started with recipient, newest
// activity first, with the cursor of ListTasks; updatedAfter, when not
// zero, keeps the tasks whose last change (status, message or artifact)
// is after it (A2A's statusTimestampAfter). q.Role is ignored.
func (s *Service) ListPair(ctx context.Context, initiator, recipient string, q ListQuery, updatedAfter time.Time) (PairPage, error) {
	s.WithDefaults()
	if q.Status != "" && !validState(q.Status) {
		return PairPage{}, mesh.Errorf(mesh.KindInvalid, "invalid_query", "status must be one of %s", strings.Join(States, ", "))
	}
	if err := checkID("context_id", q.ContextID); err != nil {
		return PairPage{}, mesh.Errorf(mesh.KindInvalid, "invalid_query", "context_id is not a valid id")
	}
	if q.Limit == 0 {
		q.Limit = DefaultListLimit
	}
	if q.Limit < 1 || q.Limit > MaxListLimit {
		return PairPage{}, mesh.Errorf(mesh.KindInvalid, "invalid_query", "limit must be from 1 to %d", MaxListLimit)
	}
	at, after := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), "\U0010FFFF"
	if q.Cursor != "" {
		var err error
		if at, after, err = decodeCursor(q.Cursor); err != nil {
			return PairPage{}, err
		}
	}
	since := time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC) // DATETIME's floor: every task is after it
	if !updatedAfter.IsZero() {
		since = updatedAfter.UTC()
	}
	rows, err := s.DB.QueryContext(ctx, listPairSQL, initiator, recipient, at, at, after, q.Status, q.Status, q.ContextID, q.ContextID, since, q.Limit+1)
	if err != nil {
		return PairPage{}, err
	}
	list, err := scanTasks(rows)
	if err != nil {
		return PairPage{}, err
	}
	page := PairPage{Tasks: list}
	if len(list) > q.Limit {
		page.Tasks = list[:q.Limit]
		last := page.Tasks[q.Limit-1]
		page.NextCursor = encodeCursor(last.UpdatedAt, last.TaskID)
	}
	err = s.DB.QueryRowContext(ctx, countPairSQL, initiator, recipient, q.Status, q.Status, q.ContextID, q.ContextID, since).Scan(&page.Total)
	return page, err
}

// InboxHead is the seq of agentID's newest inbox event (0 when it has
// none): a follower that reads after it sees only what comes next.
func (s *Service) InboxHead(ctx context.Context, agentID string) (int64, error) {
	s.WithDefaults()
	return inboxHead(ctx, s.DB, agentID)
}

// inboxHead is InboxHead's read, in q (a transaction or the pool).
func inboxHead(ctx context.Context, q identity.Querier, agentID string) (int64, error) {
	var seq int64
	err := q.QueryRowContext(ctx, inboxHeadSQL, agentID).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, mesh.ErrUnauthorized // the agent is gone
	}
	return seq, err
}

// A client's reuse of an A2A messageId. The A2A spec makes a messageId the
// id of one message, and the mesh makes a send with a used id a retry: the
// first answer, one task, one handler run. Some clients (the A2A TCK among
// them) send other messages under a used id. A reuse that cannot be a retry
// is taken as a new message, under an id derived from the used one:
//   - a different message (a retry resends the same one);
//   - the same new-task message again after the caller acted on the task it
//     opened: it sent that task a later message or canceled it through the
//     gateway, so it had the answer a retry would be after.
//
// A derived id starts with the client's id (an agent may act on it, as the
// conformance agent does on its prefix) and is a function of the used id and
// of what made the reuse new (the message, or the task acted on), so a retry
// of the reuse is a retry.
// maxA2AReuses bounds the chain a send follows; past it the client gets a
// clear error and should mint ids.
var maxA2AReuses = 32

const (
	actedOnSQL = `SELECT (SELECT COUNT(*) FROM task_messages WHERE task_id = ? AND sender = ? AND message_id <> ?)
+ (SELECT COUNT(*) FROM idempotency_keys WHERE sender = ? AND message_id = ?)`
)

// A2ACancelID is the message id of the caller's cancel of taskID through
// the gateway: the cancel is then idempotent, and SendA2A can tell that the
// caller acted on the task.
func A2ACancelID(taskID string) string { return "cancel:" + taskID }

// reusedID is the id a reuse of the client's id orig is sent under, after
// the id used (orig or a reuse of it), for a reason (the request's hash, or
// the task acted on). It starts with orig (cut to fit 64 characters), so
// the agent sees the client's id in it.
func reusedID(orig, used, reason string) string {
	sum := sha256.Sum256([]byte(used + "\x00" + reason))
	return orig[:min(len(orig), 64-17)] + ":" + hex.EncodeToString(sum[:8])
}

// SendA2A is Send for an A2A SendMessage from caller to req.To, in one
// transaction (more only for a reused messageId; see maxA2AReuses). A new
// task is Send's. A message in req.TaskID needs a task caller started with
// req.To (any other is task_not_found); when that task is input-required,
// the message is the initiator's answer and moves it back to working (a
// "status" event carrying the message, as UpdateStatus with a note),
// otherwise it is one more message of the task (Send's "message" event).
// The request hash is Send's: a retry with the same message_id answers the
// first result whichever way it went.
func (s *Service) SendA2A(ctx context.Context, caller string, req SendRequest) (SendResult, error) {
	s.WithDefaults()
	orig := req.MessageID
	for range maxA2AReuses {
		res, replayed, err := s.sendA2A(ctx, caller, req)
		switch {
		case err != nil && mesh.AsError(err).Code == errIDConflict.Code:
			_, h, herr := s.sendInput(req)
			if herr != nil {
				return SendResult{}, herr
			}
			b, herr := json.Marshal(h)
			if herr != nil {
				return SendResult{}, mesh.Internal(herr)
			}
			sum := sha256.Sum256(b)
			req.MessageID = reusedID(orig, req.MessageID, "message:"+hex.EncodeToString(sum[:]))
		case err != nil:
			return SendResult{}, err
		case !replayed || req.TaskID != "":
			return res, nil
		default:
			var acted int
			if err := s.DB.QueryRowContext(ctx, actedOnSQL, res.TaskID, caller, req.MessageID, caller, A2ACancelID(res.TaskID)).Scan(&acted); err != nil {
				return SendResult{}, err
			}
			if acted == 0 {
				return res, nil
			}
			req.MessageID = reusedID(orig, req.MessageID, "task:"+res.TaskID)
		}
	}
	return SendResult{}, mesh.Errorf(mesh.KindInvalid, "message_id_reused", "this messageId was used for %d other messages; give each message a new messageId", maxA2AReuses)
}

// sendA2A is one send of SendA2A; replayed says a new-task send answered a
// committed request's result.
func (s *Service) sendA2A(ctx context.Context, caller string, req SendRequest) (SendResult, bool, error) {
	if req.TaskID == "" {
		if err := checkSendTo(caller, req.To); err != nil {
			return SendResult{}, false, err
		}
		parts, h, err := s.sendInput(req)
		if err != nil {
			return SendResult{}, false, err
		}
		return s.newTask(ctx, caller, "", req, parts, h)
	}
	switch {
	case !mesh.ValidAgentID(req.To) || req.To == caller:
		return SendResult{}, false, errTaskNotFound
	case !idPattern.MatchString(req.TaskID):
		return SendResult{}, false, errTaskNotFound
	}
	parts, h, err := s.sendInput(req)
	if err != nil {
		return SendResult{}, false, err
	}
	res, err := write(ctx, s, caller, req.MessageID, h, func(ctx context.Context, tx *sql.Tx, w writeCtx) (SendResult, error) {
		// CanCommunicate's answer in one statement (see Send).
		gate, err := identity.OpenSendGate(ctx, tx, caller, req.To, "")
		if err != nil {
			return SendResult{}, err
		}
		if !gate.Reachable {
			return SendResult{}, errTaskNotFound
		}
		t, err := lockTask(ctx, tx, req.TaskID, caller)
		if err != nil {
			return SendResult{}, err
		}
		switch {
		case t.Initiator != caller || t.Recipient != req.To:
			return SendResult{}, errTaskNotFound
		case req.ContextID != "" && req.ContextID != t.ContextID:
			return SendResult{}, mesh.Errorf(mesh.KindUnprocessable, "context_mismatch", "task %s belongs to context %s", t.TaskID, t.ContextID)
		case mesh.TerminalTaskState(t.Status):
			return SendResult{}, errTaskTerminal
		}
		if t.Status != mesh.TaskInputRequired {
			t.UpdatedAt = w.now
			if _, err := tx.ExecContext(ctx, touchTaskSQL, w.now, t.TaskID); err != nil {
				return SendResult{}, err
			}
			return s.appendMessage(ctx, tx, w, t, parts)
		}
		change := StatusChange{State: mesh.TaskWorking, Previous: t.Status, By: caller,
			Message: &EventMessage{MessageID: w.messageID, From: caller, Parts: parts, CreatedAt: w.now}}
		t.Status, t.UpdatedAt = mesh.TaskWorking, w.now
		if _, err := tx.ExecContext(ctx, moveTaskSQL, t.Status, w.now, t.TaskID); err != nil {
			return SendResult{}, err
		}
		if _, err := tx.ExecContext(ctx, insertMessageSQL, t.TaskID, w.messageID, caller, string(parts), w.now); err != nil {
			return SendResult{}, err
		}
		ev, err := w.event(mesh.EventStatus, t.Recipient, t, StatusBody{Status: change, Task: ref(t)})
		if err != nil {
			return SendResult{}, err
		}
		if err := outbox.Append(ctx, tx, []outbox.Event{ev}); err != nil {
			return SendResult{}, err
		}
		return SendResult{TaskID: t.TaskID, MessageID: w.messageID, ContextID: t.ContextID, Status: t.Status}, nil
	})
	return res, false, err
}
