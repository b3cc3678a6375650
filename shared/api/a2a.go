package api

import "time"

// A2ACardRequest is the body of PUT /v1/agents/me/a2a-card and of
// PUT /v1/account/agents/{id}/a2a-card: whether the agent's A2A card is
// published, and what it says. The card's name is the agent's profile name.
// Published is a pointer so that a body without it is refused (422
// invalid_card) instead of silently withdrawing the card.
type A2ACardRequest struct {
	Published   *bool      `json:"published"`
	Description string     `json:"description"`
	Skills      []A2ASkill `json:"skills"`
}

// A2ASkill is one skill an agent's A2A card lists.
type A2ASkill struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Tags        []string `json:"tags"`
}

// A2ACard is an agent's A2A card settings as its owner sees them (the PUT
// and GET routes answer it). CardURL is where the public card is served
// when published: {a2a base}/a2a/agents/{agent_id}/.well-known/agent-card.json.
type A2ACard struct {
	AgentID     string     `json:"agent_id"`
	Name        string     `json:"name"`
	Published   bool       `json:"published"`
	Description string     `json:"description"`
	Skills      []A2ASkill `json:"skills"`
	CardURL     string     `json:"card_url"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// OAuthTokenResponse is the answer of POST /v1/oauth/token (RFC 6749 §4.4,
// §5.1): the same agent token POST /v1/auth/token issues.
type OAuthTokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
}

// OAuthError is an error of POST /v1/oauth/token (RFC 6749 §5.2).
type OAuthError struct {
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description,omitempty"`
}
