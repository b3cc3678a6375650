// Package cardshttp is cards' adapter to AWS: the HTTP routes of the A2A
// card settings, keyed by their functions' logical ids in template.yaml.
package cardshttp

import (
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/httpapi"
)

// Endpoints returns the agent's own card routes, keyed by the logical ID of
// their functions in template.yaml. (The account's routes live with the
// other account routes, in accountshttp.)
func Endpoints(s *cards.Service) httpapi.Endpoints {
	return httpapi.Endpoints{}
}
