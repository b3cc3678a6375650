package a2agw

import (
	"context"
	"encoding/json"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// Following a task. What the target does to a task (replies, status moves,
// artifacts) reaches the caller as events of the caller's own inbox (gapless
// seq, one indexed range read per poll), so a waiting SendMessage or an open
// stream long-polls that inbox from the seq it held before the send or the
// snapshot, keeps the events of its task and skips the rest. Reading
// consumes nothing: meshd's progress is its own.
//
// Cost per waiting call: the inbox long poll's, the one GET /v1/inbox uses
// (outbox.Inbox.Wait): one read, then a pause that doubles from 100 ms to
// 1 s while nothing arrives, so at most about 1 query/s once settled (plus
// one OldestSeq read per Wait answer, and one task read and one inbox read
// per empty followSlice, to notice a move the caller itself made
// elsewhere, such as a cancel or its answer resuming an input-required
// task, which goes to the target's inbox, not the caller's). A busy inbox
// answers each poll at once; those reads fetch new events, at most one read
// per batch of them.
//
// Slots: a waiting A2A call does not take one of the agent's long-poll
// slots (outbox.Inbox.MaxPolls, which exist so one meshd cannot pin many
// functions): taking them would starve the agent's own meshd. It takes one
// of the caller's A2A slots instead (Gateway.MaxWaits, table a2a_waits, the
// same mechanism; see waits.go), and is bounded by SendWait / StreamMax, by
// the rate unit every call spends, and by the function's concurrency.

// followSlice is the longest single long poll of a follow.
const followSlice = outbox.MaxInboxWait

// followBatch is how many inbox events one poll reads.
const followBatch = 100

// inbox is the caller-side inbox reader: the tasks service's, taking none
// of the long-poll slots the caller's own meshd polls with.
func (g *Gateway) inbox() outbox.Inbox {
	in := g.Tasks.Inbox
	in.Uncapped = true
	return in
}

// followed is what a follow saw of its task.
type followed struct {
	// state is the last state seen ("" if none).
	state string
	// reply is the agent's reply (a "message" event) when it is the last
	// event of the task that carried a message; artifact tells that an
	// artifact arrived.
	reply    *a2a.Message
	artifact bool
}

// follow reads the caller's inbox after seq until an event of the task
// carries a terminal or input-required state, or deadline passes, or ctx
// ends; a deadline already passed still reads what is there, without
// waiting. known is the state the caller already has (the snapshot's):
// a quiet slice that finds the task in another state without an event
// saying so (a move of the caller's own, which reaches the target's
// inbox, not the caller's: a cancel elsewhere, or its answer resuming an
// input-required task) reports it as a status update, and stops there if
// it ends the wait. emit (when not nil) gets each update of the task in
// commit order, and stops the follow by returning false.
func (h *meshHandler) follow(ctx context.Context, taskID string, after int64, known string, deadline time.Time, emit func(a2a.Event) bool) (followed, error) {
	in := h.g.inbox()
	var out followed
	for {
		if ctx.Err() != nil {
			return out, nil
		}
		left := time.Until(deadline)
		page, err := in.Wait(ctx, h.caller, after, followBatch, max(0, min(left, followSlice)))
		if err != nil {
			if ctx.Err() != nil {
				return out, nil
			}
			return out, h.toA2A(ctx, err)
		}
		events := page.Events
		if len(events) == 0 {
			if left <= 0 {
				return out, nil
			}
			d, more, err := h.quietCheck(ctx, in, taskID, after)
			if err != nil {
				if ctx.Err() != nil {
					return out, nil
				}
				return out, h.toA2A(ctx, err)
			}
			events = more
			if len(events) == 0 {
				if d.Status == known {
					continue
				}
				known, out.state = d.Status, d.Status
				if emit != nil && !emit(&a2a.TaskStatusUpdateEvent{TaskID: a2a.TaskID(taskID), ContextID: d.ContextID,
					Status: a2a.TaskStatus{State: toA2AState[d.Status], Timestamp: &d.UpdatedAt}}) {
					return out, nil
				}
				if stops(d.Status) {
					return out, nil
				}
				continue
			}
		}
		for _, e := range events {
			after = e.Seq
			if e.TaskID != taskID {
				continue
			}
			ev, st := h.update(e)
			if ev == nil {
				continue
			}
			out.note(e, ev)
			known, out.state = st, st
			if emit != nil && !emit(ev) {
				return out, nil
			}
			if stops(st) {
				return out, nil
			}
		}
	}
}

// quietCheck reads the task after a quiet slice, then the inbox once more
// without waiting: an event committed before the task read is then in
// more (the inbox's seq follows commit order), so a state the task shows
// with more empty is a move no event of the caller's inbox carries.
func (h *meshHandler) quietCheck(ctx context.Context, in outbox.Inbox, taskID string, after int64) (*tasks.TaskDetail, []mesh.Envelope, error) {
	d, err := h.g.Tasks.PairTask(ctx, h.caller, h.target, taskID, 0)
	if err != nil {
		return nil, nil, err
	}
	more, err := in.Read(ctx, h.caller, after, followBatch)
	return d, more, err
}

// note records what the answer rule of SendMessage needs from one update.
func (f *followed) note(e mesh.Envelope, ev a2a.Event) {
	switch u := ev.(type) {
	case *a2a.TaskArtifactUpdateEvent:
		f.artifact = true
	case *a2a.TaskStatusUpdateEvent:
		switch {
		case e.Type == mesh.EventMessage && u.Status.Message != nil && u.Status.Message.Role == a2a.MessageRoleAgent:
			f.reply = u.Status.Message
		case u.Status.Message != nil:
			f.reply = nil
		}
	}
}

// update maps one inbox event of the task to its A2A update, with the
// task's state after it. The target's replies travel inside a status
// update (its message), never as a bare Message.
func (h *meshHandler) update(e mesh.Envelope) (a2a.Event, string) {
	at := e.OccurredAt
	switch e.Type {
	case mesh.EventMessage:
		var b tasks.MessageBody
		if json.Unmarshal(e.Body, &b) != nil {
			return nil, ""
		}
		return &a2a.TaskStatusUpdateEvent{TaskID: a2a.TaskID(b.Task.TaskID), ContextID: b.Task.ContextID,
			Status: a2a.TaskStatus{State: toA2AState[b.Task.Status], Message: eventMessage(b.Task, &b.Message), Timestamp: &at}}, b.Task.Status
	case mesh.EventStatus:
		var b tasks.StatusBody
		if json.Unmarshal(e.Body, &b) != nil {
			return nil, ""
		}
		return &a2a.TaskStatusUpdateEvent{TaskID: a2a.TaskID(b.Task.TaskID), ContextID: b.Task.ContextID,
			Status: a2a.TaskStatus{State: toA2AState[b.Status.State], Message: eventMessage(b.Task, b.Status.Message), Timestamp: &at}}, b.Status.State
	case mesh.EventArtifact:
		var b tasks.ArtifactBody
		if json.Unmarshal(e.Body, &b) != nil {
			return nil, ""
		}
		var parts []mesh.Part
		if json.Unmarshal(b.Artifact.Parts, &parts) != nil {
			parts = nil
		}
		return &a2a.TaskArtifactUpdateEvent{TaskID: a2a.TaskID(b.Task.TaskID), ContextID: b.Task.ContextID,
			Artifact: &a2a.Artifact{ID: a2a.ArtifactID(b.Artifact.ArtifactID), Name: b.Artifact.Name, Parts: a2aParts(parts)}}, b.Task.Status
	}
	// An undeliverable placeholder: its content cannot be served; a later
	// read of the task shows where it stands.
	return nil, ""
}
