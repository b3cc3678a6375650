package identity_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// TestIssueOAuthToken covers the client credentials grant: the token it
// issues is an agent token, and every wrong credential is one answer.
func TestIssueOAuthToken(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	ctx := context.Background()
	aliceKey, _ := identitytest.NewAgent(t, s, "alice")
	bobKey, _ := identitytest.NewAgent(t, s, "bob")
	revokedKey, _ := identitytest.NewAgent(t, s, "rita")
	if _, err := s.RevokeKey(ctx, "rita", revokedKey[4:16]); err != nil {
		t.Fatal(err)
	}

	t.Run("the agent id and its API key give a bearer token for the agent", func(t *testing.T) {
		tok, err := s.IssueOAuthToken(ctx, "alice", aliceKey, "198.51.100.1")
		if err != nil || tok.TokenType != "Bearer" || tok.ExpiresIn != int(time.Hour.Seconds()) || tok.AccessToken == "" {
			t.Fatalf("%+v %v", tok, err)
		}
		c, err := s.AuthenticateAgent(ctx, tok.AccessToken)
		if err != nil || c.AgentID != "alice" || c.KeyID != aliceKey[4:16] {
			t.Fatalf("%+v %v", c, err)
		}
	})
	for _, tc := range []struct{ name, id, secret string }{
		{"a wrong secret", "alice", aliceKey[:len(aliceKey)-4] + "AAAA"},
		{"another agent's key", "alice", bobKey},
		{"the key's agent id in another case", "Alice", aliceKey},
		{"a revoked key", "rita", revokedKey},
		{"a malformed secret", "alice", "not-a-key"},
		{"an unknown agent", "nobody", aliceKey},
	} {
		t.Run(tc.name+" is invalid_client", func(t *testing.T) {
			_, err := s.IssueOAuthToken(ctx, tc.id, tc.secret, "")
			if me := mesh.AsError(err); me.Kind != mesh.KindUnauthorized || me.Code != "invalid_client" {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// TestOAuthFailuresAreThrottledLikeTheTokenExchange: past the key's failure
// budget even the right secret is refused, and so is POST /v1/auth/token.
func TestOAuthFailuresAreThrottledLikeTheTokenExchange(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	ctx := context.Background()
	key, _ := identitytest.NewAgent(t, s, "alice")
	wrong := key[:len(key)-4] + "AAAA"
	var err error
	for i := 0; i < 20 && !mesh.IsKind(err, mesh.KindRateLimited); i++ {
		_, err = s.IssueOAuthToken(ctx, "alice", wrong, "")
	}
	t.Run("failures end in 429", func(t *testing.T) {
		if me := mesh.AsError(err); me.Kind != mesh.KindRateLimited || me.RetryAfter < 1 {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("the right secret is refused while the key's budget is spent", func(t *testing.T) {
		if _, err := s.IssueOAuthToken(ctx, "alice", key, ""); !mesh.IsKind(err, mesh.KindRateLimited) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("the token exchange shares the budget", func(t *testing.T) {
		if _, err := s.IssueToken(ctx, key, ""); !mesh.IsKind(err, mesh.KindRateLimited) {
			t.Fatalf("got %v", err)
		}
	})
}
