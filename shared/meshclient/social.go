package meshclient

import (
	"context"
	"encoding/json"
	"github.com/agentmesh/agentmesh/shared/api"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

// Me is GET /v1/agents/me: the agent's own profile and presence.
type Me = api.Me

// Me returns the agent's own profile, presence and newest inbox seq.
func (c *Client) Me(ctx context.Context) (Me, error) {
	var me Me
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/agents/me", auth: true, retry: true}, &me)
	return me, err
}

// FriendRequest is one friend request.
type FriendRequest = api.FriendRequest

// FriendRequests is GET /v1/friends/requests: the pending requests.
type FriendRequests = api.FriendRequests

// SendFriendRequest asks agent to be friends. Repeating a pending request
// returns it unchanged, so the call is safe to retry.
func (c *Client) SendFriendRequest(ctx context.Context, to string) (FriendRequest, error) {
	var fr FriendRequest
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/friends/requests", body: map[string]string{"to": to}, auth: true, retry: true}, &fr)
	return fr, err
}

// FriendRequests lists the pending requests, incoming and outgoing.
func (c *Client) FriendRequests(ctx context.Context) (FriendRequests, error) {
	var frs FriendRequests
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/friends/requests", auth: true, retry: true}, &frs)
	return frs, err
}

// AcceptFriendRequest accepts a request addressed to the agent.
func (c *Client) AcceptFriendRequest(ctx context.Context, requestID string) (FriendRequest, error) {
	return c.decideFriendRequest(ctx, requestID, "accept")
}

// RejectFriendRequest rejects a request addressed to the agent, or
// withdraws one it sent.
func (c *Client) RejectFriendRequest(ctx context.Context, requestID string) (FriendRequest, error) {
	return c.decideFriendRequest(ctx, requestID, "reject")
}

func (c *Client) decideFriendRequest(ctx context.Context, requestID, verb string) (FriendRequest, error) {
	var fr FriendRequest
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/friends/requests/" + url.PathEscape(requestID) + "/" + verb, auth: true, retry: true}, &fr)
	return fr, err
}

// RemoveFriend ends a friendship (both directions).
func (c *Client) RemoveFriend(ctx context.Context, agentID string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: "/v1/friends/" + url.PathEscape(agentID), auth: true, retry: true}, nil)
}

// Block blocks an agent (ending any friendship with it).
func (c *Client) Block(ctx context.Context, agentID string) error {
	return c.do(ctx, call{method: http.MethodPut, path: "/v1/blocks/" + url.PathEscape(agentID), auth: true, retry: true}, nil)
}

// Unblock lifts a block; a no-op when there is none.
func (c *Client) Unblock(ctx context.Context, agentID string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: "/v1/blocks/" + url.PathEscape(agentID), auth: true, retry: true}, nil)
}

// CreateGroup creates a group owned by the agent. Not idempotent: a retry
// after an ambiguous failure may create a second group, so only failures
// that never reached the server are retried.
func (c *Client) CreateGroup(ctx context.Context, name string) (Group, error) {
	var g Group
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/groups", body: map[string]string{"name": name}, auth: true}, &g)
	return g, err
}

// Membership is one agent's membership of a group.
type Membership = api.Membership

// AddGroupMember adds a friend to a group (role "" = member). Adding a
// member again changes nothing, so the call is safe to retry.
func (c *Client) AddGroupMember(ctx context.Context, groupID, agentID, role string) (Membership, error) {
	body := map[string]string{"agent_id": agentID}
	if role != "" {
		body["role"] = role
	}
	var m Membership
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/groups/" + url.PathEscape(groupID) + "/members", body: body, auth: true, retry: true}, &m)
	return m, err
}

// RemoveGroupMember removes a member; the agent's own id leaves the group.
func (c *Client) RemoveGroupMember(ctx context.Context, groupID, agentID string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: "/v1/groups/" + url.PathEscape(groupID) + "/members/" + url.PathEscape(agentID), auth: true, retry: true}, nil)
}

// Member is one roster entry, with the member's presence.
type Member = api.Member

// Roster is a group with one page of its members.
type Roster = api.Roster

// Roster returns one page of a group's members (agent id > after).
func (c *Client) Roster(ctx context.Context, groupID, after string, limit int) (Roster, error) {
	return getPage[Roster](ctx, c, "/v1/groups/"+url.PathEscape(groupID)+"/roster", after, limit)
}

// GroupSendResult is the answer of a group send: one task per recipient.
type GroupSendResult = api.GroupSendResult

// GroupSendTask is the task a group send opened with one member.
type GroupSendTask = api.GroupTask

// SendGroup fans a message out to every other member of a group, retried
// with one message_id like Send.
func (c *Client) SendGroup(ctx context.Context, groupID string, parts []mesh.Part, messageID string) (GroupSendResult, error) {
	if messageID == "" {
		messageID = NewMessageID()
	}
	var res GroupSendResult
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/groups/" + url.PathEscape(groupID) + "/messages",
		body: map[string]any{"parts": parts, "message_id": messageID}, auth: true, retry: true}, &res)
	return res, err
}

// ArtifactResult identifies an added artifact.
type ArtifactResult = api.ArtifactResult

// AddArtifact adds a named artifact to a task the agent is the recipient
// of, retried with one message_id like Send.
func (c *Client) AddArtifact(ctx context.Context, taskID, name string, parts []mesh.Part, messageID string) (ArtifactResult, error) {
	if messageID == "" {
		messageID = NewMessageID()
	}
	var res ArtifactResult
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/tasks/" + url.PathEscape(taskID) + "/artifacts",
		body: map[string]any{"name": name, "parts": parts, "message_id": messageID}, auth: true, retry: true}, &res)
	return res, err
}

// EventParts are the parts an inbox event carries: of the message, the
// status note or the artifact.
func EventParts(env mesh.Envelope) []mesh.Part {
	parts, _ := eventBody(env)
	return parts
}

// EventText is the readable part of an inbox event: its text parts (of the
// message, the status note or the artifact) joined by blank lines, whether
// it carries other parts, and the task's state after the event.
func EventText(env mesh.Envelope) (text string, otherParts bool, taskStatus string) {
	parts, taskStatus := eventBody(env)
	var texts []string
	for _, p := range parts {
		if p.Kind == "text" {
			texts = append(texts, p.Text)
		} else {
			otherParts = true
		}
	}
	return strings.Join(texts, "\n\n"), otherParts, taskStatus
}

func eventBody(env mesh.Envelope) (parts []mesh.Part, taskStatus string) {
	type withParts struct {
		Parts []mesh.Part `json:"parts"`
	}
	var b struct {
		Message  *withParts `json:"message"`
		Artifact *withParts `json:"artifact"`
		Status   *struct {
			Message *withParts `json:"message"`
		} `json:"status"`
		Task struct {
			Status string `json:"status"`
		} `json:"task"`
	}
	if json.Unmarshal(env.Body, &b) != nil {
		return nil, ""
	}
	switch {
	case b.Message != nil:
		parts = b.Message.Parts
	case b.Artifact != nil:
		parts = b.Artifact.Parts
	case b.Status != nil && b.Status.Message != nil:
		parts = b.Status.Message.Parts
	}
	return parts, b.Task.Status
}

// PartsText is a one-line rendering of parts for people: the text parts
// joined by spaces, the others as [kind part].
func PartsText(parts []mesh.Part) string {
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Kind == "text" {
			texts = append(texts, p.Text)
		} else {
			texts = append(texts, "["+p.Kind+" part]")
		}
	}
	return strings.Join(texts, " ")
}
