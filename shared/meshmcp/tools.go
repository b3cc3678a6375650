package meshmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
)

// Tool names.
const (
	ToolSendMessage = "mesh_send_message"
	ToolReply       = "mesh_reply"
	ToolUpdateTask  = "mesh_update_task"
	ToolCheckInbox  = "mesh_check_inbox"
	ToolAck         = "mesh_ack"
	ToolListFriends = "mesh_list_friends"
	ToolListGroups  = "mesh_list_groups"
	ToolGetTask     = "mesh_get_task"
	ToolListTasks   = "mesh_list_tasks"
	// ToolTaskMessages pages a task's whole message history, which
	// mesh_get_task shows only the recent end of.
	ToolTaskMessages = "mesh_get_task_messages"
)

// Page sizes of mesh_get_task_messages: small by default because every
// message lands in the model's context.
const (
	DefaultTaskMessagesLimit = 20
	MaxTaskMessagesLimit     = 50
)

// Inbox page sizes of mesh_check_inbox: small by default because every
// event lands in the model's context.
const (
	DefaultInboxLimit = 10
	MaxInboxLimit     = 100
)

// SendInput is the input of mesh_send_message.
type SendInput struct {
	To        string      `json:"to" jsonschema:"the agent_id of the recipient: a friend or a member of one of your groups"`
	Text      string      `json:"text,omitempty" jsonschema:"the message text (sent as the first part)"`
	Parts     []mesh.Part `json:"parts,omitempty" jsonschema:"more parts after text: structured data, links or files"`
	TaskID    string      `json:"task_id,omitempty" jsonschema:"continue this existing task instead of starting a new one"`
	ContextID string      `json:"context_id,omitempty" jsonschema:"groups related tasks into one conversation; a new task gets a fresh one when omitted"`
	MessageID string      `json:"message_id,omitempty" jsonschema:"idempotency key (1-64 letters, digits, '.', '_', ':' or '-'); pass the same value again only to retry a call whose result you did not see, so the message is sent once"`
}

// SendOutput identifies the message a send or reply created.
type SendOutput struct {
	TaskID    string `json:"task_id" jsonschema:"the task the message belongs to; the recipient answers in it"`
	MessageID string `json:"message_id"`
	ContextID string `json:"context_id"`
	Status    string `json:"status,omitempty" jsonschema:"the task's state after the message"`
}

// ReplyInput is the input of mesh_reply.
type ReplyInput struct {
	TaskID    string      `json:"task_id" jsonschema:"the task to answer in (the task_id of the event you answer)"`
	Text      string      `json:"text,omitempty" jsonschema:"the reply text (sent as the first part)"`
	Parts     []mesh.Part `json:"parts,omitempty" jsonschema:"more parts after text"`
	MessageID string      `json:"message_id,omitempty" jsonschema:"idempotency key; reuse it only to retry a call whose result you did not see"`
}

// UpdateTaskInput is the input of mesh_update_task.
type UpdateTaskInput struct {
	TaskID string `json:"task_id" jsonschema:"the task to move"`
	Status string `json:"status" jsonschema:"the new state"`
	Text   string `json:"text,omitempty" jsonschema:"an optional note for the other agent: the result summary, the reason of a failure or rejection, or the question of input-required"`
}

// UpdateTaskOutput is the result of mesh_update_task.
type UpdateTaskOutput struct {
	TaskID         string `json:"task_id"`
	Status         string `json:"status"`
	PreviousStatus string `json:"previous_status"`
	MessageID      string `json:"message_id"`
}

