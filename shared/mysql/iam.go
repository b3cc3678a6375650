package mysql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	rdsauth "github.com/aws/aws-sdk-go-v2/feature/rds/auth"
	"github.com/go-sql-driver/mysql"
)

// TokenReuse is how long one IAM auth token serves new connections. A token
// is valid for 15 minutes (X-Amz-Expires 900) and is checked only when a
// connection opens, so reusing it for 10 leaves 5 minutes of margin for
// clock skew and a slow handshake; an open connection outlives its token.
const TokenReuse = 10 * time.Minute

// IAMAuth connects as a database user that authenticates with IAM auth
// tokens instead of a password: RDS Proxy with IAMAuth REQUIRED for that
// user. The function's role needs rds-db:connect on the proxy for User.
type IAMAuth struct {
	// Endpoint is the proxy's host:port.
	Endpoint string
	// Region is the proxy's region (the token is signed for it).
	Region string
	// DBName is the schema to use.
	DBName string
	// User is the database user the token is for.
	User string
	// Credentials sign the token (the function's role).
	Credentials aws.CredentialsProvider
	// Now is the clock that ages tokens; time.Now when nil.
	Now func() time.Time
}

// DSN is the data source name of an IAM connection: TLS verified against
// the system roots (RDS Proxy requires TLS, and the token travels as a
// cleartext password, which is only safe inside it) and the cleartext
// password plugin the proxy asks IAM clients for. It has no password: the
// Credentials of Source supply a token per new connection.
func (a IAMAuth) DSN() (string, error) {
	if err := a.validate(); err != nil {
		return "", err
	}
	c := mysql.NewConfig()
	c.User = a.User
	c.Net, c.Addr, c.DBName = "tcp", a.Endpoint, a.DBName
	c.TLSConfig = "true"
	c.AllowCleartextPasswords = true

	return c.FormatDSN(), nil
}

func (a IAMAuth) validate() error {
	host, port, err := net.SplitHostPort(a.Endpoint)
	switch {
	case err != nil || host == "" || port == "":
		return fmt.Errorf("mysql: IAM auth needs the proxy's host:port, got %q", a.Endpoint)
	case a.Region == "":
		return errors.New("mysql: IAM auth needs the region the proxy is in")
	case a.User == "":
		return errors.New("mysql: IAM auth needs a database user")
	case a.Credentials == nil:
		return errors.New("mysql: IAM auth needs AWS credentials to sign tokens")
	}
	return nil
}

// Source returns the Credentials of OpenWithCredentials for this user: a
// token built with the SDK's RDS auth helper, reused for TokenReuse and
// built again after that, or at once when the server refused the last one
// (fresh: the role's credentials may have changed).
func (a IAMAuth) Source() Credentials {
	now := a.Now
	if now == nil {
		now = time.Now
	}
	var (
		mu    sync.Mutex
		token string
		built time.Time
	)
	return func(ctx context.Context, fresh bool) (string, string, error) {
		mu.Lock()
		defer mu.Unlock()
		if token != "" && !fresh && now().Sub(built) < TokenReuse {
			return a.User, token, nil
		}
		t, err := rdsauth.BuildAuthToken(ctx, a.Endpoint, a.Region, a.User, a.Credentials)
		if err != nil {
			// The SDK's error names the credentials' failure, never a token.
			return "", "", fmt.Errorf("mysql: IAM auth token for %s: %w", a.User, err)
		}
		token, built = t, now()
		return a.User, token, nil
	}
}
