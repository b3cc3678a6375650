package identity_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// TestTheTokenAnnouncesThePushURL: meshd learns the push channel's URL from
// the token response, and a mesh without one announces nothing.
func TestTheTokenAnnouncesThePushURL(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	ctx := context.Background()
	_, key, err := s.CreateAgent(ctx, "pushy", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, url string }{
		{"a mesh with a push channel announces its URL", "ws://127.0.0.1:8080/push"},
		{"a mesh without one announces nothing", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.PushURL = c.url
			tok, err := s.IssueToken(ctx, key, "")
			if err != nil {
				t.Fatal(err)
			}
			if tok.PushURL != c.url {
				t.Errorf("push_url = %q, want %q", tok.PushURL, c.url)
			}
		})
	}
}

// keyIDOf is the key id inside an API key.
func keyIDOf(apiKey string) string {
	return apiKey[len(identity.APIKeyPrefix) : len(identity.APIKeyPrefix)+identity.APIKeyIDLen]
}

// TestOnKeysRevokedRunsAfterTheCommit: every revocation tells the hook which
// keys it revoked, once its transaction committed (another connection
// already sees the key revoked), and a revocation that changed nothing does
// not call it.
func TestOnKeysRevokedRunsAfterTheCommit(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	ctx := context.Background()
	key1, _ := identitytest.NewAgent(t, s, "hooked")
	rot, err := s.RotateKey(ctx, "hooked", identity.RotateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var calls [][]string
	s.OnKeysRevoked = func(ctx context.Context, keyIDs []string) {
		for _, id := range keyIDs {
			var revoked sql.NullTime
			// A fresh pooled connection: it sees only committed rows.
			if err := s.DB.QueryRowContext(context.Background(), "SELECT revoked_at FROM api_keys WHERE key_id = ?", id).Scan(&revoked); err != nil || !revoked.Valid {
				t.Errorf("hook ran before key %s was committed revoked (err %v)", id, err)
			}
		}
		calls = append(calls, slices.Clone(keyIDs))
	}
	steps := []struct {
		name string
		run  func() error
		want [][]string
	}{
		{"revoking a key calls the hook with that key", func() error {
			_, err := s.RevokeKey(ctx, "hooked", keyIDOf(key1))
			return err
		}, [][]string{{keyIDOf(key1)}}},
		{"revoking it again calls nothing", func() error {
			_, err := s.RevokeKey(ctx, "hooked", keyIDOf(key1))
			return err
		}, nil},
		{"a rotation that keeps the old keys calls nothing", func() error {
			_, err := s.RotateKey(ctx, "hooked", identity.RotateOptions{})
			return err
		}, nil},
		{"a rotation that revokes the others calls the hook with each of them", func() error {
			_, err := s.RotateKey(ctx, "hooked", identity.RotateOptions{RevokeExisting: true})
			return err
		}, nil}, // checked below: two live keys (rot's and the one above)
	}
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			calls = nil
			if err := st.run(); err != nil {
				t.Fatal(err)
			}
			if i == len(steps)-1 {
				if len(calls) != 1 || len(calls[0]) != 2 || !slices.Contains(calls[0], rot.KeyID) {
					t.Fatalf("hook calls %v, want one call with the 2 live keys including %s", calls, rot.KeyID)
				}
				return
			}
			if !slices.EqualFunc(calls, st.want, slices.Equal) {
				t.Fatalf("hook calls %v, want %v", calls, st.want)
			}
		})
	}
}

// TestFailedHandshakesAreThrottledPerAddress: the push handshake verifies
// tokens on a public route, so guessing is throttled like API keys are: once
// an address spent its failure budget, even a good token is refused with
// 429 from it, while other addresses are unaffected.
func TestFailedHandshakesAreThrottledPerAddress(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	ctx := context.Background()
	_, tok := identitytest.NewAgent(t, s, "guessed")
	var last error
	for i := 0; i < 100; i++ {
		_, last = s.AuthenticateAgentFrom(ctx, "not-a-token-"+strings.Repeat("x", i), "203.0.113.9")
		if mesh.AsError(last).Kind == mesh.KindRateLimited {
			break
		}
	}
	cases := []struct {
		name, addr string
		want       mesh.Kind
	}{
		{"the flooding address is refused even with a good token", "203.0.113.9", mesh.KindRateLimited},
		{"another address still gets in", "198.51.100.7", -1},
	}
	if mesh.AsError(last).Kind != mesh.KindRateLimited {
		t.Fatalf("100 failed handshakes from one address never throttled: %v", last)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			caller, err := s.AuthenticateAgentFrom(ctx, tok, c.addr)
			switch {
			case c.want < 0 && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want < 0 && caller.AgentID != "guessed":
				t.Fatalf("caller %+v", caller)
			case c.want >= 0 && mesh.AsError(err).Kind != c.want:
				t.Fatalf("err %v, want kind %v", err, c.want)
			}
		})
	}
}
