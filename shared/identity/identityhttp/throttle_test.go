package identityhttp

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

func TestAuthFailuresAreThrottled(t *testing.T) {
	s, clock, _ := identitytest.NewService(t)
	routes := templateRoutes(t)
	key, _ := identitytest.NewAgent(t, s, "ann")
	from := func(addr string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPRequest {
		ev.RequestContext.HTTP.SourceIP = addr
		return ev
	}
	token := func(addr, apiKey string) events.APIGatewayV2HTTPResponse {
		return invoke(t, s, "AuthTokenFunction", from(addr, apiEvent(routes["AuthTokenFunction"], nil, nil, "", `{"api_key":"`+apiKey+`"}`)))
	}
	admin := func(addr, cred string) events.APIGatewayV2HTTPResponse {
		// Revoking a key that does not exist: a 404 once authenticated,
		// and nothing changes.
		params := map[string]string{"id": "ann", "key_id": "AAAAAAAAAAAA"}
		return invoke(t, s, "AdminRevokeKeyFunction", from(addr, apiEvent(routes["AdminRevokeKeyFunction"], params, nil, bearer(cred), "")))
	}
	// count sends n attempts and counts the answers by status; every 429
	// must say when to come back.
	count := func(t *testing.T, n int, attempt func(i int) events.APIGatewayV2HTTPResponse) map[int]int {
		t.Helper()
		got := map[int]int{}
		for i := range n {
			resp := attempt(i)
			got[resp.StatusCode]++
			if resp.StatusCode == 429 {
				if ra, err := strconv.Atoi(resp.Headers["Retry-After"]); err != nil || ra < 1 {
					t.Fatalf("429 without a usable Retry-After: %v", resp.Headers)
				}
			}
		}
		return got
	}

	t.Run("300 wrong API keys from one address: 401 up to the burst, then 429", func(t *testing.T) {
		got := count(t, 300, func(i int) events.APIGatewayV2HTTPResponse {
			// A different well-formed key each time: only the address is shared.
			k := apiKeyPrefix + strings.Repeat(string(rune('A'+i%26)), apiKeyIDLen) + strings.Repeat("x", 43)
			return token("198.51.100.1", k)
		})
		if got[401] != addrFailuresBurst || got[429] != 300-addrFailuresBurst {
			t.Fatalf("answers %v, want %d × 401 then 429", got, addrFailuresBurst)
		}
	})
	t.Run("another address is not affected", func(t *testing.T) {
		if resp := token("198.51.100.2", key); resp.StatusCode != 200 {
			t.Fatalf("a good key from another address: %d %s", resp.StatusCode, resp.Body)
		}
	})
	t.Run("guessing one key's secret from many addresses is throttled per key id", func(t *testing.T) {
		wrong := key[:len(key)-4] + "zzzz"
		got := count(t, 50, func(i int) events.APIGatewayV2HTTPResponse {
			return token("192.0.2."+strconv.Itoa(i+1), wrong)
		})
		if got[401] != keyFailuresBurst || got[429] != 50-keyFailuresBurst {
			t.Fatalf("answers %v, want %d × 401 then 429", got, keyFailuresBurst)
		}
		// While the key id is throttled even its right secret gets no answer.
		if resp := token("192.0.2.200", key); resp.StatusCode != 429 {
			t.Fatalf("the right key during the throttle: %d", resp.StatusCode)
		}
	})
	t.Run("the budget refills with time", func(t *testing.T) {
		clock.Advance(keyFailuresPer + time.Second)
		if resp := token("192.0.2.201", key); resp.StatusCode != 200 {
			t.Fatalf("after the refill: %d %s", resp.StatusCode, resp.Body)
		}
	})
	t.Run("300 wrong admin keys from one address: 401 up to the burst, then 429", func(t *testing.T) {
		got := count(t, 300, func(i int) events.APIGatewayV2HTTPResponse {
			return admin("198.51.100.3", "not-the-admin-key-"+strconv.Itoa(i))
		})
		if got[401] != addrFailuresBurst || got[429] != 300-addrFailuresBurst {
			t.Fatalf("answers %v, want %d × 401 then 429", got, addrFailuresBurst)
		}
	})
	t.Run("admin routes are limited like an agent's", func(t *testing.T) {
		clock.Advance(time.Minute)
		got := count(t, identity.RateBurst+20, func(int) events.APIGatewayV2HTTPResponse { return admin("198.51.100.4", identitytest.AdminKey) })
		if got[404] != identity.RateBurst || got[429] != 20 {
			t.Fatalf("answers %v, want %d × 404 (authenticated) then 429", got, identity.RateBurst)
		}
	})
	t.Run("the janitor deletes refilled failure buckets and nothing else", func(t *testing.T) {
		buckets := func() int {
			return mysqltest.Count(t, s.DB, "SELECT COUNT(*) FROM rate_limits WHERE agent_id LIKE 'auth%:%'")
		}
		agents := mysqltest.Count(t, s.DB, "SELECT COUNT(*) FROM rate_limits WHERE agent_id NOT LIKE 'auth%:%'")
		// One fresh failure: its bucket has not refilled yet.
		if resp := token("198.51.100.9", "amk_wrong"); resp.StatusCode != 401 {
			t.Fatalf("a wrong key: %d", resp.StatusCode)
		}
		if _, err := identity.ExpireThrottles(context.Background(), s.DB, clock.Now(), 1000); err != nil {
			t.Fatal(err)
		}
		if live := mysqltest.Count(t, s.DB, "SELECT COUNT(*) FROM rate_limits WHERE agent_id = 'authaddr:198.51.100.9'"); live != 1 || buckets() != 1 {
			t.Fatalf("after expiring: fresh bucket %d, buckets %d; want only the fresh one", live, buckets())
		}
		clock.Advance(time.Hour)
		if _, err := identity.ExpireThrottles(context.Background(), s.DB, clock.Now(), 1000); err != nil || buckets() != 0 {
			t.Fatalf("%d buckets left after they refilled (%v)", buckets(), err)
		}
		if n := mysqltest.Count(t, s.DB, "SELECT COUNT(*) FROM rate_limits WHERE agent_id NOT LIKE 'auth%:%'"); n != agents {
			t.Fatalf("agents' rate rows: %d, want %d", n, agents)
		}
	})
}
