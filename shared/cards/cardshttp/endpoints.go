// Package cardshttp is cards' adapter to AWS: the HTTP routes of the A2A
// card settings, keyed by their functions' logical ids in template.yaml.
package cardshttp

import (
	"context"
	"net/http"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/httpapi"
)

// Endpoints returns the agent's own card routes, keyed by the logical ID of
// their functions in template.yaml. (The account's routes live with the
// other account routes, in accountshttp.)
func Endpoints(s *cards.Service) httpapi.Endpoints {
	return httpapi.Endpoints{
		"PutA2aCardFunction": {Auth: httpapi.AuthAgent, Handle: func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			var in api.A2ACardRequest
			if err := r.Decode(&in); err != nil {
				return httpapi.Response{}, err
			}
			c, err := s.Put(ctx, r.Caller.AgentID, in)
			return httpapi.JSON(http.StatusOK, c), err
		}},
		"GetA2aCardFunction": {Auth: httpapi.AuthAgent, Handle: func(ctx context.Context, r *httpapi.Request) (httpapi.Response, error) {
			c, err := s.Get(ctx, r.Caller.AgentID)
			return httpapi.JSON(http.StatusOK, c), err
		}},
	}
}
