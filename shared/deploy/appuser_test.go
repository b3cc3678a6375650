package deploy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/deploy"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// On AWS the migration runs as the master user and leaves the functions an
// application user that can change rows, not the schema.
func TestTheMigrationCreatesTheApplicationUserWithDMLOnly(t *testing.T) {
	ctx := context.Background()
	master, dsn := mysqltest.Empty(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	user := "app_" + hex.EncodeToString(b)
	t.Cleanup(func() { _, _ = master.ExecContext(context.Background(), "DROP USER IF EXISTS ?@'%'", user) })

	brokers := kafkatest.Brokers(t)
	topic := uniqueTopic(t, brokers)
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"MYSQL_DSN": dsn, "KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_TOPIC": topic}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.AppDBUser, cfg.AppDBPassword = user, "app-password"
	res, err := deploy.Apply(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if res.AppUser != user {
		t.Errorf("Result.AppUser = %q, want %q", res.AppUser, user)
	}

	dc, _ := gomysql.ParseDSN(dsn)
	dc.User, dc.Passwd = user, "app-password"
	app, err := mysql.Open(ctx, dc.FormatDSN())
	if err != nil {
		t.Fatalf("the application user cannot connect: %v", err)
	}
	defer app.Close()
	t.Run("the application user changes rows of the migrated tables", func(t *testing.T) {
		if _, err := app.ExecContext(ctx, "DELETE FROM agents WHERE agent_id = ?", "nobody"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the application user cannot drop a table", func(t *testing.T) {
		var me *gomysql.MySQLError
		if _, err := app.ExecContext(ctx, "DROP TABLE agents"); !errors.As(err, &me) || me.Number != 1142 {
			t.Fatalf("got %v, want error 1142 (command denied)", err)
		}
	})
}
