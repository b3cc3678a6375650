package accounts

import (
	"context"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/cards"
)

// cards is s.Cards, or without one the card service on s's database and
// clock (no BaseURL: card URLs are empty).
func (s *Service) cards() *cards.Service {
	if s.Cards != nil {
		return s.Cards
	}
	return &cards.Service{DB: s.DB, Clock: s.Clock}
}

// PutCard publishes, edits or withdraws the A2A card of one of acc's
// agents, through the agent's own cards.Service.Put (so it spends the
// agent's rate budget, as the agent's route does). An agent of another
// account answers exactly like one that does not exist.
func (s *Service) PutCard(ctx context.Context, acc Account, agentID string, req api.A2ACardRequest) (api.A2ACard, error) {
	if err := s.ownAgent(ctx, acc, agentID); err != nil {
		return api.A2ACard{}, err
	}
	return s.cards().Put(ctx, agentID, req)
}

// GetCard returns the A2A card settings of one of acc's agents, published
// or not. It spends no budget of the agent: the session spent the
// account's.
func (s *Service) GetCard(ctx context.Context, acc Account, agentID string) (api.A2ACard, error) {
	if err := s.ownAgent(ctx, acc, agentID); err != nil {
		return api.A2ACard{}, err
	}
	return s.cards().Read(ctx, agentID)
}

// CardsOf returns the A2A card settings of agents, a page of acc's own
// (ListAgents' answer), by agent id: one query for the page.
func (s *Service) CardsOf(ctx context.Context, acc Account, agents []AgentView) (map[string]api.A2ACard, error) {
	ids := make([]string, len(agents))
	for i, a := range agents {
		ids[i] = a.AgentID
	}
	return s.cards().ReadMany(ctx, ids)
}
