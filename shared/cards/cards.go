// Package cards provides the A2A cards of agents: an agent (or the account
// that owns it) publishes or withdraws its card and says what it offers
// (description, skills); the A2A gateway (shared/a2agw) serves a published
// card and treats an unpublished one exactly like an agent that does not
// exist. Methods return shared/api's wire types and mesh.Errors; the HTTP
// routes live in the adapter, cardshttp.
package cards

import (
	"context"
	"errors"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// Service implements the card routes on MySQL.
type Service struct {
	DB    *mysql.DB
	Clock mesh.Clock
	// BaseURL is the public base of the A2A routes (config MESH_A2A_URL,
	// e.g. http://127.0.0.1:8080 or the Function URL); CardURL answers
	// BaseURL + "/a2a/agents/{id}/.well-known/agent-card.json". Empty: the
	// answers' card_url is empty.
	BaseURL string
}

// Published is what the gateway needs to serve one published card.
type Published struct {
	AgentID     string
	Name        string // the agent's profile name
	Description string
	Skills      []api.A2ASkill
	// Version changes whenever the card or the agent's name changes; the
	// gateway derives the ETag from it.
	Version   string
	UpdatedAt time.Time
}

// ErrNotPublished is the one answer for an agent that does not exist and
// for one whose card is not published.
var ErrNotPublished = mesh.Errorf(mesh.KindNotFound, "card_not_found", "no published A2A card for this agent")

var errTODO = errors.New("cards: not implemented yet")

// Put publishes, edits or withdraws agentID's own card (the agent's route;
// it spends the agent's rate budget like every agent route).
func (s *Service) Put(ctx context.Context, agentID string, req api.A2ACardRequest) (api.A2ACard, error) {
	return api.A2ACard{}, errTODO
}

// Get returns agentID's card settings, published or not (the owner's view;
// never published: Published false, no skills).
func (s *Service) Get(ctx context.Context, agentID string) (api.A2ACard, error) {
	return api.A2ACard{}, errTODO
}

// PublishedCard returns agentID's card if it is published, else
// ErrNotPublished (also for an agent that does not exist or an invalid id).
func (s *Service) PublishedCard(ctx context.Context, agentID string) (Published, error) {
	return Published{}, errTODO
}
