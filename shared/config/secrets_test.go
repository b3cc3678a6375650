package config_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/awstest"
	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// The secrets of one function come from Secrets Manager (moto) in one
// BatchGetSecretValue, and the database password follows a rotation that
// happens after init without a restart.
func TestSecretsComeInOneCallAndTheDatabasePasswordFollowsRotation(t *testing.T) {
	moto := awstest.Start(t)
	moto.SetEnv(t)
	_, dsn := mysqltest.New(t)
	dc, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(dc.Addr)
	key := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	// The function starts with a password the server no longer takes: the
	// secret is rotated between its init and its first connection.
	dbArn := moto.PutSecret(t, "mesh/db-"+t.Name(), `{"username":"`+dc.User+`","password":"before-rotation"}`)
	env := map[string]string{
		"MESH_DB_SECRET_ARN":               dbArn,
		"MESH_DB_HOST":                     host,
		"MESH_DB_PORT":                     port,
		"MESH_DB_NAME":                     dc.DBName,
		"MESH_DB_TLS":                      "false",
		"MESH_ADMIN_KEY_SECRET_ARN":        moto.PutSecret(t, "mesh/admin-"+t.Name(), "the-admin-key"),
		"MESH_INBOX_MASTER_KEY_SECRET_ARN": moto.PutSecret(t, "mesh/inbox-"+t.Name(), key),
	}
	getenv := func(k string) string { return env[k] }
	ctx := context.Background()

	cfg, err := config.LoadAWS(ctx, getenv)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("all secrets are read in one BatchGetSecretValue", func(t *testing.T) {
		calls := moto.Calls()
		if calls["secretsmanager.BatchGetSecretValue"] != 1 || len(calls) != 1 {
			t.Fatalf("calls at init: %v, want exactly one secretsmanager.BatchGetSecretValue", calls)
		}
		if cfg.AdminKey != "the-admin-key" || len(cfg.InboxMasterKey) != 32 || len(cfg.JWTKeys) != 0 {
			t.Fatalf("admin key %q, inbox master key %d bytes, %d JWT keys: want the two secrets named and nothing else",
				cfg.AdminKey, len(cfg.InboxMasterKey), len(cfg.JWTKeys))
		}
	})

	t.Run("a password rotated after init is read again on the next connection", func(t *testing.T) {
		moto.PutSecret(t, "mesh/db-"+t.Name()[:strings.Index(t.Name(), "/")], `{"username":"`+dc.User+`","password":"`+dc.Passwd+`"}`)
		moto.Calls()
		db, err := mysql.OpenWithCredentials(ctx, cfg.MySQLDSN, cfg.DBCredentials)
		if err != nil {
			t.Fatalf("the pool did not follow the rotated secret: %v", err)
		}
		defer db.Close()
		if calls := moto.Calls(); calls["secretsmanager.GetSecretValue"] != 1 {
			t.Fatalf("calls: %v, want one GetSecretValue after the refused password", calls)
		}
		db.SetMaxIdleConns(0) // every query opens a new connection
		for i := 0; i < 3; i++ {
			if err := db.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if calls := moto.Calls(); len(calls) != 0 {
			t.Fatalf("working credentials were read again: %v", calls)
		}
	})

	t.Run("the secrets the platform stack generates are read in their JSON forms", func(t *testing.T) {
		random := strings.Repeat("r7", 32)
		cfg, err := config.LoadAWS(ctx, func(k string) string {
			return map[string]string{
				"MYSQL_DSN":                        dsn,
				"MESH_JWT_KEYS_SECRET_ARN":         moto.PutSecret(t, "mesh/jwt-generated", `{"kid":"k1","secret":"`+random+`"}`),
				"MESH_INBOX_MASTER_KEY_SECRET_ARN": moto.PutSecret(t, "mesh/inbox-generated", `{"secret":"`+random+`"}`),
			}[k]
		})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(random))
		if len(cfg.JWTKeys) != 1 || cfg.JWTKeys[0].ID != "k1" || string(cfg.JWTKeys[0].Secret) != random || !bytes.Equal(cfg.InboxMasterKey, sum[:]) {
			t.Fatalf("JWT keys %+v, inbox master key %x: want k1 with the secret's bytes and the secret's SHA-256", cfg.JWTKeys, cfg.InboxMasterKey)
		}
		moto.Calls()
	})

	t.Run("a generated secret too short to be a key is refused", func(t *testing.T) {
		_, err := config.LoadAWS(ctx, func(k string) string {
			return map[string]string{"MYSQL_DSN": dsn,
				"MESH_INBOX_MASTER_KEY_SECRET_ARN": moto.PutSecret(t, "mesh/inbox-short", `{"secret":"short"}`)}[k]
		})
		if err == nil || !strings.Contains(err.Error(), "MESH_INBOX_MASTER_KEY") {
			t.Fatalf("err %v, want one naming MESH_INBOX_MASTER_KEY", err)
		}
		moto.Calls()
	})

	t.Run("without any secret ARN no AWS call is made", func(t *testing.T) {
		if _, err := config.LoadAWS(ctx, func(k string) string {
			return map[string]string{"MYSQL_DSN": dsn, "MESH_DB_SECRET_ARN": dbArn}[k]
		}); err != nil {
			t.Fatal(err)
		}
		if calls := moto.Calls(); len(calls) != 0 {
			t.Fatalf("calls: %v, want none", calls)
		}
	})
}
