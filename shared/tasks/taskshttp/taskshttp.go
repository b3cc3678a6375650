// Package taskshttp is the Lambda surface of tasks: its HTTP endpoints and
// its scheduled jobs, keyed by their functions' logical ids in
// template.yaml, and the service built from a function's env. Handlers
// decode the request, call the domain and encode its typed answer with the
// route's status; nothing else.
package taskshttp

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/retention"
	"github.com/agentmesh/agentmesh/shared/tasks"
	"github.com/agentmesh/agentmesh/shared/tracing"
)

// New builds the service from a function's environment.
func New(env *app.Env) *tasks.Service {
	s := &tasks.Service{
		DB:              env.DB,
		Clock:           mesh.SystemClock,
		MaxMessageBytes: env.Config.MaxMessageBytes,
		IdleTimeout:     env.Config.TaskIdleTimeout,
		Log:             env.Log,
		Janitor:         outbox.Janitor{DB: env.DB, Retention: env.Config.OutboxRetention, Log: env.Log},
		Retention:       retention.Janitor{Policy: retention.Policy(env.Config.Retention)},
		Inbox:           outbox.Inbox{MaxPolls: env.Config.MaxLongPolls},
		TraceID:         tracing.TraceID,
	}
	return s.WithDefaults()
}

// Endpoints maps the template's logical function IDs to the task routes.
func Endpoints(s *tasks.Service) httpapi.Endpoints {
	// Defaults first: the handlers then share s without writing to it.
	s.WithDefaults()
	h := handlers{s}
	agent := func(h func(context.Context, *httpapi.Request) (httpapi.Response, error)) httpapi.Endpoint {
		return httpapi.Endpoint{Auth: httpapi.AuthAgent, Handle: h}
	}
	return httpapi.Endpoints{
		// The send checks the token's key inside its transaction.
		"SendMessageFunction":      {Auth: httpapi.AuthAgentKeyInTx, Handle: h.send},
		"SendGroupMessageFunction": agent(h.groupSend),
		"ReplyFunction":            agent(h.reply),
		"UpdateTaskStatusFunction": agent(h.status),
		"AddArtifactFunction":      agent(h.artifact),
		"GetTaskFunction":          agent(h.getTask),
		"ListTaskMessagesFunction": agent(h.listMessages),
		"ListTasksFunction":        agent(h.listTasks),
		"InboxFunction":            agent(h.inbox),
	}
}

// Jobs maps the template's scheduled functions to the task jobs.
func Jobs(s *tasks.Service) app.Jobs {
	s.WithDefaults()
	return app.Jobs{
		"TaskScannerFunction":   s.ScanIdleTasks,
		"OutboxJanitorFunction": s.RunJanitor,
	}
}

type handlers struct{ s *tasks.Service }

// answer encodes a domain result with the route's status.
func answer[T any](status int, v T, err error) (httpapi.Response, error) {
	if err != nil {
		return httpapi.Response{}, err
	}
	return httpapi.JSON(status, v), nil
}

// ---- writes: 202 for messages (delivery follows), 201 for an artifact,
// 200 for a status move ----

func (h handlers) send(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
	var req tasks.SendRequest
	if err := r.Decode(&req); err != nil {
		return httpapi.Response{}, err
	}
	keyID := "" // already checked unless the authenticator deferred it
	if r.Caller.KeyUnchecked {
		keyID = r.Caller.KeyID
	}
	res, err := h.s.SendKey(ctx, r.Caller.AgentID, keyID, req)
	return answer(http.StatusAccepted, res, err)
}

func (h handlers) reply(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
	var req tasks.ReplyRequest
	if err := r.Decode(&req); err != nil {
		return httpapi.Response{}, err
	}
	res, err := h.s.Reply(ctx, r.Caller.AgentID, r.Path("id"), req)
	return answer(http.StatusAccepted, res, err)
}

func (h handlers) status(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
	var req tasks.StatusRequest
	if err := r.Decode(&req); err != nil {
		return httpapi.Response{}, err
	}
	res, err := h.s.UpdateStatus(ctx, r.Caller.AgentID, r.Path("id"), req)
	return answer(http.StatusOK, res, err)
}

func (h handlers) artifact(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
	var req tasks.ArtifactRequest
	if err := r.Decode(&req); err != nil {
		return httpapi.Response{}, err
	}
	res, err := h.s.AddArtifact(ctx, r.Caller.AgentID, r.Path("id"), req)
	return answer(http.StatusCreated, res, err)
}

func (h handlers) groupSend(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
	var req tasks.GroupSendRequest
	if err := r.Decode(&req); err != nil {
		return httpapi.Response{}, err
	}
	res, err := h.s.SendToGroup(ctx, r.Caller.AgentID, r.Path("id"), req)
	return answer(http.StatusAccepted, res, err)
}

// ---- reads ----

func (h handlers) getTask(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
	t, err := h.s.GetTask(ctx, r.Caller.AgentID, r.Path("id"))
	return answer(http.StatusOK, t, err)
}

func (h handlers) listMessages(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
	limit, err := parseLimit(r.Query("limit"), tasks.DefaultMessagesLimit, tasks.MaxMessagesLimit)
	if err != nil {
		return httpapi.Response{}, err
	}
	p, err := h.s.ListMessages(ctx, r.Caller.AgentID, r.Path("id"), r.Query("after"), limit)
	return answer(http.StatusOK, p, err)
}

func (h handlers) listTasks(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
	q := tasks.ListQuery{Status: r.Query("status"), Role: r.Query("role"), ContextID: r.Query("context_id"), Cursor: r.Query("cursor")}
	// 0 leaves the default to the domain.
	limit, err := parseLimit(r.Query("limit"), 0, tasks.MaxListLimit)
	if err != nil {
		return httpapi.Response{}, err
	}
	q.Limit = limit
	res, err := h.s.ListTasks(ctx, r.Caller.AgentID, q)
	return answer(http.StatusOK, res, err)
}

func (h handlers) inbox(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
	q, err := parseInboxQuery(r.Query)
	if err != nil {
		return httpapi.Response{}, err
	}
	page, err := h.s.ReadInbox(ctx, r.Caller.AgentID, q)
	return answer(http.StatusOK, page, err)
}

// parseLimit reads a limit query parameter: def when absent, otherwise an
// integer from 1 to most.
func parseLimit(v string, def, most int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, mesh.Errorf(mesh.KindInvalid, "invalid_query", "limit must be an integer from 1 to %d", most)
	}
	return n, nil
}

// parseInboxQuery reads after (a seq, default 0), limit (1-500, default
// 100) and wait (whole seconds 0-20, default 0).
func parseInboxQuery(get func(string) string) (tasks.InboxQuery, error) {
	q := tasks.InboxQuery{Limit: outbox.DefaultInboxLimit}
	if v := get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return q, mesh.Errorf(mesh.KindInvalid, "invalid_query", "after must be a seq: an integer >= 0")
		}
		q.After = n
	}
	limit, err := parseLimit(get("limit"), outbox.DefaultInboxLimit, outbox.MaxInboxLimit)
	if err != nil {
		return q, err
	}
	q.Limit = limit
	if v := get("wait"); v != "" {
		n, err := strconv.Atoi(v)
		// Compared in seconds: n*time.Second could overflow into a negative.
		if err != nil || n < 0 || n > int(outbox.MaxInboxWait/time.Second) {
			return q, mesh.Errorf(mesh.KindInvalid, "invalid_query", "wait must be whole seconds from 0 to %d", int(outbox.MaxInboxWait/time.Second))
		}
		q.Wait = time.Duration(n) * time.Second
	}
	return q, nil
}
