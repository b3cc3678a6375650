// Package console provides the web console: server-rendered pages over the
// account routes' own service calls, served by one function at /console.
// Every page authenticates the session exactly as the account routes do
// (accountshttp.Session) and reads through the same account-scoped
// methods, so the console can never show more than the API would. Writes
// are made by the page's script against the JSON account API, with the
// session's CSRF token; the pages themselves only read (GET).
package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/accounts/accountshttp"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

//go:embed assets
var assets embed.FS

// Bounds of what one page shows.
const (
	agentsShown      = accounts.MaxAgentsPage
	requestsShown    = accounts.MaxRequestsPage
	friendshipsShown = 500
	rosterRowsShown  = 500
	auditShown       = 100
	tasksShown       = 20
	messagesShown    = 50
)

// Console serves the pages.
type Console struct {
	Accounts *accounts.Service
	Log      *slog.Logger
	pages    *template.Template
}

// New parses the embedded templates.
func New(s *accounts.Service, log *slog.Logger) *Console {
	funcs := template.FuncMap{
		"ago":   ago,
		"parts": partsText,
		"pct":   func(n, max int64) int64 { return n * 100 / maxInt(max, 1) },
		"mode":  deliveryMode,
		"lost":  lostEvents,
		"json":  jsonText,
	}
	t := template.Must(template.New("").Funcs(funcs).ParseFS(assets, "assets/*.html"))
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Console{Accounts: s, Log: log, pages: t}
}

// jsonText is v as compact JSON, for a form field to edit (html/template
// escapes it for its context).
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// deliveryMode is the delivery mode (push, kafka, poll, mcp) a heartbeat's
// stats report, or "" when they report none. Stats are the agent's own
// free-form words: only a short plain word is shown.
func deliveryMode(stats json.RawMessage) string {
	var st struct {
		Mode string `json:"mode"`
	}
	if json.Unmarshal(stats, &st) != nil || len(st.Mode) > 16 {
		return ""
	}
	for _, c := range st.Mode {
		if c < 'a' || c > 'z' {
			return ""
		}
	}
	return st.Mode
}

// lostReport is the loss a heartbeat's stats report: meshd's "lost"
// (events that expired from the mesh's retention before it handled them).
type lostReport struct {
	Events  int64 `json:"events"`
	FromSeq int64 `json:"from_seq"`
	ToSeq   int64 `json:"to_seq"`
	Total   int64 `json:"total"`
}

// lostEvents is the latest loss the stats report, or nil when none (or
// when the numbers do not add up: stats are the agent's own words).
func lostEvents(stats json.RawMessage) *lostReport {
	var st struct {
		Lost *lostReport `json:"lost"`
	}
	if json.Unmarshal(stats, &st) != nil || st.Lost == nil {
		return nil
	}
	l := st.Lost
	if l.Events <= 0 || l.FromSeq <= 0 || l.ToSeq-l.FromSeq+1 != l.Events || l.Total < l.Events {
		return nil
	}
	return l
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// page is what every template gets.
type page struct {
	Title    string
	Nav      string
	Account  accounts.Account
	CSRF     string
	Data     any
	Error    string
	Refresh  bool
	Rendered time.Time
}

// Handler is the console function's Lambda handler.
func (c *Console) Handler() httpapi.LambdaHandler {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, _ error) {
		start := time.Now()
		defer func() {
			if p := recover(); p != nil {
				c.Log.Error("console page panicked", "path", ev.RawPath, "panic", fmt.Sprint(p))
				resp = text(http.StatusInternalServerError, "internal error")
			}
			c.Log.Info("request", "route", ev.RouteKey, "path", ev.RawPath, "status", resp.StatusCode, "took", time.Since(start))
		}()
		return c.serve(ctx, ev), nil
	}
}

