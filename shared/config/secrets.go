package config

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	gomysql "github.com/go-sql-driver/mysql"
)

// LoadAWS is Load plus secrets: each of MESH_ADMIN_KEY, MESH_JWT_KEYS and
// MESH_INBOX_MASTER_KEY may instead be given as <NAME>_SECRET_ARN, and the
// database as MESH_DB_HOST + MESH_DB_NAME + MESH_DB_SECRET_ARN (an RDS secret
// with username and password). Without any *_SECRET_ARN it makes no AWS call.
func LoadAWS(ctx context.Context, getenv Getenv) (Config, error) {
	vals := map[string]string{}
	var sm *secretsmanager.Client
	get := func(arn string) (string, error) {
		if sm == nil {
			ac, err := awsconfig.LoadDefaultConfig(ctx)
			if err != nil {
				return "", fmt.Errorf("config: AWS SDK: %w", err)
			}
			sm = secretsmanager.NewFromConfig(ac)
		}
		out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
		if err != nil {
			return "", fmt.Errorf("config: read secret %s: %w", arn, err)
		}
		return aws.ToString(out.SecretString), nil
	}
	for _, name := range []string{"MESH_ADMIN_KEY", "MESH_JWT_KEYS", "MESH_INBOX_MASTER_KEY"} {
		if arn := getenv(name + "_SECRET_ARN"); arn != "" && getenv(name) == "" {
			v, err := get(arn)
			if err != nil {
				return Config{}, err
			}
			vals[name] = v
		}
	}
	if arn := getenv("MESH_DB_SECRET_ARN"); arn != "" && getenv("MYSQL_DSN") == "" {
		raw, err := get(arn)
		if err != nil {
			return Config{}, err
		}
		var sec struct {
			Username string `json:"username"`
			Password string `json:"password"`
		}
		if err := json.Unmarshal([]byte(raw), &sec); err != nil {
			return Config{}, fmt.Errorf("config: DB secret is not {username, password} JSON")
		}
		// RDS Proxy terminates TLS with an ACM certificate the system roots trust.
		dc := gomysql.NewConfig()
		dc.User, dc.Passwd = sec.Username, sec.Password
		dc.Net, dc.Addr, dc.DBName = "tcp", getenv("MESH_DB_HOST")+":3306", getenv("MESH_DB_NAME")
		dc.TLSConfig = "true"
		vals["MYSQL_DSN"] = dc.FormatDSN()
	}
	return Load(func(k string) string {
		if v, ok := vals[k]; ok {
			return v
		}
		return getenv(k)
	})
}
