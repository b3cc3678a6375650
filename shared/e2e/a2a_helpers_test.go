package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/agentmesh/agentmesh/shared/a2aconformance"
	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// Bounds of the A2A interop tests: every wait and every call ends.
const (
	a2aWait = 30 * time.Second
	// a2aCallTimeout bounds one client call; a blocking SendMessage waits
	// at most the gateway's 25 s.
	a2aCallTimeout = 40 * time.Second
)

// The cast of the A2A tests: alice calls bob, the published agent whose
// meshd runs the conformance agent; carol is alice's friend with a card
// withdrawn; mallory is a stranger to bob; nobody does not exist.
const (
	caller      = "alice"
	target      = "bob"
	unpublished = "carol"
	stranger    = "mallory"
	nonexistent = "nobody"
)

// a2aMesh is the local stack serving the A2A gateway on its own port, with
// the cast above.
type a2aMesh struct {
	st   *localstacktest.Stack
	keys map[string]string
	logs *testenv.Buffer
	log  *slog.Logger
}

// startA2AMesh starts the stack and the cast; bob's card is published,
// carol's published and then withdrawn. No meshd runs yet.
func startA2AMesh(t *testing.T) *a2aMesh {
	t.Helper()
	logs := &testenv.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	st := localstacktest.Start(t, localstacktest.Options{Log: log})
	if st.A2AURL == "" {
		t.Fatal("the stack announces no A2A URL (localstacktest.Stack.A2AURL)")
	}
	m := &a2aMesh{st: st, logs: logs, log: log}
	m.keys = st.Agents(t, caller, target, unpublished, stranger)
	st.Befriend(t, caller, target)
	st.Befriend(t, caller, unpublished)
	m.publish(t, target, true)
	m.publish(t, unpublished, true)
	m.publish(t, unpublished, false)
	return m
}

// publish publishes or withdraws agent's card through the agent's own route.
func (m *a2aMesh) publish(t *testing.T, agent string, published bool) {
	t.Helper()
	m.st.Call(t, http.MethodPut, "/v1/agents/me/a2a-card", m.token(t, agent), api.A2ACardRequest{
		Published: &published, Description: agent + " answers A2A calls",
		Skills: []api.A2ASkill{{ID: "echo", Name: "Echo", Description: "completes tasks", Tags: []string{"test"}}},
	}, nil)
}

// token is a fresh mesh token of agent.
func (m *a2aMesh) token(t *testing.T, agent string) string {
	t.Helper()
	tok, err := meshclient.New(m.st.URL, m.keys[agent]).Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

// base is agent's A2A base URL, cardURL its card's.
func (m *a2aMesh) base(agent string) string { return m.st.A2AURL + "/a2a/agents/" + agent }

func (m *a2aMesh) cardURL(agent string) string {
	return m.base(agent) + "/.well-known/agent-card.json"
}

// a2aHost is bob's meshd running the conformance agent, counting the
// handler's runs per message id and their order.
type a2aHost struct {
	mu    sync.Mutex
	runs  map[string]int
	order []string // message ids in the order the handler got them
	// ran is closed (and replaced) at each run of the handler: waiters
	// wake on it instead of polling.
	ran   chan struct{}
	ended chan struct{}
	err   error
	stop  func()
}

// startTarget runs bob's meshd (poll mode: no Kafka needed) with the
// conformance agent behind a counter.
func (m *a2aMesh) startTarget(t *testing.T) *a2aHost {
	t.Helper()
	api := meshclient.New(m.st.URL, m.keys[target])
	h := &a2aHost{runs: map[string]int{}, ran: make(chan struct{}), ended: make(chan struct{})}
	agent := a2aconformance.Handler(api)
	cfg := meshd.Config{
		API: api, StateDir: t.TempDir(), Mode: meshd.ModePoll, Log: m.log.With("host", target),
		RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, PollWait: time.Second,
		Handler: meshd.HandlerFunc(func(ctx context.Context, env mesh.Envelope) error {
			if env.Type == "message" {
				h.mu.Lock()
				h.runs[env.MessageID]++
				h.order = append(h.order, env.MessageID)
				close(h.ran)
				h.ran = make(chan struct{})
				h.mu.Unlock()
			}
			return agent.Handle(ctx, env)
		}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		h.err = meshd.Run(ctx, cfg)
		close(h.ended)
	}()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-h.ended:
			case <-time.After(a2aWait):
				t.Errorf("bob's meshd did not stop within %s", a2aWait)
			}
		})
	}
	t.Cleanup(h.stop)
	return h
}

// handled is the message ids the handler got, in order.
func (h *a2aHost) handled() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.order)
}

// waitFor waits until cond, called with h.mu held, holds over the
// handler's runs; it wakes at each run and fails the test after a2aWait.
func (h *a2aHost) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(a2aWait)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		ok, ran := cond(), h.ran
		h.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ran:
		case <-deadline.C:
			t.Fatalf("waited %s for %s; the handler got %d messages", a2aWait, what, len(h.handled()))
		}
	}
}

// barrier sends bob one more message through c and waits until the
// handler has run for it. meshd hands one agent's events to its handler in
// seq order, so by then every event written before the barrier (a late
// duplicate among them) has been handled too: a count read afterwards is
// final, not a snapshot taken before the handler caught up.
func (h *a2aHost) barrier(t *testing.T, c *a2aclient.Client) string {
	t.Helper()
	id := "tck-complete-task-barrier-" + a2a.NewMessageID()
	sendOnce(t, c, textMessage(id, "barrier"))
	h.waitFor(t, "the handler to run for the barrier "+id, func() bool { return h.runs[id] > 0 })
	return id
}

