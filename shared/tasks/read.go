package tasks

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

const (
	getTaskSQL = `SELECT task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at
FROM tasks WHERE task_id = ? AND (initiator = ? OR recipient = ?)`
	// All served by task_messages_task / task_artifacts_task (task_id, id).
	recentMessagesSQL       = `SELECT id, message_id, sender, parts, created_at FROM task_messages WHERE task_id = ? ORDER BY id DESC LIMIT ?`
	pageMessagesSQL         = `SELECT id, message_id, sender, parts, created_at FROM task_messages WHERE task_id = ? AND id > ? ORDER BY id LIMIT ?`
	countMessagesBeforeSQL  = `SELECT COUNT(*) FROM task_messages WHERE task_id = ? AND id < ?`
	recentArtifactsSQL      = `SELECT id, artifact_id, name, parts, created_by, created_at FROM task_artifacts WHERE task_id = ? ORDER BY id DESC LIMIT ?`
	countArtifactsBeforeSQL = `SELECT COUNT(*) FROM task_artifacts WHERE task_id = ? AND id < ?`

	// The list statements walk tasks_initiator / tasks_recipient
	// (agent, updated_at) backwards from the cursor: newest activity first,
	// ties broken by task_id, which the secondary index holds as its last
	// column. "? = ''" switches an optional filter off.
	listAsInitiatorSQL = `SELECT task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at FROM tasks
WHERE initiator = ? AND updated_at <= ? AND (updated_at < ? OR task_id < ?) AND (? = '' OR status = ?) AND (? = '' OR context_id = ?)
ORDER BY updated_at DESC, task_id DESC LIMIT ?`
	listAsRecipientSQL = `SELECT task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at FROM tasks
WHERE recipient = ? AND updated_at <= ? AND (updated_at < ? OR task_id < ?) AND (? = '' OR status = ?) AND (? = '' OR context_id = ?)
ORDER BY updated_at DESC, task_id DESC LIMIT ?`
	// Both roles: each branch uses its own index and stops at the limit; an
	// agent is never both parties of one task, so UNION ALL has no duplicates.
	listAsEitherSQL = `SELECT task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at FROM (
(SELECT task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at FROM tasks
 WHERE initiator = ? AND updated_at <= ? AND (updated_at < ? OR task_id < ?) AND (? = '' OR status = ?) AND (? = '' OR context_id = ?)
 ORDER BY updated_at DESC, task_id DESC LIMIT ?)
UNION ALL
(SELECT task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at FROM tasks
 WHERE recipient = ? AND updated_at <= ? AND (updated_at < ? OR task_id < ?) AND (? = '' OR status = ?) AND (? = '' OR context_id = ?)
 ORDER BY updated_at DESC, task_id DESC LIMIT ?)
) t ORDER BY updated_at DESC, task_id DESC LIMIT ?`
)

// Page sizes of GET /v1/tasks.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
)

// takeReadRate spends one request of the caller's budget as its own
// autocommit statement before a read.
func (s *Service) takeReadRate(ctx context.Context, caller string) error {
	return identity.TakeRate(ctx, s.DB, caller, s.Clock())
}

// GetTask returns a task with its most recent messages and artifacts (see
// TaskDetail for the bounds), in the order they were written. Only its two
// parties see it; to anyone else it is a 404.
func (s *Service) GetTask(ctx context.Context, caller, taskID string) (*TaskDetail, error) {
	s.WithDefaults()
	if !idPattern.MatchString(taskID) {
		return nil, errTaskNotFound
	}
	if err := s.takeReadRate(ctx, caller); err != nil {
		return nil, err
	}
	// One read-only transaction: every read sees one snapshot.
	tx, err := s.DB.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	task, err := readTask(ctx, tx, caller, taskID)
	if err != nil {
		return nil, err
	}
	t := &TaskDetail{Task: *task}
	msgs, err := readContent(ctx, tx, s.scanMessage, recentMessagesSQL, taskID, DetailMessages)
	if err != nil {
		return nil, err
	}
	var firstID int64
	t.Messages, firstID = recentSlice(msgs, DetailMessages, DetailMessageBytes)
	if len(msgs) > 0 {
		t.MessagesNextAfter = encodeMessageCursor(msgs[0].id)
	}
	if t.EarlierMessages, err = countBefore(ctx, tx, countMessagesBeforeSQL, taskID, firstID); err != nil {
		return nil, err
	}
	arts, err := readContent(ctx, tx, s.scanArtifact, recentArtifactsSQL, taskID, DetailArtifacts)
	if err != nil {
		return nil, err
	}
	t.Artifacts, firstID = recentSlice(arts, DetailArtifacts, DetailArtifactBytes)
	if t.EarlierArtifacts, err = countBefore(ctx, tx, countArtifactsBeforeSQL, taskID, firstID); err != nil {
		return nil, err
	}
	return t, nil
}

