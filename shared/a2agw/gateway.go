// Package a2agw is the A2A 1.0 gateway: every agent whose card is published
// is a standard A2A server at {base}/a2a/agents/{agent_id}, over JSON-RPC and
// HTTP+JSON with SSE streaming, with the mesh behind it. A2A SendMessage is a
// mesh send (tasks.Service.Send) from the calling agent, GetTask, ListTasks
// and CancelTask read and move the same task the mesh API sees, and waits
// and streams follow the caller's own inbox events of that task. The caller
// authenticates as a mesh agent (bearer token, or OAuth client credentials
// at POST /v1/oauth/token), and the mesh's rule holds: only friends and
// group mates of the target, everything else indistinguishable from "not
// found". The wire protocol is a2a-go's (a2asrv); this package plugs in the
// request handling and guards the edges (auth, limits, versions).
//
// Answers. SendMessage answers the Task, except one case: a blocking call
// (neither returnImmediately nor streaming) whose wait ends with the task
// completed, no artifact, the completing move carrying no note, and the
// agent's latest message a reply that is the task's latest message (so
// after the caller's) answers that reply as a Message (ROLE_AGENT, with
// the taskId and contextId, its messageId the reply's mesh message_id).
// Streams never carry a bare Message: the Task, then status and artifact
// updates (replies inside status updates), until the first update after
// the Task that carries a terminal or input-required state. An error
// known before a stream's first event is answered as the binding's
// non-streaming error (JSON-RPC: a plain error response; HTTP+JSON: its
// status and body).
//
// Costs. The gateway is a public Function URL with no throttle in front,
// so it bounds its own work:
//   - a card GET costs at most one primary-key read per agent per
//     CardCacheTTL (10 s) per instance (cardcache.go); it spends no rate
//     unit (it has no caller);
//   - a call without a valid token costs the token check, throttled per
//     source address (identity);
//   - every authenticated call spends exactly one unit of the caller's
//     rate budget (50/s, burst 100, as on the HTTP API), whatever its
//     answer: refused, malformed and failed calls too (waits.go), so a
//     token holder's calls are bounded by its budget;
//   - at most MaxWaits (8) waiting calls (blocking sends and streams) per
//     calling agent at once, across instances (a2a_waits slots; past it,
//     429 before anything is sent), each bounded by SendWait (25 s) or
//     StreamMax (5 min) and polling the caller's inbox at most about once
//     a second (wait.go): one caller pins at most MaxWaits instances and
//     8 queries/s. All callers together are bounded only by the function's
//     concurrency (template parameter A2AReservedConcurrency).
package a2agw

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// Defaults of the Gateway's bounds.
const (
	// DefaultSendWait bounds a blocking SendMessage: under API Gateway's and
	// clients' usual 30 s.
	DefaultSendWait = 25 * time.Second
	// DefaultStreamMax bounds one SSE stream; the client resumes with
	// SubscribeToTask.
	DefaultStreamMax = 5 * time.Minute
)

// Gateway serves the A2A endpoints of every published agent.
type Gateway struct {
	Tasks    *tasks.Service
	Identity *identity.Service
	Cards    *cards.Service
	// BaseURL is the public base of the A2A routes (MESH_A2A_URL); empty:
	// derived from the request (on AWS, the Function URL's domain, which
	// Lambda sets, not the client's Host header).
	BaseURL string
	// TokenURL is the absolute URL of POST /v1/oauth/token the card declares.
	TokenURL string
	// SendWait and StreamMax bound waits (defaults above).
	SendWait  time.Duration
	StreamMax time.Duration
	// MaxBodyBytes caps a request body (0: httpapi.MaxBodyBytes, which
	// app.New raises to fit the configured message size).
	MaxBodyBytes int
	// MaxWaits caps one calling agent's waiting calls (blocking
	// SendMessage, SendStreamingMessage, SubscribeToTask) at once, across
	// every instance (0: DefaultMaxWaits). See waits.go.
	MaxWaits int
	// CardCacheTTL and CardCacheSize bound the per-instance cache of card
	// answers (0: DefaultCardCacheTTL and DefaultCardCacheSize; a negative
	// TTL turns it off). See cardcache.go.
	CardCacheTTL  time.Duration
	CardCacheSize int
	Log           *slog.Logger

	// cards caches card answers; Handler makes it.
	cards *cardCache

	// afterRateCheck, when set (tests), runs between a write's rate check
	// at the front and the write, which spends the unit.
	afterRateCheck func(caller string)
}

// Handler serves /a2a/agents/{agent_id}/... : the public card at
// /.well-known/agent-card.json, JSON-RPC at the base (with or without a
// trailing slash) and HTTP+JSON under {base}/rest (a2a-go's paths:
// /message:send, /tasks/{id}, ...). See front.go for what every call goes
// through before a2a-go's transports see it.
func (g *Gateway) Handler() http.Handler {
	g.Tasks.WithDefaults() // once, before the handler shares it
	g.cards = newCardCache(g.CardCacheTTL, g.CardCacheSize, g.published)
	return http.HandlerFunc(g.serve)
}

func (g *Gateway) log() *slog.Logger {
	if g.Log == nil {
		return slog.Default()
	}
	return g.Log
}

func (g *Gateway) sendWait() time.Duration {
	if g.SendWait <= 0 {
		return DefaultSendWait
	}
	return g.SendWait
}

func (g *Gateway) streamMax() time.Duration {
	if g.StreamMax <= 0 {
		return DefaultStreamMax
	}
	return g.StreamMax
}

// New returns the gateway of env over the task service ts and the cards cs,
// with its bounds at their defaults.
func New(env *app.Env, ts *tasks.Service, cs *cards.Service) *Gateway {
	tokenURL := ""
	if env.Config.PublicAPIURL != "" {
		tokenURL = env.Config.PublicAPIURL + "/v1/oauth/token"
	}
	return &Gateway{Tasks: ts, Identity: env.Identity, Cards: cs, BaseURL: env.Config.A2AURL,
		TokenURL: tokenURL, SendWait: DefaultSendWait, StreamMax: DefaultStreamMax, MaxWaits: DefaultMaxWaits,
		CardCacheTTL: DefaultCardCacheTTL, CardCacheSize: DefaultCardCacheSize, Log: env.Log}
}
