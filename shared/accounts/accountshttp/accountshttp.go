// Package accountshttp is the HTTP adapter of package accounts: the account
// routes (session cookie and CSRF header, request decoding, status codes)
// and the operator's account and redrive routes, keyed by their functions'
// logical IDs in template.yaml. Each handler decodes its request, calls one
// accounts method and encodes the typed answer; the rules are in accounts.
package accountshttp

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// CookieName is the session cookie.
const CookieName = "mesh_session"

// CSRFHeader carries the session's CSRF token on every write.
const CSRFHeader = "X-CSRF-Token"

// handler is an account route's body, given the caller's session.
type handler func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error)

// Session authenticates r's session cookie through s.Session, with the
// request's CSRF header for every method but GET: the one check every
// account route and console page makes.
func Session(ctx context.Context, s *accounts.Service, r *httpapi.Request) (accounts.Session, error) {
	return s.Session(ctx, SessionToken(r), r.Header(CSRFHeader), r.Event.RequestContext.HTTP.Method != http.MethodGet)
}

// Endpoints returns the account routes and the operator's account and
// redrive routes, keyed by their functions' logical IDs in template.yaml.
func Endpoints(s *accounts.Service) httpapi.Endpoints {
	account := func(h handler) httpapi.Endpoint {
		// Public for the shared middleware: the session cookie is checked here.
		return httpapi.Endpoint{Auth: httpapi.AuthPublic, Handle: func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			sess, err := Session(ctx, s, r)
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
			var in api.CreateAccountRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			a, err := s.CreateAccount(ctx, in)
			return httpapi.JSON(http.StatusCreated, a), err
		}),
		"AdminRedriveFunction": admin(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in api.RedriveRequest
			if err := decodeOptional(r, &in); err != nil {
				return httpapi.Response{}, err
			}
			out, err := s.Redrive(ctx, identity.AdminActor, in.Recipient)
			return httpapi.JSON(http.StatusOK, out), err
		}),
		"AdminDeleteAgentFunction": admin(func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			return httpapi.Response{Status: http.StatusNoContent}, s.AdminDeleteAgent(ctx, r.Path("id"))
		}),
		"AccountDeleteAgentFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			return httpapi.Response{Status: http.StatusNoContent}, s.DeleteAgent(ctx, sess.Account, r.Path("id"))
		}),
		"AccountDeleteFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			var withAgents bool
			switch r.Query("with_agents") {
			case "", "false":
			case "true":
				withAgents = true
			default:
				return httpapi.Response{}, mesh.Errorf(mesh.KindInvalid, "invalid_parameter", "with_agents must be true or false")
			}
			if err := s.DeleteAccount(ctx, sess.Account, withAgents); err != nil {
				return httpapi.Response{}, err
			}
			return httpapi.Response{Status: http.StatusNoContent, Headers: map[string]string{"Set-Cookie": Cookie(r, "", -1)}}, nil
		}),
		"AccountSignInFunction": {Auth: httpapi.AuthPublic, Handle: func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in api.SignInRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			out, token, err := s.SignIn(ctx, in.Email, in.Password, httpapi.SourceAddr(ctx))
			if err != nil {
				return httpapi.Response{}, err
			}
			resp := httpapi.JSON(http.StatusOK, out)
			resp.Headers = map[string]string{"Set-Cookie": Cookie(r, token, s.SessionLifetime())}
			return resp, nil
		}},
		"AccountSignOutFunction": account(func(ctx context.Context, r *httpapi.Request, _ accounts.Session) (httpapi.Response, error) {
			if err := s.SignOut(ctx, SessionToken(r)); err != nil {
				return httpapi.Response{}, err
			}
			return httpapi.Response{Status: http.StatusNoContent, Headers: map[string]string{"Set-Cookie": Cookie(r, "", -1)}}, nil
		}),
		"AccountListAgentsFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			limit, err := parseLimit(r.Query("limit"), accounts.MaxAgentsPage, accounts.MaxAgentsPage)
			if err != nil {
				return httpapi.Response{}, err
			}
			list, next, err := s.ListAgents(ctx, sess.Account, r.Query("after"), limit)
			return httpapi.JSON(http.StatusOK, api.AccountAgentPage{Agents: list, NextAfter: next}), err
		}),
		"AccountCreateAgentFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			var in api.AccountCreateAgentRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			a, err := s.CreateAgent(ctx, sess.Account, in.AgentID, in.Name, in.Kind)
			return httpapi.JSON(http.StatusCreated, a), err
		}),
		"AccountRotateKeyFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			var opt identity.RotateOptions
			if err := decodeOptional(r, &opt); err != nil {
				return httpapi.Response{}, err
			}
			k, err := s.RotateKey(ctx, sess.Account, r.Path("id"), opt)
			return httpapi.JSON(http.StatusCreated, k), err
		}),
		"AccountRevokeKeyFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			k, err := s.RevokeKey(ctx, sess.Account, r.Path("id"), r.Path("key_id"))
			return httpapi.JSON(http.StatusOK, k), err
		}),
		"AccountDrainAgentFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			status, err := s.Drain(ctx, sess.Account, r.Path("id"))
			return httpapi.JSON(http.StatusOK, api.DrainResult{Status: status}), err
		}),
		"AccountSetPolicyFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			var in api.PolicyRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			p, err := s.SetPolicy(ctx, sess.Account, r.Path("id"), in)
			return httpapi.JSON(http.StatusOK, p), err
		}),
		"AccountPutA2aCardFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			var in api.A2ACardRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			c, err := s.PutCard(ctx, sess.Account, r.Path("id"), in)
			return httpapi.JSON(http.StatusOK, c), err
		}),
		"AccountGetA2aCardFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			c, err := s.GetCard(ctx, sess.Account, r.Path("id"))
			return httpapi.JSON(http.StatusOK, c), err
		}),
		"AccountListTasksFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			q := tasks.ListQuery{Status: r.Query("status"), Cursor: r.Query("cursor")}
			var err error
			if q.Limit, err = parseLimit(r.Query("limit"), 20, tasks.MaxListLimit); err != nil {
				return httpapi.Response{}, err
			}
			res, err := s.ListTasks(ctx, sess.Account, r.Path("id"), q)
			return httpapi.JSON(http.StatusOK, res), err
		}),
		"AccountGetTimelineFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			limit, err := parseLimit(r.Query("limit"), 50, tasks.MaxMessagesLimit)
			if err != nil {
				return httpapi.Response{}, err
			}
			t, err := s.GetTimeline(ctx, sess.Account, r.Path("id"), r.Path("task_id"), r.Query("after"), limit)
			return httpapi.JSON(http.StatusOK, t), err
		}),
		"AccountListFriendRequestsFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			limit, err := parseLimit(r.Query("limit"), 50, accounts.MaxRequestsPage)
			if err != nil {
				return httpapi.Response{}, err
			}
			after, err := parseCursor(r.Query("after"))
			if err != nil {
				return httpapi.Response{}, err
			}
			reqs, err := s.ListFriendRequests(ctx, sess.Account, after, limit)
			return httpapi.JSON(http.StatusOK, api.AccountFriendRequests{Requests: reqs}), err
		}),
		"AccountDecideFriendRequestFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			var in api.DecisionRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			req, err := s.DecideFriendRequest(ctx, sess.Account, r.Path("id"), in.Decision)
			return httpapi.JSON(http.StatusOK, req), err
		}),
		"AccountListAuditFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			limit, err := parseLimit(r.Query("limit"), 50, accounts.MaxAuditPage)
			if err != nil {
				return httpapi.Response{}, err
			}
			before, err := parseCursor(r.Query("before"))
			if err != nil {
				return httpapi.Response{}, err
			}
			list, next, err := s.ListAudit(ctx, sess.Account, before, limit)
			return httpapi.JSON(http.StatusOK, api.AuditPage{Entries: list, NextBefore: next}), err
		}),
		"AccountOutboxHealthFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			if err := accounts.RequireOperator(sess.Account); err != nil {
				return httpapi.Response{}, err
			}
			h, err := s.Health(ctx)
			return httpapi.JSON(http.StatusOK, h), err
		}),
		"AccountRedriveFunction": account(func(ctx context.Context, r *httpapi.Request, sess accounts.Session) (httpapi.Response, error) {
			// Checked before the body is read: a non-operator learns nothing
			// from its body's errors.
			if err := accounts.RequireOperator(sess.Account); err != nil {
				return httpapi.Response{}, err
			}
			var in api.RedriveRequest
			if err := decodeOptional(r, &in); err != nil {
				return httpapi.Response{}, err
			}
			out, err := s.Redrive(ctx, accounts.ActorOf(sess.Account), in.Recipient)
			return httpapi.JSON(http.StatusOK, out), err
		}),
	}
}