// runsOf counts the handler's runs for messageID.
func (h *a2aHost) runsOf(messageID string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[messageID]
}

// specCardParser reads a card whose securityRequirements are in the
// spec's form, [{"schemes":{"bearer":{"list":[]}}}], which a2a-go v2.3.1
// cannot parse (it expects {"schemes":{"bearer":[]}}, its issue #430). It
// rewrites that one field on the CLIENT side and parses the rest with
// a2a-go's own parser; the card served stays the spec's.
func specCardParser(body []byte) (*a2a.AgentCard, error) {
	var card map[string]json.RawMessage
	if err := json.Unmarshal(body, &card); err != nil {
		return nil, err
	}
	if raw, ok := card["securityRequirements"]; ok {
		var reqs []struct {
			Schemes map[string]struct {
				List []string `json:"list"`
			} `json:"schemes"`
		}
		if err := json.Unmarshal(raw, &reqs); err != nil {
			return nil, fmt.Errorf("securityRequirements is not in the spec's form: %w", err)
		}
		goForm := make([]map[string]map[string][]string, 0, len(reqs))
		for _, r := range reqs {
			schemes := map[string][]string{}
			for name, s := range r.Schemes {
				schemes[name] = append([]string{}, s.List...)
			}
			goForm = append(goForm, map[string]map[string][]string{"schemes": schemes})
		}
		var err error
		if card["securityRequirements"], err = json.Marshal(goForm); err != nil {
			return nil, err
		}
	}
	fixed, err := json.Marshal(card)
	if err != nil {
		return nil, err
	}
	return agentcard.DefaultCardParser(fixed)
}

// resolveCard fetches and parses agent's card as a stock a2a-go client does.
func (m *a2aMesh) resolveCard(t *testing.T, agent string) *a2a.AgentCard {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), a2aCallTimeout)
	defer cancel()
	r := &agentcard.Resolver{Client: &http.Client{Timeout: a2aCallTimeout}, CardParser: specCardParser}
	card, err := r.Resolve(ctx, m.base(agent))
	if err != nil {
		t.Fatalf("resolving %s's card: %v", agent, err)
	}
	return card
}

// tokenURL is the OAuth client credentials token URL the card declares.
func tokenURL(t *testing.T, card *a2a.AgentCard) string {
	t.Helper()
	for _, s := range card.SecuritySchemes {
		if o, ok := s.(a2a.OAuth2SecurityScheme); ok {
			if cc, ok := o.Flows.(a2a.ClientCredentialsOAuthFlow); ok {
				return cc.TokenURL
			}
		}
	}
	t.Fatalf("the card declares no OAuth client credentials flow: %+v", card.SecuritySchemes)
	return ""
}

// oauthHTTPClient is an http.Client that gets and renews its token by
// OAuth 2.0 client credentials (golang.org/x/oauth2), knowing only the
// card's token URL, the client id (the agent id) and the secret (its key).
func oauthHTTPClient(tokenURL, clientID, secret string) *http.Client {
	cfg := clientcredentials.Config{ClientID: clientID, ClientSecret: secret, TokenURL: tokenURL}
	// The token requests get a bounded client; the calls (streams among
	// them) are bounded by their contexts.
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Timeout: a2aCallTimeout})
	return cfg.Client(ctx)
}

// goClient builds the a2a-go client of caller for agent's card over
// binding, its http.Client doing OAuth client credentials with caller's
// key: no mesh-specific code between the card URL and the calls.
func (m *a2aMesh) goClient(t *testing.T, as, agent string, binding a2a.TransportProtocol) *a2aclient.Client {
	t.Helper()
	card := m.resolveCard(t, agent)
	hc := oauthHTTPClient(tokenURL(t, card), as, m.keys[as])
	ctx, cancel := context.WithTimeout(context.Background(), a2aCallTimeout)
	defer cancel()
	c, err := a2aclient.NewFromCard(ctx, card,
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []a2a.TransportProtocol{binding}}),
		a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc))
	if err != nil {
		t.Fatalf("a2a-go client for %s's card over %s: %v", agent, binding, err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

// interfaceURL is the URL agent's card declares for binding (read from an
// unauthenticated card of a published agent: bob's, whose layout every
// agent shares).
func (m *a2aMesh) interfaceURL(t *testing.T, agent string, binding a2a.TransportProtocol) string {
	t.Helper()
	card := m.resolveCard(t, target)
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == binding {
			return strings.Replace(i.URL, "/a2a/agents/"+target, "/a2a/agents/"+agent, 1)
		}
	}
	t.Fatalf("bob's card declares no %s interface: %+v", binding, card.SupportedInterfaces)
	return ""
}

// rawAnswer is one HTTP answer, read whole.
type rawAnswer struct {
	Status int
	Header http.Header
	Body   string
}

// raw sends body with method to url, with the bearer token (unless empty)
// and contentType (unless empty), and reads the whole answer (an SSE
// stream of an error ends at once).
func raw(t *testing.T, method, url, token, contentType string, body []byte) rawAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), a2aCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return rawAnswer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// rowCounts counts what a call could write: tasks, messages, artifacts
// and outbox rows.
func (m *a2aMesh) rowCounts(t *testing.T) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, table := range []string{"tasks", "task_messages", "task_artifacts", "outbox_events"} {
		var n int
		if err := m.st.Env.DB.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		counts[table] = n
	}
	return counts
}

// textMessage is a ROLE_USER message with id and text.
func textMessage(id, text string) *a2a.Message {
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))
	msg.ID = id
	return msg
}

// callCtx bounds one client call.
func callCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), a2aCallTimeout)
	t.Cleanup(cancel)
	return ctx
}
