// Package identityhttp is identity's adapter to AWS: the HTTP routes of
// identity keyed by their functions' logical ids in template.yaml, the
// authenticator every HTTP function verifies credentials with, and the
// token function's CloudFormation custom resource. Handlers decode the
// request, call the domain and encode its typed answer; nothing else.
package identityhttp

import (
	"context"
	"net/http"
	"strconv"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// Endpoints returns every HTTP route of identity, keyed by the logical ID of
// its function in template.yaml.
//
// Every agent route spends one request of the caller's rate budget, in the
// domain: write routes inside their own transaction (no extra commit; a 429
// rolls the write back), read routes as one autocommit statement before
// reading. Creating
// routes answer 201 when they create and 200 when the thing already existed.
func Endpoints(s *identity.Service) httpapi.Endpoints {
	agent := func(h func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error)) httpapi.Endpoint {
		return httpapi.Endpoint{Auth: httpapi.AuthAgent, Handle: h}
	}
	admin := func(h func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error)) httpapi.Endpoint {
		return httpapi.Endpoint{Auth: httpapi.AuthAdmin, Handle: h}
	}
	return httpapi.Endpoints{
		"AuthTokenFunction": {Auth: httpapi.AuthPublic, Handle: func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in api.TokenRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			tok, err := s.IssueToken(ctx, in.APIKey, httpapi.SourceAddr(ctx))
			return httpapi.JSON(http.StatusOK, tok), err
		}},

		"AdminCreateAgentFunction": admin(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in api.CreateAgentRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			a, err := s.CreateAgentFor(ctx, identity.OperatorAccount, identity.KindNormal, in.AgentID, in.Name)
			return httpapi.JSON(http.StatusCreated, a), err
		}),
		"AdminRotateKeyFunction": admin(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var opt identity.RotateOptions
			if err := decodeOptional(r, &opt); err != nil {
				return httpapi.Response{}, err
			}
			k, err := s.RotateKey(ctx, r.Path("id"), opt)
			return httpapi.JSON(http.StatusCreated, k), err
		}),
		"AdminRevokeKeyFunction": admin(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			k, err := s.RevokeKey(ctx, r.Path("id"), r.Path("key_id"))
			return httpapi.JSON(http.StatusOK, k), err
		}),
		"AdminCreateFriendshipFunction": admin(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in api.FriendshipRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			f, created, err := s.AdminCreateFriendship(ctx, in.A, in.B)
			return httpapi.JSON(createdStatus(created), f), err
		}),
		"AdminCreateGroupFunction": admin(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in identity.AdminGroupInput
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			g, err := s.AdminCreateGroup(ctx, in)
			return httpapi.JSON(http.StatusCreated, g), err
		}),
		"AdminAddGroupMemberFunction": admin(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in api.AddMemberRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			m, created, err := s.AdminAddGroupMember(ctx, r.Path("id"), in.AgentID, in.Role)
			return httpapi.JSON(createdStatus(created), m), err
		}),

		"HeartbeatFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in api.HeartbeatRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			hb, err := s.Heartbeat(ctx, r.Caller.AgentID, in.InstanceID, in.Stats)
			return httpapi.JSON(http.StatusOK, hb), err
		}),
		"GoOfflineFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			status, err := s.GoOffline(ctx, r.Caller.AgentID, r.Query("instance_id"))
			return httpapi.JSON(http.StatusOK, map[string]string{"status": status}), err
		}),
		"GetMeFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			me, err := s.GetMe(ctx, r.Caller.AgentID)
			return httpapi.JSON(http.StatusOK, me), err
		}),
		"GetAgentFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			p, err := s.GetAgent(ctx, r.Caller.AgentID, r.Path("id"))
			return httpapi.JSON(http.StatusOK, p), err
		}),

		"SendFriendRequestFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in api.FriendRequestInput
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			req, created, err := s.SendFriendRequest(ctx, r.Caller.AgentID, in.To)
			return httpapi.JSON(createdStatus(created), req), err
		}),
		"ListFriendRequestsFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			incoming, outgoing := true, true
			switch r.Query("direction") {
			case "", "all":
			case "incoming":
				outgoing = false
			case "outgoing":
				incoming = false
			default:
				return httpapi.Response{}, mesh.Errorf(mesh.KindInvalid, "invalid_parameter", "direction must be incoming, outgoing or all")
			}
			reqs, err := s.ListFriendRequests(ctx, r.Caller.AgentID, incoming, outgoing)
			return httpapi.JSON(http.StatusOK, reqs), err
		}),
		"AcceptFriendRequestFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			req, err := s.AcceptFriendRequest(ctx, r.Caller.AgentID, r.Path("id"))
			return httpapi.JSON(http.StatusOK, req), err
		}),
		"RejectFriendRequestFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			req, err := s.RejectFriendRequest(ctx, r.Caller.AgentID, r.Path("id"))
			return httpapi.JSON(http.StatusOK, req), err
		}),
		"ListFriendsFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			p, err := parsePage(r.Query("after"), r.Query("limit"))
			if err != nil {
				return httpapi.Response{}, err
			}
			page, err := s.ListFriends(ctx, r.Caller.AgentID, p)
			return httpapi.JSON(http.StatusOK, page), err
		}),
		"RemoveFriendFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			return noContent(s.RemoveFriend(ctx, r.Caller.AgentID, r.Path("id")))
		}),
		"BlockAgentFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			return noContent(s.BlockAgent(ctx, r.Caller.AgentID, r.Path("id")))
		}),
		"UnblockAgentFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			return noContent(s.UnblockAgent(ctx, r.Caller.AgentID, r.Path("id")))
		}),
		"ListBlocksFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			p, err := parsePage(r.Query("after"), r.Query("limit"))
			if err != nil {
				return httpapi.Response{}, err
			}
			page, err := s.ListBlocks(ctx, r.Caller.AgentID, p)
			return httpapi.JSON(http.StatusOK, page), err
		}),

		"CreateGroupFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in api.CreateGroupRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			g, err := s.CreateGroup(ctx, r.Caller.AgentID, in.Name)
			return httpapi.JSON(http.StatusCreated, g), err
		}),
		"ListGroupsFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			p, err := parsePage(r.Query("after"), r.Query("limit"))
			if err != nil {
				return httpapi.Response{}, err
			}
			page, err := s.ListGroups(ctx, r.Caller.AgentID, p)
			return httpapi.JSON(http.StatusOK, page), err
		}),
		"GetRosterFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			p, err := parsePage(r.Query("after"), r.Query("limit"))
			if err != nil {
				return httpapi.Response{}, err
			}
			roster, err := s.GetRoster(ctx, r.Caller.AgentID, r.Path("id"), p)
			return httpapi.JSON(http.StatusOK, roster), err
		}),
		"AddGroupMemberFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in api.AddMemberRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			m, created, err := s.AddGroupMember(ctx, r.Caller.AgentID, r.Path("id"), in.AgentID, in.Role)
			return httpapi.JSON(createdStatus(created), m), err
		}),
		"RemoveGroupMemberFunction": agent(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			return noContent(s.RemoveGroupMember(ctx, r.Caller.AgentID, r.Path("id"), r.Path("agent")))
		}),
	}
}

func createdStatus(created bool) int {
	if created {
		return http.StatusCreated
	}
	return http.StatusOK
}

func noContent(err error) (httpapi.Response, error) {
	return httpapi.Response{Status: http.StatusNoContent}, err
}

// decodeOptional decodes an optional JSON body: an empty body keeps v's zero
// value; anything else must be valid, strict JSON.
func decodeOptional(r *httpapi.Request, v any) error {
	for _, c := range r.Body() {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return r.Decode(v)
		}
	}
	return nil
}

// parsePage reads ?after= and ?limit=. after must be an id (the lists are
// ordered by agent or group id, which share one pattern).
func parsePage(after, limit string) (identity.Page, error) {
	p := identity.Page{After: after, Limit: identity.DefaultPageSize}
	if after != "" && !mesh.ValidAgentID(after) {
		return p, mesh.Errorf(mesh.KindInvalid, "invalid_parameter", "after must be an id from next_after")
	}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > identity.MaxPageSize {
			return p, mesh.Errorf(mesh.KindInvalid, "invalid_parameter", "limit must be an integer from 1 to %d", identity.MaxPageSize)
		}
		p.Limit = n
	}
	return p, nil
}