func (c *Console) serve(ctx context.Context, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	rest := strings.Trim(ev.PathParameters["proxy"], "/")
	if rest == "" && ev.RawPath != "/console" && ev.RawPath != "/console/" {
		rest = strings.Trim(strings.TrimPrefix(ev.RawPath, "/console"), "/")
	}
	if strings.HasPrefix(rest, "assets/") {
		return asset(assets, rest)
	}
	if rest == "signin" {
		return c.render(http.StatusOK, "signin.html", page{Title: "Sign in", Nav: "signin"})
	}
	sess, err := accountshttp.Session(ctx, c.Accounts, &httpapi.Request{Event: ev})
	if err != nil {
		if mesh.AsError(err).Kind == mesh.KindUnauthorized {
			return redirect("/console/signin")
		}
		return c.fail(err)
	}
	p := page{Account: sess.Account, CSRF: sess.CSRF, Refresh: true, Rendered: time.Now().UTC()}
	acc := sess.Account
	seg := strings.Split(rest, "/")
	q := func(name string) string { return ev.QueryStringParameters[name] }
	switch {
	case rest == "" || rest == "agents":
		p.Title, p.Nav = "My agents", "agents"
		list, _, err := c.Accounts.ListAgents(ctx, acc, "", agentsShown)
		if err != nil {
			return c.fail(err)
		}
		cards, err := c.Accounts.CardsOf(ctx, acc, list)
		if err != nil {
			return c.fail(err)
		}
		p.Data = map[string]any{"Agents": list, "Cards": cards}
		return c.render(http.StatusOK, "agents.html", p)
	case rest == "requests":
		p.Title, p.Nav = "Friend requests", "requests"
		list, err := c.Accounts.ListFriendRequests(ctx, acc, 0, requestsShown)
		if err != nil {
			return c.fail(err)
		}
		p.Data = list
		return c.render(http.StatusOK, "requests.html", p)
	case rest == "friends":
		p.Title, p.Nav = "Friendships", "friends"
		list, err := c.Accounts.ListFriendships(ctx, acc, friendshipsShown)
		if err != nil {
			return c.fail(err)
		}
		p.Data = list
		return c.render(http.StatusOK, "friends.html", p)
	case rest == "groups":
		p.Title, p.Nav = "Groups", "groups"
		list, err := c.Accounts.ListGroupRosters(ctx, acc, rosterRowsShown)
		if err != nil {
			return c.fail(err)
		}
		p.Data = list
		return c.render(http.StatusOK, "groups.html", p)
	case rest == "audit":
		p.Title, p.Nav = "Audit log", "audit"
		before, err := strconv.ParseInt("0"+q("before"), 10, 64)
		if err != nil {
			return c.fail(mesh.Errorf(mesh.KindInvalid, "invalid_parameter", "before must be an entry id"))
		}
		list, next, err := c.Accounts.ListAudit(ctx, acc, before, auditShown)
		if err != nil {
			return c.fail(err)
		}
		p.Data = map[string]any{"Entries": list, "Next": next}
		return c.render(http.StatusOK, "audit.html", p)
	case rest == "outbox":
		p.Title, p.Nav = "Outbox health", "outbox"
		if !acc.Operator {
			return c.fail(mesh.Errorf(mesh.KindForbidden, "operator_only", "only operator accounts see the outbox"))
		}
		h, err := c.Accounts.Health(ctx)
		if err != nil {
			return c.fail(err)
		}
		var most int64
		for _, b := range h.Backlog {
			most = maxInt(most, b.Pending)
		}
		p.Data = map[string]any{"Health": h, "Most": most}
		return c.render(http.StatusOK, "outbox.html", p)
	case len(seg) == 3 && seg[0] == "agents" && seg[2] == "tasks":
		p.Title, p.Nav = "Tasks of "+seg[1], "agents"
		res, err := c.Accounts.ListTasks(ctx, acc, seg[1], tasks.ListQuery{Limit: tasksShown, Cursor: q("cursor")})
		if err != nil {
			return c.fail(err)
		}
		p.Data = map[string]any{"Agent": seg[1], "Tasks": res.Tasks, "Next": res.NextCursor}
		return c.render(http.StatusOK, "tasks.html", p)
	case len(seg) == 4 && seg[0] == "agents" && seg[2] == "tasks":
		p.Title, p.Nav = "Task timeline", "agents"
		t, err := c.Accounts.GetTimeline(ctx, acc, seg[1], seg[3], q("after"), messagesShown)
		if err != nil {
			return c.fail(err)
		}
		p.Data = map[string]any{"Agent": seg[1], "T": t, "After": q("after")}
		return c.render(http.StatusOK, "timeline.html", p)
	}
	return c.fail(mesh.Errorf(mesh.KindNotFound, "page_not_found", "no console page here"))
}

