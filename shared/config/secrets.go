package config

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/mysql"
)

// secretSettings are the settings that may come from Secrets Manager: each
// NAME may instead be given as NAME_SECRET_ARN. A function gets only the
// ARNs of the secrets it uses (template.yaml), so it can read nothing else.
var secretSettings = []string{"MESH_ADMIN_KEY", "MESH_JWT_KEYS", "MESH_INBOX_MASTER_KEY"}

// dbSecretRefresh bounds how often a refused password makes the database
// secret be read again: a wrong secret costs one read per interval, not one
// per connection attempt.
const dbSecretRefresh = 5 * time.Second

// LoadAWS is Load plus secrets. MESH_ADMIN_KEY, MESH_JWT_KEYS and
// MESH_INBOX_MASTER_KEY may each be given as <NAME>_SECRET_ARN. The database
// is MESH_DB_HOST + MESH_DB_NAME (MESH_DB_PORT defaults to 3306) and one of:
//   - MESH_DB_USER: IAM authentication at RDS Proxy, what every function
//     but the migration uses on AWS. Each new connection presents an IAM
//     auth token of the function's role (mysql.IAMAuth), over TLS always;
//     no password is read or held.
//   - MESH_DB_SECRET_ARN: an RDS secret (JSON with username and password),
//     the master user's, for the migration only (MESH_DB_TLS defaults to
//     true). The password is not frozen at init: when the server refuses it
//     (the secret was rotated), the next connection reads the secret again
//     (Config.DBCredentials), so running instances follow a rotation.
//
// MESH_DB_APP_SECRET_ARN (the migration only) is the application user's
// secret, whose user the migration creates (Config.AppDBUser). MYSQL_DSN,
// when set (local runs), wins over all of these. All the secrets named are
// read in one BatchGetSecretValue call; without any *_SECRET_ARN it makes no
// Secrets Manager call.
func LoadAWS(ctx context.Context, getenv Getenv) (Config, error) {
	byName := map[string]string{} // setting -> ARN, for the ones to fetch
	for _, name := range secretSettings {
		if arn := getenv(name + "_SECRET_ARN"); arn != "" && getenv(name) == "" {
			byName[name] = arn
		}
	}
	dbArn := ""
	if arn := getenv("MESH_DB_SECRET_ARN"); arn != "" && getenv("MYSQL_DSN") == "" {
		dbArn = arn
		byName["MESH_DB"] = arn
	}
	if arn := getenv("MESH_DB_APP_SECRET_ARN"); arn != "" {
		byName["MESH_DB_APP"] = arn
	}
	// The secret, when both are given, because only the migration is given
	// one, and it must connect as the master to create the application user.
	iamUser := ""
	if getenv("MYSQL_DSN") == "" && dbArn == "" {
		iamUser = getenv("MESH_DB_USER")
	}
	if len(byName) == 0 && iamUser == "" {
		return Load(getenv)
	}
	ac, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return Config{}, fmt.Errorf("config: AWS SDK: %w", err)
	}
	sm := secretsmanager.NewFromConfig(ac)
	got := map[string]string{}
	if len(byName) > 0 {
		if got, err = batchGet(ctx, sm, byName); err != nil {
			return Config{}, err
		}
	}
	vals := map[string]string{}
	for _, name := range secretSettings {
		if arn, ok := byName[name]; ok {
			if vals[name], err = generatedForm(name, got[arn]); err != nil {
				return Config{}, err
			}
		}
	}
	var creds *dbCredentials
	if dbArn != "" {
		creds = &dbCredentials{sm: sm, arn: dbArn}
		user, pass, err := parseDBSecret(got[dbArn])
		if err != nil {
			return Config{}, err
		}
		creds.user, creds.pass = user, pass
		dc := gomysql.NewConfig()
		dc.User, dc.Passwd = user, pass
		port := or(getenv("MESH_DB_PORT"), "3306")
		if _, err := strconv.Atoi(port); err != nil {
			return Config{}, fmt.Errorf("config: MESH_DB_PORT must be a port number, got %q", port)
		}
		dc.Net, dc.Addr, dc.DBName = "tcp", getenv("MESH_DB_HOST")+":"+port, getenv("MESH_DB_NAME")
		// RDS Proxy requires TLS and presents an ACM certificate the system
		// roots trust. Only a local test database turns it off.
		dc.TLSConfig = "true"
		if getenv("MESH_DB_TLS") == "false" {
			dc.TLSConfig = ""
		}
		vals["MYSQL_DSN"] = dc.FormatDSN()
	}
	var tokens mysql.Credentials
	if iamUser != "" {
		if getenv("MESH_DB_TLS") == "false" {
			return Config{}, fmt.Errorf("config: MESH_DB_USER connects with IAM tokens, which travel as cleartext passwords: MESH_DB_TLS cannot be false")
		}
		iam := mysql.IAMAuth{
			Endpoint:    net.JoinHostPort(getenv("MESH_DB_HOST"), or(getenv("MESH_DB_PORT"), "3306")),
			Region:      ac.Region,
			DBName:      getenv("MESH_DB_NAME"),
			User:        iamUser,
			Credentials: ac.Credentials,
		}
		if vals["MYSQL_DSN"], err = iam.DSN(); err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		tokens = iam.Source()
	}
	var appUser, appPass string
	if arn, ok := byName["MESH_DB_APP"]; ok {
		if appUser, appPass, err = parseDBSecret(got[arn]); err != nil {
			return Config{}, err
		}
	}
	cfg, err := Load(func(k string) string {
		if v, ok := vals[k]; ok {
			return v
		}
		return getenv(k)
	})
	switch {
	case creds != nil:
		cfg.DBCredentials = creds.get
	case tokens != nil:
		cfg.DBCredentials = tokens
	}
	cfg.AppDBUser, cfg.AppDBPassword = appUser, appPass
	return cfg, err
}