// Bounds of the task read routes. Sizes are JSON as it travels in the
// Lambda response (jsonlimit.WireSize); with the detail's two slices and
// the task itself, GET /v1/tasks/{id} stays under 4 MiB, and a page of
// messages under MaxMessagePageBytes (plus, at worst, its one message).
const (
	DetailMessages       = 20
	DetailMessageBytes   = 2 << 20
	DetailArtifacts      = 10
	DetailArtifactBytes  = 3 << 19
	DefaultMessagesLimit = 50
	MaxMessagesLimit     = 200
	MaxMessagePageBytes  = 4 << 20
)

// readTask reads the task if caller is one of its parties.
func readTask(ctx context.Context, q identity.Querier, caller, taskID string) (*Task, error) {
	rows, err := q.QueryContext(ctx, getTaskSQL, taskID, caller, caller)
	if err != nil {
		return nil, err
	}
	list, err := scanTasks(rows)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, errTaskNotFound
	}
	return &list[0], nil
}

// content is one message or artifact as read, with its row id (the cursor)
// and its wire size.
type content[T any] struct {
	id   int64
	item T
	size int
}

// readContent runs query and scans each row with scan.
func readContent[T any](ctx context.Context, q identity.Querier, scan func(*sql.Rows) (int64, T, error), query string, args ...any) ([]content[T], error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []content[T]
	for rows.Next() {
		id, item, err := scan(rows)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(item)
		if err != nil {
			return nil, err // parts were checked by scan: a bug
		}
		out = append(out, content[T]{id: id, item: item, size: jsonlimit.WireSize(b) + 1})
	}
	return out, rows.Err()
}

// recentSlice takes, from list (newest first), the newest items that fit n
// and budget, and returns them oldest first with the row id of the oldest
// one taken (MaxInt64 when none fit: everything is earlier).
func recentSlice[T any](list []content[T], n, budget int) ([]T, int64) {
	size, take := 0, 0
	for take < len(list) && take < n && size+list[take].size <= budget {
		size += list[take].size
		take++
	}
	out := make([]T, take)
	for i := range take {
		out[take-1-i] = list[i].item
	}
	if take == 0 {
		return out, math.MaxInt64
	}
	return out, list[take-1].id
}

// countBefore counts the rows of a task before row id.
func countBefore(ctx context.Context, q identity.Querier, query, taskID string, id int64) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, query, taskID, id).Scan(&n)
	return n, err
}

// scanMessage reads one task_messages row (id, message_id, sender, parts,
// created_at).
func (s *Service) scanMessage(rows *sql.Rows) (int64, Message, error) {
	var id int64
	var m Message
	var parts string
	if err := rows.Scan(&id, &m.MessageID, &m.From, &parts, &m.CreatedAt); err != nil {
		return 0, m, err
	}
	m.Parts, m.Undeliverable = s.servable("message", m.MessageID, parts)
	return id, m, nil
}

// scanArtifact reads one task_artifacts row (id, artifact_id, name, parts,
// created_by, created_at).
func (s *Service) scanArtifact(rows *sql.Rows) (int64, Artifact, error) {
	var id int64
	var a Artifact
	var parts string
	if err := rows.Scan(&id, &a.ArtifactID, &a.Name, &parts, &a.CreatedBy, &a.CreatedAt); err != nil {
		return 0, a, err
	}
	a.Parts, a.Undeliverable = s.servable("artifact", a.ArtifactID, parts)
	return id, a, nil
}

// MetricUndeliverableContent counts stored messages and artifacts a task
// read served with a placeholder instead of their parts.
const MetricUndeliverableContent = "TaskContentUndeliverable"

// servable decodes stored parts. Parts were validated when written, so
// they re-encode as stored; when they cannot be served (or decoded), it
// returns [] and the reason instead (the item keeps its place and ids), and
// logs and counts it, so one bad row never fails a whole read.
func (s *Service) servable(kind, id, stored string) ([]mesh.Part, string) {
	code := jsonlimit.Unservable([]byte(stored))
	var parts []mesh.Part
	if code == "" && json.Unmarshal([]byte(stored), &parts) != nil {
		code = outbox.UndeliverableUnencodable
	}
	if code != "" {
		s.undeliverable(kind, id, code, len(stored))
		return []mesh.Part{}, code
	}
	return parts, ""
}

