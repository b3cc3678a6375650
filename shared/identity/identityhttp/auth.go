package identityhttp

import (
	"context"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
)

// Authenticator is the httpapi.Authenticator of every HTTP function: s
// verifies the credentials, with the request's source address for the
// failure budgets.
func Authenticator(s *identity.Service) httpapi.Authenticator { return authenticator{s} }

type authenticator struct{ s *identity.Service }

func (a authenticator) AuthenticateAgent(ctx context.Context, token string) (httpapi.Caller, error) {
	c, err := a.s.AuthenticateAgent(ctx, token)
	if err != nil {
		return httpapi.Caller{}, err
	}
	return httpapi.Caller{AgentID: c.AgentID, KeyID: c.KeyID}, nil
}

// VerifyAgentToken makes the authenticator an httpapi.KeyDeferrer: an
// AuthAgentKeyInTx route checks the key in its own transaction.
func (a authenticator) VerifyAgentToken(_ context.Context, token string) (httpapi.Caller, error) {
	c, err := a.s.VerifyAgentToken(token)
	if err != nil {
		return httpapi.Caller{}, err
	}
	return httpapi.Caller{AgentID: c.AgentID, KeyID: c.KeyID}, nil
}

func (a authenticator) AuthenticateAdmin(ctx context.Context, key string) error {
	return a.s.AuthenticateAdmin(ctx, key, httpapi.SourceAddr(ctx))
}
