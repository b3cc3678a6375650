package meshclient

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

// Friend is one entry of GET /v1/friends: a friend with its presence.
type Friend struct {
	AgentID string `json:"agent_id"`
	Name    string `json:"name"`
	// Status is the friend's presence: active, draining or inactive.
	Status          string     `json:"status"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at"`
	Since           time.Time  `json:"since"`
}

// FriendPage is one page of friends, by agent id.
type FriendPage struct {
	Friends []Friend `json:"friends"`
	// NextAfter fetches the next page; empty on the last one.
	NextAfter string `json:"next_after,omitempty"`
}

// ListFriends returns the agent's friends with agent id > after (at most
// limit; 0 = the server's default).
func (c *Client) ListFriends(ctx context.Context, after string, limit int) (FriendPage, error) {
	var page FriendPage
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/friends", query: pageQuery(after, limit), auth: true, retry: true}, &page)
	return page, err
}

// Group is one entry of GET /v1/groups: a group the agent belongs to.
type Group struct {
	GroupID   string `json:"group_id"`
	Name      string `json:"name"`
	Owner     string `json:"owner"`
	ContextID string `json:"context_id"`
	// Role is the agent's role in the group: owner, admin or member.
	Role        string    `json:"role,omitempty"`
	MemberCount int       `json:"member_count"`
	CreatedAt   time.Time `json:"created_at"`
}

// GroupPage is one page of groups.
type GroupPage struct {
	Groups    []Group `json:"groups"`
	NextAfter string  `json:"next_after,omitempty"`
}

// ListGroups returns the groups the agent belongs to, paged like
// ListFriends.
func (c *Client) ListGroups(ctx context.Context, after string, limit int) (GroupPage, error) {
	var page GroupPage
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/groups", query: pageQuery(after, limit), auth: true, retry: true}, &page)
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
type Task struct {
	TaskID    string    `json:"task_id"`
	ContextID string    `json:"context_id"`
	GroupID   string    `json:"group_id,omitempty"`
	Initiator string    `json:"initiator"`
	Recipient string    `json:"recipient"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// TaskMessage is one message of a task (status notes included).
type TaskMessage struct {
	MessageID string      `json:"message_id"`
	From      string      `json:"from"`
	Parts     []mesh.Part `json:"parts"`
	CreatedAt time.Time   `json:"created_at"`
}

// TaskArtifact is one output of a task.
type TaskArtifact struct {
	ArtifactID string      `json:"artifact_id"`
	Name       string      `json:"name"`
	Parts      []mesh.Part `json:"parts"`
	CreatedBy  string      `json:"created_by"`
	CreatedAt  time.Time   `json:"created_at"`
}

// TaskDetail is a task with its recent history, as GET /v1/tasks/{id}
// returns it: a bounded slice, however long the task grew.
type TaskDetail struct {
	Task
	// Messages are the most recent messages (status notes included), in the
	// order they were written.
	Messages []TaskMessage `json:"messages"`
	// EarlierMessages counts the messages before Messages: TaskMessages
	// pages the whole history from the first.
	EarlierMessages int `json:"earlier_messages"`
	// MessagesNextAfter is the cursor after the last listed message: passed
	// to TaskMessages it returns what was written since.
	MessagesNextAfter string `json:"messages_next_after,omitempty"`
	// Artifacts are the most recent artifacts; EarlierArtifacts counts those
	// before them.
	Artifacts        []TaskArtifact `json:"artifacts"`
	EarlierArtifacts int            `json:"earlier_artifacts"`
}

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
type TaskMessagePage struct {
	Messages []TaskMessage `json:"messages"`
	// NextAfter is the cursor for the next page (the given one when the
	// page is empty).
	NextAfter string `json:"next_after"`
	// More says more messages follow NextAfter now.
	More bool `json:"more"`
}

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
type TaskPage struct {
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"next_cursor,omitempty"`
}

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
