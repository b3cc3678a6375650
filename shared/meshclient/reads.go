package meshclient

import (
	"context"
	"errors"
	"github.com/agentmesh/agentmesh/shared/api"
	"net/http"
	"net/url"
	"strconv"
)

// Friend is one entry of GET /v1/friends: a friend with its presence.
type Friend = api.Friend

// FriendPage is one page of friends, by agent id.
type FriendPage = api.FriendPage

// ListFriends returns the agent's friends with agent id > after (at most
// limit; 0 = the server's default).
func (c *Client) ListFriends(ctx context.Context, after string, limit int) (FriendPage, error) {
	return getPage[FriendPage](ctx, c, "/v1/friends", after, limit)
}

// Group is one entry of GET /v1/groups: a group the agent belongs to.
type Group = api.Group

// GroupPage is one page of groups.
type GroupPage = api.GroupPage

// ListGroups returns the groups the agent belongs to, paged like
// ListFriends.
func (c *Client) ListGroups(ctx context.Context, after string, limit int) (GroupPage, error) {
	return getPage[GroupPage](ctx, c, "/v1/groups", after, limit)
}

// getPage reads one page of the list at path: the entries with an id >
// after, at most limit of them (0 = the server's default).
func getPage[P any](ctx context.Context, c *Client, path, after string, limit int) (P, error) {
	var page P
	err := c.do(ctx, call{method: http.MethodGet, path: path, query: pageQuery(after, limit), auth: true, retry: true}, &page)
	return page, err
}

func pageQuery(after string, limit int) url.Values {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}

// Task is a task as the read routes return it.
type Task = api.Task

// TaskMessage is one message of a task (status notes included).
type TaskMessage = api.Message

// TaskArtifact is one output of a task.
type TaskArtifact = api.Artifact

// TaskDetail is a task with its recent history, as GET /v1/tasks/{id}
// returns it: a bounded slice, however long the task grew.
type TaskDetail = api.TaskDetail

// GetTask returns a task the agent takes part in, with its most recent
// messages and artifacts in the order they were written (EarlierMessages
// says how many messages TaskMessages has before them). Another agent's
// task is a 404.
func (c *Client) GetTask(ctx context.Context, taskID string) (TaskDetail, error) {
	if taskID == "" {
		return TaskDetail{}, errors.New("meshclient: GetTask needs a task id")
	}
	var t TaskDetail
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/tasks/" + url.PathEscape(taskID), auth: true, retry: true}, &t)
	return t, err
}

// MaxTaskMessagesLimit is the largest page of TaskMessages the API serves.
const MaxTaskMessagesLimit = 200

// TaskMessagePage is one page of a task's whole message history.
type TaskMessagePage = api.MessagePage

// TaskMessages pages a task's messages in the order they were written,
// after the cursor ("" = from the first), at most limit (0 = the server's
// default; at most MaxTaskMessagesLimit) and bounded by size by the server.
func (c *Client) TaskMessages(ctx context.Context, taskID, after string, limit int) (TaskMessagePage, error) {
	if taskID == "" {
		return TaskMessagePage{}, errors.New("meshclient: TaskMessages needs a task id")
	}
	var p TaskMessagePage
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/tasks/" + url.PathEscape(taskID) + "/messages",
		query: pageQuery(after, min(limit, MaxTaskMessagesLimit)), auth: true, retry: true}, &p)
	return p, err
}

// TaskQuery filters GET /v1/tasks; zero fields do not filter.
type TaskQuery struct {
	Status    string // one task state
	Role      string // "initiator" or "recipient"
	ContextID string
	Cursor    string // NextCursor of the previous page
	Limit     int    // 0 = the server's default
}

// TaskPage is one page of tasks, newest activity first.
type TaskPage = api.TaskPage

// ListTasks pages through the agent's tasks, newest activity first.
func (c *Client) ListTasks(ctx context.Context, tq TaskQuery) (TaskPage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"status": tq.Status, "role": tq.Role, "context_id": tq.ContextID, "cursor": tq.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if tq.Limit > 0 {
		q.Set("limit", strconv.Itoa(tq.Limit))
	}
	var page TaskPage
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/tasks", query: q, auth: true, retry: true}, &page)
	return page, err
}