func (s *Service) undeliverable(kind, id, code string, size int) {
	s.Log.Error("task content served as undeliverable", "kind", kind, "id", id, "code", code, "bytes", size)
	s.Metrics.Emit(map[string]float64{MetricUndeliverableContent: 1})
}

// ---- GET /v1/tasks/{id}/messages ----

// ListMessages pages through a task's messages in the order they were
// written, after the cursor (""  = from the first). A page holds at most
// limit messages and MaxMessagePageBytes of JSON, and always at least one
// message when one follows; a message too large for any page on its own is
// served as a placeholder (Undeliverable "too_large").
func (s *Service) ListMessages(ctx context.Context, caller, taskID, after string, limit int) (MessagePage, error) {
	s.WithDefaults()
	if !idPattern.MatchString(taskID) {
		return MessagePage{}, errTaskNotFound
	}
	if limit < 1 || limit > MaxMessagesLimit {
		return MessagePage{}, mesh.Errorf(mesh.KindInvalid, "invalid_query", "limit must be from 1 to %d", MaxMessagesLimit)
	}
	var afterID int64
	if after != "" {
		var err error
		if afterID, err = decodeMessageCursor(after); err != nil {
			return MessagePage{}, err
		}
	}
	if err := s.takeReadRate(ctx, caller); err != nil {
		return MessagePage{}, err
	}
	tx, err := s.DB.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return MessagePage{}, err
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	if _, err := readTask(ctx, tx, caller, taskID); err != nil {
		return MessagePage{}, err
	}
	p := MessagePage{Messages: []Message{}, NextAfter: after}
	size := 0
	// In batches, each with one row more than it may take (it tells whether
	// more follow): the rows read but not served stay a few MiB.
	for {
		want := min(limit-len(p.Messages), messagesReadBatch) + 1
		list, err := readContent(ctx, tx, s.scanMessage, pageMessagesSQL, taskID, afterID, want)
		if err != nil {
			return MessagePage{}, err
		}
		for _, c := range list[:min(len(list), want-1)] {
			if len(p.Messages) > 0 && size+c.size > MaxMessagePageBytes {
				p.More = true
				return p, nil
			}
			if c.size > MaxMessagePageBytes {
				s.undeliverable("message", c.item.MessageID, outbox.UndeliverableTooLarge, c.size)
				c.item.Parts, c.item.Undeliverable = []mesh.Part{}, outbox.UndeliverableTooLarge
				c.size = 0 // the page ends after it anyway; the placeholder is small
			}
			size += c.size
			p.Messages = append(p.Messages, c.item)
			p.NextAfter, afterID = encodeMessageCursor(c.id), c.id
		}
		if len(list) < want || len(p.Messages) == limit {
			p.More = len(list) == want
			return p, nil
		}
	}
}

// messagesReadBatch is the most messages one query of the page route reads.
const messagesReadBatch = 16

// Message cursors are opaque to clients: base64url of "m1|<row id>". Row ids
// of one task grow in the order its messages commit: every write locks the
// task row before it inserts.
func encodeMessageCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("m1|" + strconv.FormatInt(id, 10)))
}

func decodeMessageCursor(c string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if v, ok := strings.CutPrefix(string(raw), "m1|"); ok {
			if id, err := strconv.ParseInt(v, 10, 64); err == nil && id >= 0 {
				return id, nil
			}
		}
	}
	return 0, mesh.Errorf(mesh.KindInvalid, "invalid_cursor", "after is not a cursor this API returned")
}

func scanTasks(rows *sql.Rows) ([]Task, error) {
	defer rows.Close()
	out := []Task{}
	for rows.Next() {
		var t Task
		var group sql.NullString
		if err := rows.Scan(&t.TaskID, &t.ContextID, &group, &t.Initiator, &t.Recipient, &t.Status, &t.CreatedAt, &t.UpdatedAt); err != nil {
			return nil, err
		}
		t.GroupID = group.String
		out = append(out, t)
	}
	return out, rows.Err()
}

// ListQuery is GET /v1/tasks's query.
type ListQuery struct {
	Status    string // one task state, or "" for all
	Role      string // RoleInitiator, RoleRecipient or "" for both
	ContextID string
	Limit     int    // 1 to MaxListLimit; 0 for DefaultListLimit
	Cursor    string // next_cursor of the previous page
}

// ListResult is one page of tasks, newest activity first; NextCursor
// fetches the next page and is absent on the last one.
type ListResult = api.TaskPage