// CheckInboxInput is the input of mesh_check_inbox.
type CheckInboxInput struct {
	After       *int64 `json:"after,omitempty" jsonschema:"read events after this seq instead of after your acknowledged position (e.g. to re-read history or look past unacknowledged events); does not move the position"`
	Limit       int    `json:"limit,omitempty" jsonschema:"at most this many events (default 10)"`
	WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"when there is no event yet, wait up to this many seconds for one (0 returns at once)"`
}

// InboxOutput is the result of mesh_check_inbox.
type InboxOutput struct {
	AgentID  string  `json:"agent_id" jsonschema:"you"`
	AckedSeq int64   `json:"acked_seq" jsonschema:"your acknowledged position: every event up to this seq is done"`
	Events   []Event `json:"events" jsonschema:"the events, oldest first"`
	More     bool    `json:"more" jsonschema:"more events wait after these"`
	// MissedThroughSeq is set when retention dropped events after the
	// position before they were read.
	MissedThroughSeq int64  `json:"missed_through_seq,omitempty" jsonschema:"events up to this seq expired before you read them; they cannot be fetched any more"`
	Hint             string `json:"hint" jsonschema:"what to do next"`
}

// Event is one inbox event as the model sees it.
type Event struct {
	Seq        int64     `json:"seq" jsonschema:"position in your inbox; acknowledge it with mesh_ack when done"`
	Type       string    `json:"type" jsonschema:"message, status (a task changed state) or artifact"`
	From       string    `json:"from" jsonschema:"the agent that caused the event"`
	TaskID     string    `json:"task_id"`
	ContextID  string    `json:"context_id"`
	GroupID    string    `json:"group_id,omitempty" jsonschema:"set when the message was sent to a group; replies go to the sender only"`
	MessageID  string    `json:"message_id"`
	OccurredAt time.Time `json:"occurred_at"`
	TaskStatus string    `json:"task_status,omitempty" jsonschema:"the task's state after the event"`
	Text       string    `json:"text,omitempty" jsonschema:"the text parts of the message, status note or artifact, joined by blank lines"`
	// Parts are the parts other than text (data, files, links): the text
	// parts are in Text only.
	Parts []mesh.Part `json:"parts,omitempty" jsonschema:"the parts other than text (structured data, files, links); the text parts are in text"`
}

// AckInput is the input of mesh_ack.
type AckInput struct {
	Seq int64 `json:"seq" jsonschema:"the seq of the last event you finished; it and every earlier event are acknowledged"`
}

// AckOutput is the result of mesh_ack.
type AckOutput struct {
	AckedSeq int64 `json:"acked_seq" jsonschema:"your acknowledged position now"`
}

// PageInput pages the friend and group lists.
type PageInput struct {
	After string `json:"after,omitempty" jsonschema:"the next_after of the previous page"`
	Limit int    `json:"limit,omitempty" jsonschema:"page size (default 100)"`
}

// GetTaskInput is the input of mesh_get_task.
type GetTaskInput struct {
	TaskID string `json:"task_id" jsonschema:"the task to show"`
}

// TaskMessagesInput is the input of mesh_get_task_messages.
type TaskMessagesInput struct {
	TaskID string `json:"task_id" jsonschema:"the task whose messages to read"`
	After  string `json:"after,omitempty" jsonschema:"the next_after of the previous page; omit to start at the first message"`
	Limit  int    `json:"limit,omitempty" jsonschema:"page size (default 20)"`
}

// ListTasksInput is the input of mesh_list_tasks.
type ListTasksInput struct {
	Status    string `json:"status,omitempty" jsonschema:"only tasks in this state"`
	Role      string `json:"role,omitempty" jsonschema:"only tasks you started (initiator) or received (recipient)"`
	ContextID string `json:"context_id,omitempty" jsonschema:"only tasks of this conversation"`
	Cursor    string `json:"cursor,omitempty" jsonschema:"the next_cursor of the previous page"`
	Limit     int    `json:"limit,omitempty" jsonschema:"page size (default 50)"`
}

// Writable task states (what mesh_update_task accepts) and all states.
var (
	updateStates = []string{"working", "input-required", "completed", "failed", "rejected", "canceled"}
	allStates    = []string{"submitted", "working", "input-required", "completed", "failed", "canceled", "rejected"}
)

func (s *Server) addTools() error {
	f := false
	t := true
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &f}
	errs := []error{
		addTool(s, &mcp.Tool{
			Name:        ToolSendMessage,
			Description: "Send a message to another agent. Starts a new task unless task_id is given; the result's task_id is where the other agent answers (its reply arrives in your inbox). Give text, parts or both. Only friends and group members are reachable; anyone else is a not_reachable error.",
			Annotations: &mcp.ToolAnnotations{Title: "Send a message", DestructiveHint: &f, OpenWorldHint: &t},
		}, s.send, nil),
		addTool(s, &mcp.Tool{
			Name:        ToolReply,
			Description: "Reply within a task you take part in (sender or recipient), e.g. to answer a message from your inbox. Give text, parts or both.",
			Annotations: &mcp.ToolAnnotations{Title: "Reply in a task", DestructiveHint: &f, OpenWorldHint: &t},
		}, s.reply, nil),
		addTool(s, &mcp.Tool{
			Name: ToolUpdateTask,
			Description: "Move a task to a new state; the other agent is told. As the recipient of a task: working, input-required (ask a question in text), completed, failed or rejected. Either side may cancel (canceled); " +
				"the sender answers input-required with mesh_reply. Completed, failed, rejected and canceled are final. An illegal move is an error and changes nothing.",
			Annotations: &mcp.ToolAnnotations{Title: "Update a task's status", DestructiveHint: &f, OpenWorldHint: &t},
		}, s.updateTask, func(props schemaProps) {
			props["status"].Enum = enum(updateStates)
		}),
		addTool(s, &mcp.Tool{
			Name: ToolCheckInbox,
			Description: "Read your next inbox events (messages, task status changes, artifacts) in order, after your acknowledged position. Reading does not consume them: handle them in seq order, then call mesh_ack with the seq of the last one you finished. " +
				"Unacknowledged events are returned again on the next call, also after a restart. Use wait_seconds to wait for new events.",
			Annotations: &mcp.ToolAnnotations{Title: "Check the inbox", ReadOnlyHint: true, OpenWorldHint: &f},
		}, s.checkInbox, func(props schemaProps) {
			props["after"].Minimum = num(0)
			props["limit"].Minimum, props["limit"].Maximum, props["limit"].Default = num(1), num(MaxInboxLimit), json.RawMessage(fmt.Sprint(DefaultInboxLimit))
			props["wait_seconds"].Minimum, props["wait_seconds"].Maximum, props["wait_seconds"].Default = num(0), num(meshclient.MaxInboxWait.Seconds()), json.RawMessage("0")
		}),
		addTool(s, &mcp.Tool{
			Name:        ToolAck,
			Description: "Acknowledge inbox events you have finished: the event with this seq and every earlier one are never returned by mesh_check_inbox again. Acknowledge only seqs mesh_check_inbox has shown you; acknowledging again is harmless.",
			Annotations: &mcp.ToolAnnotations{Title: "Acknowledge inbox events", DestructiveHint: &f, IdempotentHint: true, OpenWorldHint: &f},
		}, s.ack, func(props schemaProps) {
			props["seq"].Minimum = num(1)
		}),
		addTool(s, &mcp.Tool{
			Name:        ToolListFriends,
			Description: "List your friends (agents you may message) with their presence: active, draining or inactive. Messages to an inactive agent wait in its inbox.",
			Annotations: readOnly,
		}, s.listFriends, pageSchema),
		addTool(s, &mcp.Tool{
			Name:        ToolListGroups,
			Description: "List the groups you belong to. mesh_get_group_roster lists a group's members; mesh_send_group_message writes to all of them at once.",
			Annotations: readOnly,
		}, s.listGroups, pageSchema),
		addTool(s, &mcp.Tool{
			Name:        ToolGetTask,
			Description: "Show a task you take part in: its state, parties, its most recent messages in order (including status notes) and artifacts. earlier_messages counts the messages before those shown: read them with mesh_get_task_messages (from the first); messages_next_after, passed there as after, gives what was written since this answer.",
			Annotations: readOnly,
		}, s.getTask, nil),
		addTool(s, &mcp.Tool{
			Name:        ToolTaskMessages,
			Description: "Page through all messages of a task you take part in, oldest first (status notes included). Start without after; while more is true, call again with after set to the answer's next_after.",
			Annotations: readOnly,
		}, s.taskMessages, func(props schemaProps) {
			props["limit"].Minimum, props["limit"].Maximum = num(1), num(MaxTaskMessagesLimit)
		}),
		addTool(s, &mcp.Tool{
			Name:        ToolListTasks,
			Description: "List your tasks, most recent activity first (without their messages; use mesh_get_task for one task's history).",
			Annotations: readOnly,
		}, s.listTasks, func(props schemaProps) {
			props["status"].Enum = enum(allStates)
			props["role"].Enum = enum([]string{"initiator", "recipient"})
			props["limit"].Minimum, props["limit"].Maximum = num(1), num(200)
		}),
		s.addSocialTools(),
	}
	return errors.Join(errs...)
}

func pageSchema(props schemaProps) {
	props["limit"].Minimum, props["limit"].Maximum = num(1), num(1000)
}

// addTool registers h under t with schemas inferred from In and Out (and
// adjusted by edit), bounding each call by CallTimeout and turning every
// failure into a tool error the model can read.
func addTool[In, Out any](s *Server, t *mcp.Tool, h func(context.Context, In) (Out, error), edit func(schemaProps)) error {
	var err error
	if t.InputSchema, err = schemaFor[In](true, edit); err != nil {
		return fmt.Errorf("meshmcp: %s input schema: %w", t.Name, err)
	}
	if t.OutputSchema, err = schemaFor[Out](false, nil); err != nil {
		return fmt.Errorf("meshmcp: %s output schema: %w", t.Name, err)
	}
	name := t.Name
	mcp.AddTool(s.srv, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		start := s.cfg.Clock()
		out, err := h(ctx, in)
		if err != nil {
			terr := toolError(err)
			// The error text is the API's code and detail: no credentials,
			// no message content.
			s.log.Warn("tool call failed", "tool", name, "err", terr.Error())
			var zero Out
			return nil, zero, terr
		}
		s.log.Debug("tool call", "tool", name, "took", s.cfg.Clock().Sub(start))
		return nil, out, nil
	})
	return nil
}

// argError is a mistake in the tool's arguments that the schema cannot
// express.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

func badArgs(format string, args ...any) error { return &argError{fmt.Sprintf(format, args...)} }

// toolError renders err for the model: the stable code first, then what
// happened and, where it helps, what to do.
func toolError(err error) error {
	var ae *meshclient.APIError
	var arg *argError
	switch {
	case errors.As(err, &ae):
		msg := fmt.Sprintf("%s (HTTP %d)", ae.Code, ae.Status)
		if ae.Detail != "" {
			msg += ": " + ae.Detail
		}
		switch {
		case ae.RetryAfter > 0:
			msg += fmt.Sprintf(" (retry after %s)", ae.RetryAfter.Round(time.Second))
		case ae.Status == 401:
			msg += " (the agent's API key was rejected: check MESH_API_KEY)"
		}
		return errors.New(msg)
	case errors.As(err, &arg):
		return errors.New("invalid_arguments: " + arg.msg)
	case errors.Is(err, context.DeadlineExceeded):
		return errors.New("mesh_timeout: the mesh API did not answer in time; try again")
	case errors.Is(err, context.Canceled):
		return errors.New("canceled: the call was canceled")
	}
	return fmt.Errorf("mesh_unavailable: %s", strings.TrimPrefix(err.Error(), "meshclient: "))
}

// bound limits one call's API work (plus its long-poll wait).
func (s *Server) bound(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.CallTimeout+wait)
}

// message assembles text and parts into the parts of one message.
func message(text string, parts []mesh.Part) ([]mesh.Part, error) {
	var out []mesh.Part
	if text != "" {
		out = append(out, mesh.Part{Kind: "text", Text: text})
	}
	out = append(out, parts...)
	if len(out) == 0 {
		return nil, badArgs("the message is empty: give text, parts or both")
	}
	return out, nil
}

func (s *Server) send(ctx context.Context, in SendInput) (SendOutput, error) {
	parts, err := message(in.Text, in.Parts)
	if err != nil {
		return SendOutput{}, err
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	res, err := s.cfg.API.Send(ctx, meshclient.SendRequest{To: in.To, Parts: parts, TaskID: in.TaskID, ContextID: in.ContextID, MessageID: in.MessageID})
	return SendOutput(res), err
}

func (s *Server) reply(ctx context.Context, in ReplyInput) (SendOutput, error) {
	if in.TaskID == "" {
		return SendOutput{}, badArgs("task_id is required")
	}
	parts, err := message(in.Text, in.Parts)
	if err != nil {
		return SendOutput{}, err
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	res, err := s.cfg.API.Reply(ctx, in.TaskID, meshclient.ReplyRequest{Parts: parts, MessageID: in.MessageID})
	return SendOutput(res), err
}

func (s *Server) updateTask(ctx context.Context, in UpdateTaskInput) (UpdateTaskOutput, error) {
	if in.TaskID == "" {
		return UpdateTaskOutput{}, badArgs("task_id is required")
	}
	req := meshclient.StatusRequest{Status: in.Status}
	if in.Text != "" {
		req.Message = &meshclient.StatusMessage{Parts: []mesh.Part{{Kind: "text", Text: in.Text}}}
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	res, err := s.cfg.API.UpdateStatus(ctx, in.TaskID, req)
	return UpdateTaskOutput(res), err
}

func (s *Server) checkInbox(ctx context.Context, in CheckInboxInput) (InboxOutput, error) {
	limit := in.Limit
	if limit == 0 {
		limit = DefaultInboxLimit
	}
	wait := time.Duration(in.WaitSeconds) * time.Second
	ctx, cancel := s.bound(ctx, wait)
	defer cancel()
	agent, err := s.agent(ctx)
	if err != nil {
		return InboxOutput{}, err
	}
	// The cursor is read from disk on every call: another session of the
	// same agent may have acknowledged events since.
	cur, err := LoadCursor(s.cfg.StateDir, agent)
	if err != nil {
		return InboxOutput{}, err
	}
	after := cur.AckedSeq
	if in.After != nil {
		after = *in.After
	}
	// One event more than asked tells whether more are waiting.
	page, err := s.cfg.API.Inbox(ctx, after, limit+1, wait)
	if err != nil {
		return InboxOutput{}, err
	}
	out := InboxOutput{AgentID: agent, AckedSeq: cur.AckedSeq, Events: []Event{}}
	if len(page.Events) > limit {
		page.Events, out.More = page.Events[:limit], true
	}
	if page.OldestSeq > after+1 {
		out.MissedThroughSeq = page.OldestSeq - 1
	}
	for _, env := range page.Events {
		out.Events = append(out.Events, event(env))
	}
	if n := len(out.Events); n > 0 {
		last := out.Events[n-1].Seq
		s.ackMu.Lock()
		s.seen = max(s.seen, last)
		s.ackMu.Unlock()
		out.Hint = fmt.Sprintf("Handle these events in seq order, then call mesh_ack with seq %d (or the seq of the last one you finished).", last)
		if out.More {
			out.Hint += " More events are waiting: check again afterwards."
		}
	} else {
		out.Hint = "No new events. Call again later, or with wait_seconds (up to 20) to wait for one."
	}
	return out, nil
}

// event flattens an envelope for the model: routing fields, the task's
// state, the text once, and only the parts that are not text (the opened
// body would repeat the text and double the tokens).
func event(env mesh.Envelope) Event {
	ev := Event{Seq: env.Seq, Type: env.Type, From: env.From, TaskID: env.TaskID, ContextID: env.ContextID, GroupID: env.GroupID,
		MessageID: env.MessageID, OccurredAt: env.OccurredAt}
	ev.Text, _, ev.TaskStatus = meshclient.EventText(env)
	for _, p := range meshclient.EventParts(env) {
		if p.Kind != "text" {
			ev.Parts = append(ev.Parts, p)
		}
	}
	return ev
}

func (s *Server) ack(ctx context.Context, in AckInput) (AckOutput, error) {
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	agent, err := s.agent(ctx)
	if err != nil {
		return AckOutput{}, err
	}
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	cur, err := LoadCursor(s.cfg.StateDir, agent)
	if err != nil {
		return AckOutput{}, err
	}
	if in.Seq <= cur.AckedSeq {
		return AckOutput{AckedSeq: cur.AckedSeq}, nil // already done: acknowledging again is harmless
	}
	if in.Seq > s.seen {
		return AckOutput{}, badArgs("seq %d was not returned by mesh_check_inbox yet (the highest seen is %d, acknowledged %d): call mesh_check_inbox and acknowledge only events it showed you",
			in.Seq, max(s.seen, cur.AckedSeq), cur.AckedSeq)
	}
	cur, err = advanceCursor(s.cfg.StateDir, agent, in.Seq, s.cfg.Clock())
	if err != nil {
		return AckOutput{}, err
	}
	s.log.Debug("inbox acknowledged", "acked_seq", cur.AckedSeq)
	return AckOutput{AckedSeq: cur.AckedSeq}, nil
}

func (s *Server) listFriends(ctx context.Context, in PageInput) (meshclient.FriendPage, error) {
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	page, err := s.cfg.API.ListFriends(ctx, in.After, in.Limit)
	if page.Friends == nil {
		page.Friends = []meshclient.Friend{}
	}
	return page, err
}

func (s *Server) listGroups(ctx context.Context, in PageInput) (meshclient.GroupPage, error) {
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	page, err := s.cfg.API.ListGroups(ctx, in.After, in.Limit)
	if page.Groups == nil {
		page.Groups = []meshclient.Group{}
	}
	return page, err
}

func (s *Server) getTask(ctx context.Context, in GetTaskInput) (meshclient.TaskDetail, error) {
	if in.TaskID == "" {
		return meshclient.TaskDetail{}, badArgs("task_id is required")
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	return s.cfg.API.GetTask(ctx, in.TaskID)
}

func (s *Server) taskMessages(ctx context.Context, in TaskMessagesInput) (meshclient.TaskMessagePage, error) {
	if in.TaskID == "" {
		return meshclient.TaskMessagePage{}, badArgs("task_id is required")
	}
	if in.Limit < 0 || in.Limit > MaxTaskMessagesLimit {
		return meshclient.TaskMessagePage{}, badArgs("limit must be from 1 to %d", MaxTaskMessagesLimit)
	}
	if in.Limit == 0 {
		in.Limit = DefaultTaskMessagesLimit
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	page, err := s.cfg.API.TaskMessages(ctx, in.TaskID, in.After, in.Limit)
	if page.Messages == nil {
		page.Messages = []meshclient.TaskMessage{}
	}
	return page, err
}

func (s *Server) listTasks(ctx context.Context, in ListTasksInput) (meshclient.TaskPage, error) {
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	page, err := s.cfg.API.ListTasks(ctx, meshclient.TaskQuery{Status: in.Status, Role: in.Role, ContextID: in.ContextID, Cursor: in.Cursor, Limit: in.Limit})
	if page.Tasks == nil {
		page.Tasks = []meshclient.Task{}
	}
	return page, err
}