// parseLimit reads an optional page size from 1 to max.
func parseLimit(v string, def, max int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, mesh.Errorf(mesh.KindInvalid, "invalid_parameter", "limit must be an integer from 1 to %d", max)
	}
	return n, nil
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

// SessionToken is the session cookie's value in an API Gateway request:
// payload 2.0 moves cookies out of the headers into Cookies.
func SessionToken(r *httpapi.Request) string {
	cookies := append([]string{}, r.Event.Cookies...)
	if h := r.Header("Cookie"); h != "" {
		cookies = append(cookies, strings.Split(h, ";")...)
	}
	for _, c := range cookies {
		name, value, ok := strings.Cut(strings.TrimSpace(c), "=")
		if ok && name == CookieName {
			return value
		}
	}
	return ""
}

// Cookie is the Set-Cookie value for token: HttpOnly (no script reads it),
// SameSite=Strict (no cross-site request carries it), Path=/ (the API and
// the console), and Secure unless the request came to localhost over plain
// HTTP (make run). maxAge < 0 deletes the cookie.
func Cookie(r *httpapi.Request, token string, maxAge time.Duration) string {
	c := &http.Cookie{Name: CookieName, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: !isLocalhost(r.Header("Host"))}
	if maxAge < 0 {
		c.MaxAge = -1
	} else {
		c.MaxAge = int(maxAge / time.Second)
	}
	return c.String()
}

func isLocalhost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
