package meshmcp

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
)

// Tool names of the agent's social graph, groups, artifacts and profile.
const (
	ToolSendGroup           = "mesh_send_group_message"
	ToolRoster              = "mesh_get_group_roster"
	ToolCreateGroup         = "mesh_create_group"
	ToolAddGroupMember      = "mesh_add_group_member"
	ToolSendFriendRequest   = "mesh_send_friend_request"
	ToolListFriendRequests  = "mesh_list_friend_requests"
	ToolAcceptFriendRequest = "mesh_accept_friend_request"
	ToolRejectFriendRequest = "mesh_reject_friend_request"
	ToolAddArtifact         = "mesh_add_artifact"
	ToolWhoami              = "mesh_whoami"
)

// GroupSendInput is the input of mesh_send_group_message.
type GroupSendInput struct {
	GroupID   string      `json:"group_id" jsonschema:"the group (see mesh_list_groups)"`
	Text      string      `json:"text,omitempty" jsonschema:"the message text (sent as the first part)"`
	Parts     []mesh.Part `json:"parts,omitempty" jsonschema:"more parts after text"`
	MessageID string      `json:"message_id,omitempty" jsonschema:"idempotency key; reuse it only to retry a call whose result you did not see"`
}

// RosterInput is the input of mesh_get_group_roster.
type RosterInput struct {
	GroupID string `json:"group_id" jsonschema:"the group (see mesh_list_groups)"`
	After   string `json:"after,omitempty" jsonschema:"the next_after of the previous page"`
	Limit   int    `json:"limit,omitempty" jsonschema:"page size (default 100)"`
}

// CreateGroupInput is the input of mesh_create_group.
type CreateGroupInput struct {
	Name string `json:"name" jsonschema:"the group's name (1-200 printable characters)"`
}

// AddMemberInput is the input of mesh_add_group_member.
type AddMemberInput struct {
	GroupID string `json:"group_id"`
	AgentID string `json:"agent_id" jsonschema:"a friend of yours"`
	Role    string `json:"role,omitempty" jsonschema:"member (default) or admin (only the owner adds admins)"`
}

// AgentInput names one agent.
type AgentInput struct {
	To string `json:"to" jsonschema:"the agent_id to ask"`
}

// RequestInput names one friend request.
type RequestInput struct {
	RequestID string `json:"request_id" jsonschema:"the request_id from mesh_list_friend_requests"`
}

// ArtifactInput is the input of mesh_add_artifact.
type ArtifactInput struct {
	TaskID    string      `json:"task_id" jsonschema:"a task you received (you are its recipient) that is not finished"`
	Name      string      `json:"name" jsonschema:"the artifact's name, e.g. report.md"`
	Text      string      `json:"text,omitempty" jsonschema:"the artifact's text content (sent as the first part)"`
	Parts     []mesh.Part `json:"parts,omitempty" jsonschema:"more parts after text: structured data or files"`
	MessageID string      `json:"message_id,omitempty" jsonschema:"idempotency key; reuse it only to retry a call whose result you did not see"`
}

// WhoamiInput takes nothing.
type WhoamiInput struct{}

// WhoamiOutput is the agent's own profile.
type WhoamiOutput struct {
	AgentID         string     `json:"agent_id" jsonschema:"you: the id other agents send to"`
	Name            string     `json:"name"`
	Status          string     `json:"status" jsonschema:"your presence: active, draining or inactive"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at,omitempty"`
	LastSeq         int64      `json:"last_seq" jsonschema:"the newest seq of your inbox"`
}

func (s *Server) addSocialTools() error {
	f, t := false, true
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &f}
	write := &mcp.ToolAnnotations{DestructiveHint: &f, OpenWorldHint: &t}
	idem := &mcp.ToolAnnotations{DestructiveHint: &f, IdempotentHint: true, OpenWorldHint: &t}
	return errors.Join(
		addTool(s, &mcp.Tool{Name: ToolSendGroup, Annotations: write,
			Description: "Send one message to every other member of a group you belong to: each gets its own task (listed in the result), all in the group's conversation; replies come back to you only."},
			s.sendGroup, nil),
		addTool(s, &mcp.Tool{Name: ToolRoster, Annotations: readOnly,
			Description: "List a group's members with their roles (owner, admin, member) and presence. You may message each of them with mesh_send_message."},
			s.roster, pageSchema),
		addTool(s, &mcp.Tool{Name: ToolCreateGroup, Annotations: write,
			Description: "Create a group; you become its owner and may add your friends with mesh_add_group_member."},
			s.createGroup, nil),
		addTool(s, &mcp.Tool{Name: ToolAddGroupMember, Annotations: idem,
			Description: "Add a friend of yours to a group you own or administer. Adding a member again changes nothing."},
			s.addMember, func(props schemaProps) { props["role"].Enum = enum([]string{"member", "admin"}) }),
		addTool(s, &mcp.Tool{Name: ToolSendFriendRequest, Annotations: idem,
			Description: "Ask another agent to be friends (friends may message each other). It answers exactly as a pending request whether or not the id exists; asking again while pending changes nothing."},
			s.sendFriendRequest, nil),
		addTool(s, &mcp.Tool{Name: ToolListFriendRequests, Annotations: readOnly,
			Description: "List pending friend requests: incoming (accept or reject them) and outgoing (reject withdraws one)."},
			s.listFriendRequests, nil),
		addTool(s, &mcp.Tool{Name: ToolAcceptFriendRequest, Annotations: idem,
			Description: "Accept an incoming friend request: you and the sender become friends."},
			s.acceptFriendRequest, nil),
		addTool(s, &mcp.Tool{Name: ToolRejectFriendRequest, Annotations: idem,
			Description: "Reject an incoming friend request, or withdraw one you sent."},
			s.rejectFriendRequest, nil),
		addTool(s, &mcp.Tool{Name: ToolAddArtifact, Annotations: write,
			Description: "Attach a named output (a report, a file, structured data) to a task you received; its sender gets an artifact event. Give text, parts or both."},
			s.addArtifact, nil),
		addTool(s, &mcp.Tool{Name: ToolWhoami, Annotations: readOnly,
			Description: "Your own agent_id, name and presence: the id to give other agents so they can befriend or message you."},
			s.whoami, nil),
	)
}

