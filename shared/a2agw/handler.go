package a2agw

import (
	"context"
	"iter"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// Bounds of the methods.
const (
	// defaultHistory is the history a Task answer carries when the call
	// names no historyLength.
	defaultHistory = tasks.DetailMessages
	// maxPageSize is A2A's ListTasks page bound; larger asks are clamped.
	maxPageSize     = 100
	defaultPageSize = 50
)

// meshHandler serves the methods of one admitted call: caller is the A2A
// client (the initiator of its tasks), target the agent whose endpoint it
// called (their recipient). A task is visible only in that pair.
type meshHandler struct {
	g              *Gateway
	caller, target string
	// limited is set when a method met the caller's rate limit (or its
	// cap on waiting calls): the front's writer answers it (rateLimited).
	limited atomic.Pointer[edgeError]
	// spent is set once the call's one rate unit is spent: by the front
	// for a read, by a write's committed transaction, or by charge.
	spent atomic.Bool
}

var _ a2asrv.RequestHandler = (*meshHandler)(nil)

// history turns an A2A historyLength into a count of messages.
func history(n *int) (int, error) {
	switch {
	case n == nil:
		return defaultHistory, nil
	case *n < 0:
		return 0, a2a.NewError(a2a.ErrInvalidParams, "historyLength must not be negative")
	}
	return min(*n, tasks.MaxPairHistory), nil
}

// task reads one task of the pair as A2A's Task.
func (h *meshHandler) task(ctx context.Context, id string, hist int) (*a2a.Task, *tasks.TaskDetail, error) {
	d, err := h.g.Tasks.PairTask(ctx, h.caller, h.target, id, hist)
	if err != nil {
		return nil, nil, h.toA2A(ctx, err)
	}
	return a2aTask(d, hist), d, nil
}

// GetTask implements a2asrv.RequestHandler.
func (h *meshHandler) GetTask(ctx context.Context, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	hist, err := history(req.HistoryLength)
	if err != nil {
		return nil, err
	}
	t, _, err := h.task(ctx, string(req.ID), hist)
	return t, err
}

// ListTasks implements a2asrv.RequestHandler: the caller's tasks with the
// target, newest activity first, those changed after statusTimestampAfter
// when it is given; each with its newest historyLength messages (none when
// it is unset or 0) and its artifacts when includeArtifacts, which cost
// one task read per listed task.
func (h *meshHandler) ListTasks(ctx context.Context, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	if req.PageSize < 0 {
		return nil, a2a.NewError(a2a.ErrInvalidParams, "pageSize must not be negative")
	}
	hist := 0
	if req.HistoryLength != nil {
		var err error
		if hist, err = history(req.HistoryLength); err != nil {
			return nil, err
		}
	}
	size := req.PageSize
	if size == 0 {
		size = defaultPageSize
	}
	size = min(size, maxPageSize)
	q := tasks.ListQuery{ContextID: req.ContextID, Limit: size, Cursor: req.PageToken}
	if req.Status != a2a.TaskStateUnspecified {
		s, ok := fromA2AState[req.Status]
		if !ok {
			return nil, a2a.NewError(a2a.ErrInvalidParams, "status is not a task state this agent has")
		}
		q.Status = s
	}
	var since time.Time
	if req.StatusTimestampAfter != nil {
		since = *req.StatusTimestampAfter
	}
	page, err := h.g.Tasks.ListPair(ctx, h.caller, h.target, q, since)
	if err != nil {
		return nil, h.toA2A(ctx, err)
	}
	out := &a2a.ListTasksResponse{Tasks: make([]*a2a.Task, 0, len(page.Tasks)), TotalSize: page.Total, PageSize: size, NextPageToken: page.NextCursor}
	for _, t := range page.Tasks {
		d := &tasks.TaskDetail{Task: t}
		if hist > 0 || req.IncludeArtifacts {
			if d, err = h.g.Tasks.PairTask(ctx, h.caller, h.target, t.TaskID, hist); err != nil {
				return nil, h.toA2A(ctx, err)
			}
			d.Task = t // the state the page lists
			if !req.IncludeArtifacts {
				d.Artifacts = nil
			}
		}
		out.Tasks = append(out.Tasks, a2aTask(d, hist))
	}
	return out, nil
}

// CancelTask implements a2asrv.RequestHandler: the initiator cancels; a
// terminal task is TaskNotCancelable.
func (h *meshHandler) CancelTask(ctx context.Context, req *a2a.CancelTaskRequest) (*a2a.Task, error) {
	id := string(req.ID)
	_, d, err := h.task(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	if mesh.TerminalTaskState(d.Status) {
		return nil, a2a.NewError(a2a.ErrTaskNotCancelable, "the task is "+d.Status+" and cannot be canceled")
	}
	if _, err := h.g.Tasks.UpdateStatus(ctx, h.caller, id, tasks.StatusRequest{Status: mesh.TaskCanceled, MessageID: tasks.A2ACancelID(id)}); err != nil {
		if mesh.IsKind(err, mesh.KindConflict) {
			// It finished meanwhile.
			return nil, a2a.NewError(a2a.ErrTaskNotCancelable, "the task finished and cannot be canceled")
		}
		return nil, h.toA2A(ctx, err)
	}
	h.spent.Store(true) // by the committed write
	t, _, err := h.task(ctx, id, defaultHistory)
	return t, err
}

// send is the mesh send of an A2A message; it returns the caller's inbox
// seq from before the send, which a wait or a stream follows from.
func (h *meshHandler) send(ctx context.Context, req *a2a.SendMessageRequest) (tasks.SendResult, int64, error) {
	m := req.Message
	switch {
	case m == nil:
		return tasks.SendResult{}, 0, a2a.NewError(a2a.ErrInvalidParams, "message is required")
	case m.ID == "":
		return tasks.SendResult{}, 0, a2a.NewError(a2a.ErrInvalidParams, "message.messageId is required")
	case m.Role == a2a.MessageRoleAgent:
		return tasks.SendResult{}, 0, a2a.NewError(a2a.ErrInvalidParams, "a client's message has role ROLE_USER")
	}
	parts, err := meshParts(m.Parts)
	if err != nil {
		return tasks.SendResult{}, 0, a2a.NewError(a2a.ErrInvalidParams, "message.parts: "+err.Error())
	}
	head, err := h.g.Tasks.InboxHead(ctx, h.caller)
	if err != nil {
		return tasks.SendResult{}, 0, h.toA2A(ctx, err)
	}
	res, err := h.g.Tasks.SendA2A(ctx, h.caller, tasks.SendRequest{To: h.target, MessageID: m.ID,
		TaskID: string(m.TaskID), ContextID: m.ContextID, Parts: parts})
	if err != nil {
		return tasks.SendResult{}, 0, h.toA2A(ctx, err)
	}
	h.spent.Store(true) // by the committed write (a retry's too)
	return res, head, nil
}

// SendMessage implements a2asrv.RequestHandler. The message is durable
// before anything is answered; then, unless configuration.returnImmediately,
// the call waits (at most SendWait) until the task is terminal or
// input-required. The answer is the Task as it stands, except that a wait
// that ends with the agent's plain reply is answered with that reply as a
// Message (see messageAnswer).
func (h *meshHandler) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	var hl *int
	immediate := false
	if req.Config != nil {
		hl, immediate = req.Config.HistoryLength, req.Config.ReturnImmediately
	}
	hist, err := history(hl)
	if err != nil {
		return nil, err
	}
	res, head, err := h.send(ctx, req)
	if err != nil {
		return nil, err
	}
	if immediate {
		t, _, err := h.task(ctx, res.TaskID, hist)
		return t, err
	}
	// Only the state matters before the wait: the answer is read after it.
	_, d, err := h.task(ctx, res.TaskID, 0)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(h.g.sendWait())
	if stops(d.Status) {
		// Already there: read what the inbox holds of it, without waiting.
		deadline = time.Now()
	}
	seen, err := h.follow(ctx, res.TaskID, head, d.Status, deadline, nil)
	if err != nil {
		return nil, err
	}
	// The answer is read after the wait, history included.
	t, d, err := h.task(ctx, res.TaskID, max(hist, 1))
	if err != nil {
		return nil, err
	}
	if m := messageAnswer(d, seen); m != nil {
		return m, nil
	}
	if hist == 0 {
		t.History = nil
	}
	return t, nil
}

// messageAnswer is the Message a blocking SendMessage answers instead of
// the Task, or nil: when the wait saw the task completed, with no
// artifact, by a move that carried no note, and the agent's latest
// message, a reply (not a status note), is the task's latest message (so
// after the caller's). Then the exchange was a plain question and answer,
// and the answer is the agent's reply, ROLE_AGENT, with the task's taskId
// and contextId, its messageId the mesh message_id of the reply. Anything
// else answers the Task; streams never carry a bare Message.
func messageAnswer(d *tasks.TaskDetail, seen followed) *a2a.Message {
	if seen.state != mesh.TaskCompleted || d.Status != mesh.TaskCompleted || seen.reply == nil || seen.artifact ||
		len(d.Artifacts) > 0 || d.EarlierArtifacts > 0 || len(d.Messages) == 0 {
		return nil
	}
	last := d.Messages[len(d.Messages)-1]
	if last.From != d.Recipient || last.MessageID != seen.reply.ID {
		return nil
	}
	return a2aMessage(&d.Task, last)
}

// SendStreamingMessage implements a2asrv.RequestHandler: the Task, then its
// status and artifact updates from the send on, until one carries a
// terminal or input-required state, or StreamMax passes (the client
// resumes with SubscribeToTask). A task already terminal in the snapshot
// (a retried send) gives what the inbox holds of it after the send, and
// ends.
func (h *meshHandler) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		var hl *int
		if req.Config != nil {
			hl = req.Config.HistoryLength
		}
		hist, err := history(hl)
		if err != nil {
			yield(nil, err)
			return
		}
		res, head, err := h.send(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		t, d, err := h.task(ctx, res.TaskID, hist)
		if err != nil {
			yield(nil, err)
			return
		}
		if !yield(t, nil) {
			return
		}
		deadline := time.Now().Add(h.g.streamMax())
		if mesh.TerminalTaskState(d.Status) {
			deadline = time.Now()
		}
		h.stream(ctx, res.TaskID, head, d.Status, deadline, yield)
	}
}