// ListTasks pages through the caller's tasks by last activity, newest first,
// with a keyset cursor on (updated_at, task_id): pages never overlap and the
// order is total. A task that sees activity while a client pages moves to
// the front, so it shows up again on a fresh first page, not on later ones.
func (s *Service) ListTasks(ctx context.Context, caller string, q ListQuery) (ListResult, error) {
	s.WithDefaults()
	if q.Status != "" && !validState(q.Status) {
		return ListResult{}, mesh.Errorf(mesh.KindInvalid, "invalid_query", "status must be one of %s", strings.Join(States, ", "))
	}
	if q.Role != "" && q.Role != RoleInitiator && q.Role != RoleRecipient {
		return ListResult{}, mesh.Errorf(mesh.KindInvalid, "invalid_query", "role must be initiator or recipient")
	}
	if err := checkID("context_id", q.ContextID); err != nil {
		return ListResult{}, mesh.Errorf(mesh.KindInvalid, "invalid_query", "context_id is not a valid id")
	}
	if q.Limit == 0 {
		q.Limit = DefaultListLimit
	}
	if q.Limit < 1 || q.Limit > MaxListLimit {
		return ListResult{}, mesh.Errorf(mesh.KindInvalid, "invalid_query", "limit must be from 1 to %d", MaxListLimit)
	}
	// Without a cursor, start after the largest possible key.
	at, after := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), "\U0010FFFF"
	if q.Cursor != "" {
		var err error
		if at, after, err = decodeCursor(q.Cursor); err != nil {
			return ListResult{}, err
		}
	}
	if err := s.takeReadRate(ctx, caller); err != nil {
		return ListResult{}, err
	}
	filters := func(agent string) []any {
		return []any{agent, at, at, after, q.Status, q.Status, q.ContextID, q.ContextID, q.Limit + 1}
	}
	var rows *sql.Rows
	var err error
	switch q.Role {
	case RoleInitiator:
		rows, err = s.DB.QueryContext(ctx, listAsInitiatorSQL, filters(caller)...)
	case RoleRecipient:
		rows, err = s.DB.QueryContext(ctx, listAsRecipientSQL, filters(caller)...)
	default:
		args := append(filters(caller), filters(caller)...)
		rows, err = s.DB.QueryContext(ctx, listAsEitherSQL, append(args, q.Limit+1)...)
	}
	if err != nil {
		return ListResult{}, err
	}
	list, err := scanTasks(rows)
	if err != nil {
		return ListResult{}, err
	}
	res := ListResult{Tasks: list}
	if len(list) > q.Limit {
		res.Tasks = list[:q.Limit]
		last := res.Tasks[q.Limit-1]
		res.NextCursor = encodeCursor(last.UpdatedAt, last.TaskID)
	}
	return res, nil
}

// maxCursorMicros is 9999-12-31 23:59:59.999999 UTC, the last DATETIME.
var maxCursorMicros = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()

// Cursors are opaque to clients: base64url of "v1|<unix micros>|<task_id>".
func encodeCursor(at time.Time, taskID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1|" + strconv.FormatInt(at.UnixMicro(), 10) + "|" + taskID))
}

func decodeCursor(c string) (time.Time, string, error) {
	bad := mesh.Errorf(mesh.KindInvalid, "invalid_cursor", "cursor is not one this API returned")
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", bad
	}
	f := strings.SplitN(string(raw), "|", 3)
	if len(f) != 3 || f[0] != "v1" || !idPattern.MatchString(f[2]) {
		return time.Time{}, "", bad
	}
	us, err := strconv.ParseInt(f[1], 10, 64)
	// DATETIME ends at year 9999; a later time makes the driver fail the
	// query, a 5xx for a client's forged cursor.
	if err != nil || us < 0 || us > maxCursorMicros {
		return time.Time{}, "", bad
	}
	return time.UnixMicro(us).UTC(), f[2], nil
}

// ---- GET /v1/inbox ----

// InboxQuery is GET /v1/inbox's query.
type InboxQuery struct {
	After int64         // the last seq the caller has; 0 from the start
	Limit int           // events per page, 1 to outbox.MaxInboxLimit
	Wait  time.Duration // how long to long-poll for a first event; 0 answers at once
}

// ReadInbox returns the caller's own events after q.After; there is no way
// to name another agent's inbox. A long poll costs one rate token.
func (s *Service) ReadInbox(ctx context.Context, caller string, q InboxQuery) (outbox.Page, error) {
	s.WithDefaults()
	if err := s.takeReadRate(ctx, caller); err != nil {
		return outbox.Page{}, err
	}
	page, err := s.Inbox.Wait(ctx, caller, q.After, q.Limit, q.Wait)
	if errors.Is(err, context.Canceled) {
		return page, mesh.Errorf(mesh.KindUnavailable, "canceled", "the request was canceled")
	}
	return page, err
}
