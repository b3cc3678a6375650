package mysql_test

import (
	"context"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/mysql"
)

// countingCreds are static AWS credentials that count how often a token
// was signed with them.
func countingCreds(n *atomic.Int32) aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		n.Add(1)
		return aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", SessionToken: "session", Source: "test"}, nil
	})
}

func TestTheIAMDSNConnectsAsTheUserOverTLSWithTheCleartextPlugin(t *testing.T) {
	var n atomic.Int32
	a := mysql.IAMAuth{Endpoint: "proxy.example:3306", Region: "eu-west-1", DBName: "mesh", User: "mesh_app", Credentials: countingCreds(&n)}
	dsn, err := a.DSN()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"the connection is TLS, verified against the system roots", cfg.TLSConfig, "true"},
		{"the token is sent with the cleartext plugin RDS Proxy asks IAM clients for", cfg.AllowCleartextPasswords, true},
		{"the user is the application user", cfg.User, "mesh_app"},
		{"the DSN holds no password", cfg.Passwd, ""},
		{"it dials the proxy", cfg.Addr, "proxy.example:3306"},
		{"it uses the schema", cfg.DBName, "mesh"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %v, want %v (DSN %s)", tc.got, tc.want, dsn)
			}
		})
	}
}

func TestAnIncompleteIAMSettingIsAClearError(t *testing.T) {
	var n atomic.Int32
	good := mysql.IAMAuth{Endpoint: "proxy.example:3306", Region: "eu-west-1", DBName: "mesh", User: "mesh_app", Credentials: countingCreds(&n)}
	tests := []struct {
		name   string
		change func(*mysql.IAMAuth)
		want   string
	}{
		{"an endpoint without a port", func(a *mysql.IAMAuth) { a.Endpoint = "proxy.example" }, "host:port"},
		{"no region", func(a *mysql.IAMAuth) { a.Region = "" }, "region"},
		{"no user", func(a *mysql.IAMAuth) { a.User = "" }, "user"},
		{"no credentials", func(a *mysql.IAMAuth) { a.Credentials = nil }, "credentials"},
	}
	for _, tc := range tests {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			a := good
			tc.change(&a)
			if _, err := a.DSN(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DSN() error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestIAMTokensAreForTheUserAndRenewedBeforeTheyExpire(t *testing.T) {
	var signed atomic.Int32
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	a := mysql.IAMAuth{Endpoint: "proxy.example:3306", Region: "eu-west-1", DBName: "mesh", User: "mesh_app",
		Credentials: countingCreds(&signed), Now: func() time.Time { return now }}
	src := a.Source()
	ctx := context.Background()

	user, token, err := src(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the token is an rds-db connect request for the user at the proxy, valid 15 minutes", func(t *testing.T) {
		u, err := url.Parse("https://" + token)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		if user != "mesh_app" || u.Host != "proxy.example:3306" || q.Get("Action") != "connect" || q.Get("DBUser") != "mesh_app" ||
			q.Get("X-Amz-Expires") != "900" || !strings.Contains(q.Get("X-Amz-Credential"), "/eu-west-1/rds-db/") {
			t.Fatalf("user %q, token %s", user, token)
		}
	})
	t.Run("new connections reuse the token for a while", func(t *testing.T) {
		now = now.Add(mysql.TokenReuse - time.Second)
		if _, again, _ := src(ctx, false); again != token || signed.Load() != 1 {
			t.Fatalf("signed %d tokens, want the first one reused", signed.Load())
		}
	})
	t.Run("a token is built again before its 15 minutes are up", func(t *testing.T) {
		if mysql.TokenReuse >= 15*time.Minute {
			t.Fatalf("TokenReuse %v reaches the token's expiry", mysql.TokenReuse)
		}
		now = now.Add(time.Second)
		if _, _, err := src(ctx, false); err != nil || signed.Load() != 2 {
			t.Fatalf("signed %d tokens after %v (err %v), want a new one", signed.Load(), mysql.TokenReuse, err)
		}
	})
	t.Run("a refused token is built again at once", func(t *testing.T) {
		if _, _, err := src(ctx, true); err != nil || signed.Load() != 3 {
			t.Fatalf("signed %d tokens after a refusal (err %v), want a new one", signed.Load(), err)
		}
	})
}
