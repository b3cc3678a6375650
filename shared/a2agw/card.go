package a2agw

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// Card serving. A published card is public (the spec and every client
// fetch it without credentials); an unpublished card and an agent that does
// not exist answer the same 404, byte for byte.

// cardMaxAge is how long clients and caches may reuse a card before they
// revalidate it (with If-None-Match, answered 304 from the gateway's card
// cache, or after one primary-key read).
const cardMaxAge = "public, max-age=60"

// Names of the card's security schemes.
const (
	schemeBearer = "bearer"
	schemeOAuth2 = "oauth2"
)

// cardNotFound is the one body of every card 404.
var cardNotFound = []byte(`{"error":{"code":404,"status":"NOT_FOUND","message":"no published A2A card for this agent"}}` + "\n")

// published returns target's published card, or ok false when it has none
// (unpublished, or no such agent).
func (g *Gateway) published(ctx context.Context, target string) (cards.Published, bool, error) {
	if !mesh.ValidAgentID(target) {
		return cards.Published{}, false, nil
	}
	p, err := g.Cards.PublishedCard(ctx, target)
	if mesh.IsKind(err, mesh.KindNotFound) {
		return cards.Published{}, false, nil
	}
	return p, err == nil, err
}

// baseURL is the public URL of target's A2A endpoint.
func (g *Gateway) baseURL(r *http.Request, target string) string {
	base := strings.TrimSuffix(g.BaseURL, "/")
	if base == "" {
		// lambdaurl builds the request URL from the Function URL's domain
		// (set by Lambda); a plain server has only the Host header.
		if r.URL.Host != "" {
			base = r.URL.Scheme + "://" + r.URL.Host
		} else {
			scheme := "http"
			if r.TLS != nil {
				scheme = "https"
			}
			base = scheme + "://" + r.Host
		}
	}
	return base + pathPrefix + target
}

// cardJSON renders p as an A2A 1.0 agent card. a2a-go writes
// securityRequirements in a form that is not the spec's (a2a-go issue #430:
// {"schemes":{"bearer":[]}}); the card carries the spec's instead,
// {"schemes":{"bearer":{"list":[]}}}.
func (g *Gateway) cardJSON(p cards.Published, base string) ([]byte, error) {
	skills := make([]a2a.AgentSkill, 0, len(p.Skills))
	for _, s := range p.Skills {
		tags := s.Tags
		if tags == nil {
			tags = []string{}
		}
		skills = append(skills, a2a.AgentSkill{ID: s.ID, Name: s.Name, Description: s.Description, Tags: tags})
	}
	desc := p.Description
	if desc == "" {
		desc = "A mesh agent (Agent Mesh)."
	}
	modes := []string{"text/plain", "application/json", "application/octet-stream"}
	schemes := a2a.NamedSecuritySchemes{
		schemeBearer: a2a.HTTPAuthSecurityScheme{Scheme: "Bearer", BearerFormat: "JWT",
			Description: "A mesh agent token (POST /v1/auth/token or the OAuth token endpoint)."},
	}
	reqs := []string{schemeBearer}
	if g.TokenURL != "" {
		schemes[schemeOAuth2] = a2a.OAuth2SecurityScheme{
			Description: "OAuth 2.0 client credentials: client_id = agent id, client_secret = API key.",
			Flows:       a2a.ClientCredentialsOAuthFlow{TokenURL: g.TokenURL, Scopes: map[string]string{}},
		}
		reqs = append(reqs, schemeOAuth2)
	}
	card := a2a.AgentCard{
		Name: p.Name, Description: desc, Version: p.Version,
		SupportedInterfaces: []*a2a.AgentInterface{
			{URL: base, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version},
			{URL: base + restPrefix, ProtocolBinding: a2a.TransportProtocolHTTPJSON, ProtocolVersion: a2a.Version},
		},
		Capabilities:       a2a.AgentCapabilities{Streaming: true, PushNotifications: false},
		DefaultInputModes:  modes,
		DefaultOutputModes: modes,
		SecuritySchemes:    schemes,
		Skills:             skills,
	}
	b, err := json.Marshal(card)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	type scopes struct {
		List []string `json:"list"`
	}
	type requirement struct {
		Schemes map[string]scopes `json:"schemes"`
	}
	spec := make([]requirement, 0, len(reqs))
	for _, name := range reqs {
		spec = append(spec, requirement{Schemes: map[string]scopes{name: {List: []string{}}}})
	}
	if fields["securityRequirements"], err = json.Marshal(spec); err != nil {
		return nil, err
	}
	// capabilities.pushNotifications is omitted when false by a2a-go: say
	// it, so no client has to guess.
	fields["capabilities"] = json.RawMessage(`{"streaming":true,"pushNotifications":false}`)
	return json.Marshal(fields)
}

// serveCard answers GET {base}/.well-known/agent-card.json.
func (g *Gateway) serveCard(w http.ResponseWriter, r *http.Request, target string) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodOptions:
		h.Set("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "If-None-Match, A2A-Version")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return
	default:
		h.Set("Allow", "GET, HEAD, OPTIONS")
		writeREST(w, edgeError{status: http.StatusMethodNotAllowed, kind: a2a.ErrMethodNotFound, msg: "the card is read with GET"})
		return
	}
	read := g.published
	if g.cards != nil && mesh.ValidAgentID(target) { // an invalid id costs no read: not cached
		read = g.cards.get
	}
	p, ok, err := read(r.Context(), target)
	if err != nil {
		writeREST(w, fromMesh(r.Context(), g.log(), err))
		return
	}
	if !ok {
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write(cardNotFound)
		return
	}
	body, err := g.cardJSON(p, g.baseURL(r, target))
	if err != nil {
		writeREST(w, fromMesh(r.Context(), g.log(), err))
		return
	}
	// A strong validator of the exact bytes: it changes with the card's
	// version, the agent's name and anything the gateway itself writes.
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	h.Set("ETag", etag)
	h.Set("Cache-Control", cardMaxAge)
	h.Set("Vary", "Accept-Encoding")
	if matches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// matches reports whether an If-None-Match header names etag (the weak
// comparison RFC 9110 prescribes for it) or is "*".
func matches(header, etag string) bool {
	for _, v := range strings.Split(header, ",") {
		v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
		if v == "*" || v == etag {
			return true
		}
	}
	return false
}
