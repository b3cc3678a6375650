package accounts

import (
	"context"
	"net/http"
	"strconv"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// handler is an account route's body, given the caller's session.
type handler func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error)

// Session authenticates r's session cookie, spends one request of the
// account's budget and, for every method but GET, checks the CSRF token:
// the one check every account route and console page makes.
func (s *Service) Session(ctx context.Context, r *httpapi.Request) (Session, error) {
	sess, err := s.Authenticate(ctx, SessionToken(r))
	if err != nil {
		return Session{}, err
	}
	if err := identity.TakeRate(ctx, s.DB, rateBucket(sess.Account.AccountID), s.now()); err != nil {
		return Session{}, err
	}
	if r.Event.RequestContext.HTTP.Method != http.MethodGet {
		if err := sess.CheckCSRF(r.Header(CSRFHeader)); err != nil {
			return Session{}, err
		}
	}
	return sess, nil
}

// Endpoints returns the account routes and the operator's account and
// redrive routes, keyed by their functions' logical IDs in template.yaml.
func Endpoints(s *Service) httpapi.Endpoints {
	account := func(h handler) httpapi.Endpoint {
		// Public for the shared middleware: the session cookie is checked here.
		return httpapi.Endpoint{Auth: httpapi.AuthPublic, Handle: func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			sess, err := s.Session(ctx, r)
			if err != nil {
				return httpapi.Response{}, err
			}
			return h(ctx, r, sess)
		}}
	}
	admin := func(h func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error)) httpapi.Endpoint {
		return httpapi.Endpoint{Auth: httpapi.AuthAdmin, Handle: h}
	}
	return httpapi.Endpoints{
		"AdminCreateAccountFunction": admin(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in NewAccountInput
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			a, err := s.CreateAccount(ctx, in)
			return httpapi.JSON(http.StatusCreated, a), err
		}),
		"AdminRedriveFunction": admin(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in redriveInput
			if err := decodeOptional(r, &in); err != nil {
				return httpapi.Response{}, err
			}
			out, err := s.Redrive(ctx, identity.AdminActor, in.Recipient)
			return httpapi.JSON(http.StatusOK, out), err
		}),
		"AccountSignInFunction": {Auth: httpapi.AuthPublic, Handle: func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in struct {
				Email    string `json:"email"`
				Password string `json:"password"`
			}
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			out, token, err := s.SignIn(ctx, in.Email, in.Password)
			if err != nil {
				return httpapi.Response{}, err
			}
			resp := httpapi.JSON(http.StatusOK, out)
			resp.Headers = map[string]string{"Set-Cookie": Cookie(r, token, s.ttl())}
			return resp, nil
		}},
		"AccountSignOutFunction": account(func(ctx context.Context, r *httpapi.Request, _ Session) (httpapi.Response, error) {
			if err := s.SignOut(ctx, SessionToken(r)); err != nil {
				return httpapi.Response{}, err
			}
			return httpapi.Response{Status: http.StatusNoContent, Headers: map[string]string{"Set-Cookie": Cookie(r, "", -1)}}, nil
		}),
		"AccountListAgentsFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			limit, err := parseLimit(r.Query("limit"), MaxAgentsPage, MaxAgentsPage)
			if err != nil {
				return httpapi.Response{}, err
			}
			list, next, err := s.ListAgents(ctx, sess.Account, r.Query("after"), limit)
			return httpapi.JSON(http.StatusOK, page("agents", list, next)), err
		}),
		"AccountCreateAgentFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			var in struct {
				AgentID string `json:"agent_id"`
				Name    string `json:"name"`
				Kind    string `json:"kind"`
			}
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			a, err := s.CreateAgent(ctx, sess.Account, in.AgentID, in.Name, in.Kind)
			return httpapi.JSON(http.StatusCreated, createdAgent{a, a.Kind}), err
		}),
		"AccountRotateKeyFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			var opt identity.RotateOptions
			if err := decodeOptional(r, &opt); err != nil {
				return httpapi.Response{}, err
			}
			k, err := s.RotateKey(ctx, sess.Account, r.Path("id"), opt)
			return httpapi.JSON(http.StatusCreated, k), err
		}),
		"AccountRevokeKeyFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			k, err := s.RevokeKey(ctx, sess.Account, r.Path("id"), r.Path("key_id"))
			return httpapi.JSON(http.StatusOK, k), err
		}),
		"AccountDrainAgentFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			status, err := s.Drain(ctx, sess.Account, r.Path("id"))
			return httpapi.JSON(http.StatusOK, map[string]string{"status": status}), err
		}),
		"AccountSetPolicyFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			var in PolicyInput
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			p, err := s.SetPolicy(ctx, sess.Account, r.Path("id"), in)
			return httpapi.JSON(http.StatusOK, p), err
		}),
		"AccountListTasksFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			q := tasks.ListQuery{Status: r.Query("status"), Cursor: r.Query("cursor")}
			var err error
			if q.Limit, err = parseLimit(r.Query("limit"), 20, tasks.MaxListLimit); err != nil {
				return httpapi.Response{}, err
			}
			res, err := s.ListTasks(ctx, sess.Account, r.Path("id"), q)
			return httpapi.JSON(http.StatusOK, res), err
		}),
		"AccountGetTimelineFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			limit, err := parseLimit(r.Query("limit"), 50, tasks.MaxMessagesLimit)
			if err != nil {
				return httpapi.Response{}, err
			}
			t, err := s.GetTimeline(ctx, sess.Account, r.Path("id"), r.Path("task_id"), r.Query("after"), limit)
			return httpapi.JSON(http.StatusOK, t), err
		}),
		"AccountListFriendRequestsFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			limit, err := parseLimit(r.Query("limit"), 50, MaxRequestsPage)
			if err != nil {
				return httpapi.Response{}, err
			}
			after, err := parseCursor(r.Query("after"))
			if err != nil {
				return httpapi.Response{}, err
			}
			reqs, err := s.ListFriendRequests(ctx, sess.Account, after, limit)
			return httpapi.JSON(http.StatusOK, map[string]any{"requests": reqs}), err
		}),
		"AccountDecideFriendRequestFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			var in struct {
				Decision string `json:"decision"`
			}
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			req, err := s.DecideFriendRequest(ctx, sess.Account, r.Path("id"), in.Decision)
			return httpapi.JSON(http.StatusOK, req), err
		}),
		"AccountListAuditFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			limit, err := parseLimit(r.Query("limit"), 50, MaxAuditPage)
			if err != nil {
				return httpapi.Response{}, err
			}
			before, err := parseCursor(r.Query("before"))
			if err != nil {
				return httpapi.Response{}, err
			}
			list, next, err := s.ListAudit(ctx, sess.Account, before, limit)
			out := map[string]any{"entries": list}
			if next != "" {
				out["next_before"] = next
			}
			return httpapi.JSON(http.StatusOK, out), err
		}),
		"AccountOutboxHealthFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			if err := requireOperator(sess.Account); err != nil {
				return httpapi.Response{}, err
			}
			h, err := s.Health(ctx)
			return httpapi.JSON(http.StatusOK, h), err
		}),
		"AccountRedriveFunction": account(func(ctx context.Context, r *httpapi.Request, sess Session) (httpapi.Response, error) {
			if err := requireOperator(sess.Account); err != nil {
				return httpapi.Response{}, err
			}
			var in redriveInput
			if err := decodeOptional(r, &in); err != nil {
				return httpapi.Response{}, err
			}
			out, err := s.Redrive(ctx, identity.Actor{Kind: identity.ActorAccount, ID: sess.Account.AccountID}, in.Recipient)
			return httpapi.JSON(http.StatusOK, out), err
		}),
	}
}

type redriveInput struct {
	// Recipient limits the redrive to one recipient's dead letters.
	Recipient string `json:"recipient"`
}

// createdAgent is a new agent with its kind (identity.NewAgent leaves the
// kind out: the admin route's answer predates kinds).
type createdAgent struct {
	identity.NewAgent
	Kind string `json:"kind"`
}

func page(name string, items any, next string) map[string]any {
	out := map[string]any{name: items}
	if next != "" {
		out["next_after"] = next
	}
	return out
}

// parseCursor reads an optional positive numeric cursor.
func parseCursor(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, mesh.Errorf(mesh.KindInvalid, "invalid_parameter", "the cursor must be a non-negative integer")
	}
	return n, nil
}

// decodeOptional decodes an optional JSON body: empty keeps v's zero value.
func decodeOptional(r *httpapi.Request, v any) error {
	for _, c := range r.Body() {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return r.Decode(v)
		}
	}
	return nil
}
