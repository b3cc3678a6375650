package config_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/awstest"
	"github.com/agentmesh/agentmesh/shared/config"
)

// On AWS every function but the migration is given MESH_DB_USER and no
// database secret: it connects with IAM tokens of its role and holds no
// database password.
func TestAFunctionWithADatabaseUserConnectsWithIAMTokens(t *testing.T) {
	moto := awstest.Start(t)
	moto.SetEnv(t)
	env := map[string]string{
		"MESH_DB_HOST": "mesh-proxy.proxy-abc.eu-west-1.rds.amazonaws.com",
		"MESH_DB_NAME": "mesh",
		"MESH_DB_USER": "mesh_app",
	}
	getenv := func(k string) string { return env[k] }
	ctx := context.Background()
	cfg, err := config.LoadAWS(ctx, getenv)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := gomysql.ParseDSN(cfg.MySQLDSN)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("no secret is read at init", func(t *testing.T) {
		if calls := moto.Calls(); len(calls) != 0 {
			t.Fatalf("AWS calls at init: %v, want none", calls)
		}
	})
	t.Run("the DSN names the application user at the proxy, over TLS, without a password", func(t *testing.T) {
		if dc.User != "mesh_app" || dc.Passwd != "" || dc.TLSConfig != "true" || !dc.AllowCleartextPasswords ||
			dc.Addr != env["MESH_DB_HOST"]+":3306" || dc.DBName != "mesh" {
			t.Fatalf("DSN %s", cfg.MySQLDSN)
		}
	})
	t.Run("each connection presents an IAM token for the application user", func(t *testing.T) {
		if cfg.DBCredentials == nil {
			t.Fatal("no DBCredentials: connections would log in without a password")
		}
		user, token, err := cfg.DBCredentials(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse("https://" + token)
		if err != nil || user != "mesh_app" || u.Query().Get("DBUser") != "mesh_app" || u.Query().Get("Action") != "connect" {
			t.Fatalf("user %q, token %q (%v)", user, token, err)
		}
	})

	t.Run("IAM without TLS is refused", func(t *testing.T) {
		env["MESH_DB_TLS"] = "false"
		defer delete(env, "MESH_DB_TLS")
		if _, err := config.LoadAWS(ctx, getenv); err == nil || !strings.Contains(err.Error(), "MESH_DB_TLS") {
			t.Fatalf("got %v, want an error naming MESH_DB_TLS", err)
		}
	})
	t.Run("a local MYSQL_DSN wins over MESH_DB_USER", func(t *testing.T) {
		env["MYSQL_DSN"] = "mesh:mesh@tcp(127.0.0.1:23306)/mesh"
		defer delete(env, "MYSQL_DSN")
		cfg, err := config.LoadAWS(ctx, getenv)
		if err != nil || cfg.MySQLDSN != env["MYSQL_DSN"] || cfg.DBCredentials != nil {
			t.Fatalf("DSN %q, credentials set %v, err %v: want the local DSN as given", cfg.MySQLDSN, cfg.DBCredentials != nil, err)
		}
	})
}

// The migration is given the master secret and the application user's
// secret: it connects with the master's password and learns the user it
// creates, in the one BatchGetSecretValue.
func TestTheMigrationConnectsAsTheMasterAndLearnsTheApplicationUser(t *testing.T) {
	moto := awstest.Start(t)
	moto.SetEnv(t)
	env := map[string]string{
		"MESH_DB_HOST":           "mesh-proxy.proxy-abc.eu-west-1.rds.amazonaws.com",
		"MESH_DB_NAME":           "mesh",
		"MESH_DB_USER":           "mesh_app", // from Globals; the master secret wins
		"MESH_DB_SECRET_ARN":     moto.PutSecret(t, "mesh/db-"+t.Name(), `{"username":"mesh_admin","password":"master-pw"}`),
		"MESH_DB_APP_SECRET_ARN": moto.PutSecret(t, "mesh/app-"+t.Name(), `{"username":"mesh_app","password":"app-pw"}`),
	}
	cfg, err := config.LoadAWS(context.Background(), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	dc, _ := gomysql.ParseDSN(cfg.MySQLDSN)
	if dc.User != "mesh_admin" || dc.Passwd != "master-pw" || dc.AllowCleartextPasswords {
		t.Errorf("the migration connects as %q with cleartext %v, want mesh_admin with its password", dc.User, dc.AllowCleartextPasswords)
	}
	if cfg.AppDBUser != "mesh_app" || cfg.AppDBPassword != "app-pw" {
		t.Errorf("application user %q, want mesh_app with the secret's password", cfg.AppDBUser)
	}
	if calls := moto.Calls(); calls["secretsmanager.BatchGetSecretValue"] != 1 || len(calls) != 1 {
		t.Errorf("calls at init: %v, want one BatchGetSecretValue", calls)
	}
}