// SubscribeToTask implements a2asrv.RequestHandler: the Task, then every
// update after it, until one carries a terminal or input-required state
// (a task input-required when subscribed to stays followed: the caller's
// answer resumes it and the agent's next move ends the stream), or
// StreamMax passes. A terminal task has nothing more to stream
// (UnsupportedOperation, as the spec says).
func (h *meshHandler) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		// The snapshot and the inbox position come from one read, so the
		// stream follows exactly what happens after the snapshot.
		d, head, err := h.g.Tasks.PairTaskHead(ctx, h.caller, h.target, string(req.ID), defaultHistory)
		if err != nil {
			yield(nil, h.toA2A(ctx, err))
			return
		}
		if mesh.TerminalTaskState(d.Status) {
			yield(nil, a2a.NewError(a2a.ErrUnsupportedOperation, "the task is "+string(toA2AState[d.Status])+": there is nothing to subscribe to"))
			return
		}
		if !yield(a2aTask(d, defaultHistory), nil) {
			return
		}
		h.stream(ctx, string(req.ID), head, d.Status, time.Now().Add(h.g.streamMax()), yield)
	}
}

// stream follows the task after the snapshot the client has (state known)
// and passes its updates on.
func (h *meshHandler) stream(ctx context.Context, taskID string, head int64, known string, deadline time.Time, yield func(a2a.Event, error) bool) {
	if _, err := h.follow(ctx, taskID, head, known, deadline, func(ev a2a.Event) bool { return yield(ev, nil) }); err != nil {
		yield(nil, err)
	}
}

