package identity

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// OAuthTokenResponse is the answer of POST /v1/oauth/token.
type OAuthTokenResponse = api.OAuthTokenResponse

// errBadClient is the one answer of the OAuth token endpoint for a wrong,
// unknown or revoked secret and for a key of another agent than client_id:
// the adapter answers it as invalid_client.
var errBadClient = mesh.Errorf(mesh.KindUnauthorized, "invalid_client", "client authentication failed")

// IssueOAuthToken is the OAuth 2.0 client credentials grant (RFC 6749
// §4.4) over the mesh's credentials: client_id is the agent id and
// client_secret one of its API keys. It issues the same agent token as
// IssueToken (and spends one request of the agent's budget), under the same
// failure throttles per key id and source address (sourceAddr, "" when
// unknown), without the inbox keys an A2A client has no use for.
func (s *Service) IssueOAuthToken(ctx context.Context, clientID, clientSecret, sourceAddr string) (OAuthTokenResponse, error) {
	keyID, hash, ok := parseAPIKey(clientSecret)
	return guarded(ctx, s, authThrottles(keyID, sourceAddr),
		func() (OAuthTokenResponse, error) { return s.issueOAuthToken(ctx, clientID, keyID, hash, ok) },
		func(err error) bool { return mesh.AsError(err).Code == errBadClient.Code })
}

func (s *Service) issueOAuthToken(ctx context.Context, clientID, keyID string, hash []byte, ok bool) (OAuthTokenResponse, error) {
	if !ok {
		return OAuthTokenResponse{}, errBadClient
	}
	agentID, _, err := s.liveKey(ctx, keyID, hash)
	if errors.Is(err, errBadKey) {
		return OAuthTokenResponse{}, errBadClient
	}
	if err != nil {
		return OAuthTokenResponse{}, err
	}
	// Hashed, so the comparison's time depends on neither id's length.
	a, b := sha256.Sum256([]byte(agentID)), sha256.Sum256([]byte(clientID))
	if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		return OAuthTokenResponse{}, errBadClient
	}
	if err := TakeRate(ctx, s.DB, agentID, s.Now()); err != nil {
		return OAuthTokenResponse{}, err
	}
	tok, err := s.sign(agentID, keyID)
	if err != nil {
		return OAuthTokenResponse{}, err
	}
	return OAuthTokenResponse{AccessToken: tok, TokenType: "Bearer", ExpiresIn: int(s.TokenTTL.Seconds())}, nil
}