// batchGet reads every secret of byName in one round trip and returns the
// values by ARN. A secret that cannot be read is an error naming it.
func batchGet(ctx context.Context, sm *secretsmanager.Client, byName map[string]string) (map[string]string, error) {
	var ids []string
	seen := map[string]bool{}
	for _, arn := range byName {
		if !seen[arn] {
			seen[arn] = true
			ids = append(ids, arn)
		}
	}
	// A handful of ids: one page (the API returns up to 20 per call).
	out, err := sm.BatchGetSecretValue(ctx, &secretsmanager.BatchGetSecretValueInput{SecretIdList: ids})
	if err != nil {
		return nil, fmt.Errorf("config: read secrets %v: %w", ids, err)
	}
	for _, e := range out.Errors {
		return nil, fmt.Errorf("config: read secret %s: %s: %s", aws.ToString(e.SecretId), aws.ToString(e.ErrorCode), aws.ToString(e.Message))
	}
	got := map[string]string{}
	for _, v := range out.SecretValues {
		// The answer names a secret by its full ARN and its name; the
		// request may have used either (or a partial ARN).
		got[aws.ToString(v.ARN)] = aws.ToString(v.SecretString)
		got[aws.ToString(v.Name)] = aws.ToString(v.SecretString)
	}
	for _, id := range ids {
		if _, ok := got[id]; !ok {
			return nil, fmt.Errorf("config: secret %s was not returned", id)
		}
	}
	return got, nil
}

func parseDBSecret(raw string) (user, pass string, err error) {
	var sec struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := json.Unmarshal([]byte(raw), &sec); err != nil || sec.Username == "" {
		return "", "", fmt.Errorf("config: DB secret is not {username, password} JSON")
	}
	return sec.Username, sec.Password, nil
}

// dbCredentials holds the database user and password read at init and reads
// the secret again when asked for fresh ones (at most every dbSecretRefresh).
type dbCredentials struct {
	sm  *secretsmanager.Client
	arn string

	mu         sync.Mutex
	user, pass string
	// reread is when the secret was last read again after a refusal (the
	// read at init does not count: a rotation may follow it at once).
	reread time.Time
}

func (c *dbCredentials) get(ctx context.Context, fresh bool) (string, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !fresh || time.Since(c.reread) < dbSecretRefresh {
		return c.user, c.pass, nil
	}
	c.reread = time.Now()
	out, err := c.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(c.arn)})
	if err != nil {
		return "", "", fmt.Errorf("config: read secret %s: %w", c.arn, err)
	}
	user, pass, err := parseDBSecret(aws.ToString(out.SecretString))
	if err != nil {
		return "", "", err
	}
	c.user, c.pass = user, pass
	return user, pass, nil
}

// minGenerated is the least length of a generated secret's random part.
const minGenerated = 32

// generatedForm turns the JSON forms CloudFormation can generate
// (infra/aws/platform.yaml: GenerateSecretString with a template) into the
// settings' own formats; any other value is returned as it is.
//   - MESH_JWT_KEYS: {"kid":"k1","secret":"<random>"} is the one key k1 with
//     the secret's bytes.
//   - MESH_INBOX_MASTER_KEY: {"secret":"<random>"} is the SHA-256 of the
//     secret (32 bytes).
func generatedForm(name, v string) (string, error) {
	if !strings.HasPrefix(strings.TrimSpace(v), "{") {
		return v, nil
	}
	var g struct {
		Kid    string `json:"kid"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(v), &g); err != nil || len(g.Secret) < minGenerated {
		return "", fmt.Errorf("config: %s: a JSON secret must hold a \"secret\" of at least %d characters", name, minGenerated)
	}
	switch name {
	case "MESH_JWT_KEYS":
		if g.Kid == "" {
			return "", fmt.Errorf("config: %s: a JSON secret must name its \"kid\"", name)
		}
		return g.Kid + ":" + base64.StdEncoding.EncodeToString([]byte(g.Secret)), nil
	case "MESH_INBOX_MASTER_KEY":
		sum := sha256.Sum256([]byte(g.Secret))
		return base64.StdEncoding.EncodeToString(sum[:]), nil
	}
	return "", fmt.Errorf("config: %s has no JSON form", name)
}