// Push notifications are not offered (the card says so).

// GetTaskPushConfig implements a2asrv.RequestHandler.
func (h *meshHandler) GetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	return nil, errNoPush()
}

// ListTaskPushConfigs implements a2asrv.RequestHandler.
func (h *meshHandler) ListTaskPushConfigs(context.Context, *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	return nil, errNoPush()
}

// CreateTaskPushConfig implements a2asrv.RequestHandler.
func (h *meshHandler) CreateTaskPushConfig(context.Context, *a2a.PushConfig) (*a2a.PushConfig, error) {
	return nil, errNoPush()
}

// DeleteTaskPushConfig implements a2asrv.RequestHandler.
func (h *meshHandler) DeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigRequest) error {
	return errNoPush()
}

// GetExtendedAgentCard implements a2asrv.RequestHandler: the card has no
// extended form.
func (h *meshHandler) GetExtendedAgentCard(context.Context, *a2a.GetExtendedAgentCardRequest) (*a2a.AgentCard, error) {
	return nil, a2a.NewError(a2a.ErrExtendedCardNotConfigured, "this agent has no extended agent card")
}

func errNoPush() error {
	return a2a.NewError(a2a.ErrPushNotificationNotSupported, "push notifications are not supported; use SubscribeToTask")
}

// denyHandler answers every method of a refused call (a stranger, an
// unpublished or nonexistent agent, the agent itself) with the TaskNotFound
// a missing task gets.
type denyHandler struct{}