func (s *Server) sendGroup(ctx context.Context, in GroupSendInput) (meshclient.GroupSendResult, error) {
	if in.GroupID == "" {
		return meshclient.GroupSendResult{}, badArgs("group_id is required")
	}
	parts, err := message(in.Text, in.Parts)
	if err != nil {
		return meshclient.GroupSendResult{}, err
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	res, err := s.cfg.API.SendGroup(ctx, in.GroupID, parts, in.MessageID)
	if res.Tasks == nil {
		res.Tasks = []meshclient.GroupSendTask{}
	}
	return res, err
}

func (s *Server) roster(ctx context.Context, in RosterInput) (meshclient.Roster, error) {
	if in.GroupID == "" {
		return meshclient.Roster{}, badArgs("group_id is required")
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	r, err := s.cfg.API.Roster(ctx, in.GroupID, in.After, in.Limit)
	if r.Members == nil {
		r.Members = []meshclient.Member{}
	}
	return r, err
}

func (s *Server) createGroup(ctx context.Context, in CreateGroupInput) (meshclient.Group, error) {
	if in.Name == "" {
		return meshclient.Group{}, badArgs("name is required")
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	return s.cfg.API.CreateGroup(ctx, in.Name)
}

func (s *Server) addMember(ctx context.Context, in AddMemberInput) (meshclient.Membership, error) {
	if in.GroupID == "" || in.AgentID == "" {
		return meshclient.Membership{}, badArgs("group_id and agent_id are required")
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	return s.cfg.API.AddGroupMember(ctx, in.GroupID, in.AgentID, in.Role)
}

func (s *Server) sendFriendRequest(ctx context.Context, in AgentInput) (meshclient.FriendRequest, error) {
	if in.To == "" {
		return meshclient.FriendRequest{}, badArgs("to is required")
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	return s.cfg.API.SendFriendRequest(ctx, in.To)
}

func (s *Server) listFriendRequests(ctx context.Context, _ WhoamiInput) (meshclient.FriendRequests, error) {
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	frs, err := s.cfg.API.FriendRequests(ctx)
	if frs.Incoming == nil {
		frs.Incoming = []meshclient.FriendRequest{}
	}
	if frs.Outgoing == nil {
		frs.Outgoing = []meshclient.FriendRequest{}
	}
	return frs, err
}

func (s *Server) acceptFriendRequest(ctx context.Context, in RequestInput) (meshclient.FriendRequest, error) {
	return s.decide(ctx, in, s.cfg.API.AcceptFriendRequest)
}

func (s *Server) rejectFriendRequest(ctx context.Context, in RequestInput) (meshclient.FriendRequest, error) {
	return s.decide(ctx, in, s.cfg.API.RejectFriendRequest)
}

func (s *Server) decide(ctx context.Context, in RequestInput, do func(context.Context, string) (meshclient.FriendRequest, error)) (meshclient.FriendRequest, error) {
	if in.RequestID == "" {
		return meshclient.FriendRequest{}, badArgs("request_id is required")
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	return do(ctx, in.RequestID)
}

func (s *Server) addArtifact(ctx context.Context, in ArtifactInput) (meshclient.ArtifactResult, error) {
	if in.TaskID == "" || in.Name == "" {
		return meshclient.ArtifactResult{}, badArgs("task_id and name are required")
	}
	parts, err := message(in.Text, in.Parts)
	if err != nil {
		return meshclient.ArtifactResult{}, err
	}
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	return s.cfg.API.AddArtifact(ctx, in.TaskID, in.Name, parts, in.MessageID)
}

func (s *Server) whoami(ctx context.Context, _ WhoamiInput) (WhoamiOutput, error) {
	ctx, cancel := s.bound(ctx, 0)
	defer cancel()
	me, err := s.cfg.API.Me(ctx)
	return WhoamiOutput{AgentID: me.AgentID, Name: me.Name, Status: me.Status, LastHeartbeatAt: me.LastHeartbeatAt, LastSeq: me.LastSeq}, err
}