// fail renders an error page with the status the API would answer.
func (c *Console) fail(err error) events.APIGatewayV2HTTPResponse {
	me := mesh.AsError(err)
	status := httpapi.StatusOf(me.Kind)
	msg := me.Message
	if status >= 500 {
		c.Log.Error("console page failed", "err", err)
		msg = "something went wrong; try again"
	}
	return c.render(status, "error.html", page{Title: http.StatusText(status), Error: msg})
}

func (c *Console) render(status int, name string, p page) events.APIGatewayV2HTTPResponse {
	var b bytes.Buffer
	if err := c.pages.ExecuteTemplate(&b, name, p); err != nil {
		c.Log.Error("console template failed", "page", name, "err", err)
		return text(http.StatusInternalServerError, "internal error")
	}
	// The data behind a page is bounded like the API's answers; this is
	// the last line before API Gateway's bare 502.
	if b.Len() > httpapi.MaxResponseBytes {
		c.Log.Error("console page too large", "page", name, "bytes", b.Len())
		return text(http.StatusInternalServerError, "this page is too large to show; open a later page")
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Body: b.String(), Headers: map[string]string{
		"Content-Type":  "text/html; charset=utf-8",
		"Cache-Control": "no-store",
		// The pages load only their own script and style; nothing may frame them.
		"Content-Security-Policy": "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
	}}
}

func text(status int, msg string) events.APIGatewayV2HTTPResponse {
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Body: msg, Headers: map[string]string{"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store"}}
}

func redirect(to string) events.APIGatewayV2HTTPResponse {
	return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusSeeOther, Headers: map[string]string{"Location": to, "Cache-Control": "no-store"}}
}

// asset serves a script or style sheet of fsys's assets/ directory (the
// embedded one; tests pass a tree with files beside it, which the embedded
// FS lacks, to see that no path reaches them).
func asset(fsys fs.FS, name string) events.APIGatewayV2HTTPResponse {
	clean := path.Clean(name)
	b, err := fs.ReadFile(fsys, clean)
	if err != nil || !strings.HasPrefix(clean, "assets/") || strings.HasSuffix(clean, ".html") {
		return text(http.StatusNotFound, "not found")
	}
	ct := mime.TypeByExtension(path.Ext(clean))
	if ct == "" {
		ct = "application/octet-stream"
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusOK, Body: string(b), Headers: map[string]string{"Content-Type": ct, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}}
}

// ago renders a time as an age ("12s ago"), or "never".
func ago(t any) string {
	var tt time.Time
	switch v := t.(type) {
	case time.Time:
		tt = v
	case *time.Time:
		if v == nil {
			return "never"
		}
		tt = *v
	default:
		return ""
	}
	d := time.Since(tt).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String() + " ago"
}

// partsText renders a message's parts as text: text parts as they are,
// data parts as JSON, file parts by name.
func partsText(parts []mesh.Part) string {
	var out []string
	for _, p := range parts {
		switch p.Kind {
		case "text":
			out = append(out, p.Text)
		case "data":
			out = append(out, "[data] "+string(p.Data))
		default:
			// A file's bytes can be large: name it only.
			out = append(out, fmt.Sprintf("[%s %s %s]", p.Kind, p.Name, p.MediaType))
		}
	}
	return strings.Join(out, "\n")
}