var _ a2asrv.RequestHandler = denyHandler{}

func denied[T any]() (T, error) {
	var zero T
	return zero, notFound()
}

func deniedStream() iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) { yield(nil, notFound()) }
}

// GetTask implements a2asrv.RequestHandler.
func (denyHandler) GetTask(context.Context, *a2a.GetTaskRequest) (*a2a.Task, error) {
	return denied[*a2a.Task]()
}

// ListTasks implements a2asrv.RequestHandler.
func (denyHandler) ListTasks(context.Context, *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	return denied[*a2a.ListTasksResponse]()
}

// CancelTask implements a2asrv.RequestHandler.
func (denyHandler) CancelTask(context.Context, *a2a.CancelTaskRequest) (*a2a.Task, error) {
	return denied[*a2a.Task]()
}

// SendMessage implements a2asrv.RequestHandler.
func (denyHandler) SendMessage(context.Context, *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	return denied[a2a.SendMessageResult]()
}

// SubscribeToTask implements a2asrv.RequestHandler.
func (denyHandler) SubscribeToTask(context.Context, *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return deniedStream()
}

// SendStreamingMessage implements a2asrv.RequestHandler.
func (denyHandler) SendStreamingMessage(context.Context, *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return deniedStream()
}

// GetTaskPushConfig implements a2asrv.RequestHandler.
func (denyHandler) GetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	return denied[*a2a.PushConfig]()
}

// ListTaskPushConfigs implements a2asrv.RequestHandler.
func (denyHandler) ListTaskPushConfigs(context.Context, *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	return denied[*a2a.ListTaskPushConfigResponse]()
}

// CreateTaskPushConfig implements a2asrv.RequestHandler.
func (denyHandler) CreateTaskPushConfig(context.Context, *a2a.PushConfig) (*a2a.PushConfig, error) {
	return denied[*a2a.PushConfig]()
}

// DeleteTaskPushConfig implements a2asrv.RequestHandler.
func (denyHandler) DeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigRequest) error {
	return notFound()
}

// GetExtendedAgentCard implements a2asrv.RequestHandler.
func (denyHandler) GetExtendedAgentCard(context.Context, *a2a.GetExtendedAgentCardRequest) (*a2a.AgentCard, error) {
	return denied[*a2a.AgentCard]()
}
