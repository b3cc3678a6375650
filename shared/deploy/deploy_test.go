package deploy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/awstest"
	"github.com/agentmesh/agentmesh/shared/deploy"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// cloudFormation stands in for the pre-signed S3 URL CloudFormation waits on:
// it records every response PUT to it.
type cloudFormation struct {
	*httptest.Server
	mu        sync.Mutex
	responses []cfn.Response
}

func newCloudFormation(t *testing.T) *cloudFormation {
	cf := &cloudFormation{}
	cf.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var resp cfn.Response
		if r.Method != http.MethodPut || json.Unmarshal(body, &resp) != nil {
			t.Errorf("CloudFormation got %s with body %q, want a PUT of a JSON response", r.Method, body)
			http.Error(w, "bad response", http.StatusBadRequest)
			return
		}
		cf.mu.Lock()
		cf.responses = append(cf.responses, resp)
		cf.mu.Unlock()
	}))
	t.Cleanup(cf.Close)
	return cf
}

// last returns the one response received since the previous call.
func (cf *cloudFormation) last(t *testing.T) cfn.Response {
	t.Helper()
	cf.mu.Lock()
	defer cf.mu.Unlock()
	if len(cf.responses) != 1 {
		t.Fatalf("CloudFormation received %d responses, want exactly 1", len(cf.responses))
	}
	r := cf.responses[0]
	cf.responses = nil
	return r
}

// sampleEvent is events/migrate.json, the function's sample event, with its
// ResponseURL pointed at cf.
func sampleEvent(t *testing.T, cf *cloudFormation, typ cfn.RequestType) cfn.Event {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "events", "migrate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev cfn.Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.RequestType != cfn.RequestCreate || ev.ResourceType != "Custom::SchemaMigration" || ev.ResponseURL == "" {
		t.Fatalf("events/migrate.json is not a Create event of Custom::SchemaMigration: %+v", ev)
	}
	if cf != nil {
		ev.ResponseURL = cf.URL + "/response?X-Amz-Signature=test"
	}
	if typ != cfn.RequestCreate {
		ev.RequestType = typ
		ev.PhysicalResourceID = deploy.PhysicalResourceID
		ev.OldResourceProperties = ev.ResourceProperties
	}
	return ev
}

func invoke(t *testing.T, env map[string]string, ev cfn.Event) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	fn := cfn.LambdaWrap(deploy.Handler(func(k string) string { return env[k] }, log))
	if reason, err := fn(ctx, ev); err != nil {
		t.Fatalf("the response did not reach CloudFormation: %v (%s)", err, reason)
	}
}

func TestTheCustomResourceMigratesAndCreatesTheTopic(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	db, dsn := mysqltest.Empty(t)
	cf := newCloudFormation(t)
	topic := uniqueTopic(t, brokers)
	env := map[string]string{
		"MYSQL_DSN":        dsn,
		"KAFKA_BROKERS":    strings.Join(brokers, ","),
		"KAFKA_TOPIC":      topic,
		"KAFKA_PARTITIONS": "3",
	}
	migs, err := mysql.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("Create applies every migration and reports SUCCESS", func(t *testing.T) {
		ev := sampleEvent(t, cf, cfn.RequestCreate)
		invoke(t, env, ev)
		r := cf.last(t)
		if r.Status != cfn.StatusSuccess {
			t.Fatalf("status %s (%s), want SUCCESS", r.Status, r.Reason)
		}
		if r.PhysicalResourceID != deploy.PhysicalResourceID || r.RequestID != ev.RequestID ||
			r.LogicalResourceID != ev.LogicalResourceID || r.StackID != ev.StackID {
			t.Fatalf("response %+v does not answer request %s of %s with id %s", r, ev.RequestID, ev.LogicalResourceID, deploy.PhysicalResourceID)
		}
		var all []string
		for _, m := range migs {
			all = append(all, strconv.Itoa(m.Version))
		}
		if got, want := r.Data["AppliedVersions"], strings.Join(all, ","); got != want {
			t.Errorf("AppliedVersions = %v, want %s", got, want)
		}
		if r.Data["Topic"] != topic || r.Data["Partitions"] != "3" {
			t.Errorf("data %v, want topic %s with 3 partitions", r.Data, topic)
		}
	})

	t.Run("every table of the migrations exists", func(t *testing.T) {
		create := regexp.MustCompile(`(?i)^\s*CREATE TABLE\s+(?:IF NOT EXISTS\s+)?` + "`?" + `(\w+)`)
		want := map[string]bool{"schema_migrations": true}
		for _, m := range migs {
			for _, s := range m.Statements {
				if sub := create.FindStringSubmatch(s); sub != nil {
					want[sub[1]] = true
				}
			}
		}
		rows, err := db.QueryContext(ctx, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			delete(want, name)
		}
		if len(want) > 0 {
			t.Fatalf("tables missing after the migration: %v", want)
		}
	})

	t.Run("the topic has the configured partitions and a 7-day retention", func(t *testing.T) {
		adm := kadm.NewClient(kafkaClient(t, brokers))
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(td[topic].Partitions); n != 3 {
			t.Fatalf("topic %s has %d partitions, want 3", topic, n)
		}
		cfgs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := cfgs.On(topic, nil)
		if err != nil {
			t.Fatal(err)
		}
		var retention string
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" && c.Value != nil {
				retention = *c.Value
			}
		}
		if retention != "604800000" {
			t.Fatalf("retention.ms = %q, want 604800000 (7 days)", retention)
		}
	})

	t.Run("an Update re-runs as a no-op", func(t *testing.T) {
		before := migrationRows(t, db)
		invoke(t, env, sampleEvent(t, cf, cfn.RequestUpdate))
		r := cf.last(t)
		if r.Status != cfn.StatusSuccess || r.PhysicalResourceID != deploy.PhysicalResourceID {
			t.Fatalf("status %s (%s) id %s, want SUCCESS with id %s", r.Status, r.Reason, r.PhysicalResourceID, deploy.PhysicalResourceID)
		}
		if r.Data["AppliedVersions"] != "" {
			t.Errorf("AppliedVersions = %v on a re-run, want none", r.Data["AppliedVersions"])
		}
		if after := migrationRows(t, db); strings.Join(after, "|") != strings.Join(before, "|") {
			t.Fatalf("schema_migrations changed on a re-run:\nbefore %v\nafter  %v", before, after)
		}
	})

	t.Run("a Delete succeeds and keeps the data", func(t *testing.T) {
		invoke(t, env, sampleEvent(t, cf, cfn.RequestDelete))
		if r := cf.last(t); r.Status != cfn.StatusSuccess || r.PhysicalResourceID != deploy.PhysicalResourceID {
			t.Fatalf("status %s (%s) id %s, want SUCCESS with id %s", r.Status, r.Reason, r.PhysicalResourceID, deploy.PhysicalResourceID)
		}
		if n := len(migrationRows(t, db)); n != len(migs) {
			t.Fatalf("schema_migrations has %d rows after Delete, want %d", n, len(migs))
		}
		td, err := kadm.NewClient(kafkaClient(t, brokers)).ListTopics(ctx, topic)
		if err != nil || td[topic].Err != nil || len(td[topic].Partitions) != 3 {
			t.Fatalf("topic %s is gone after Delete: %v %v", topic, err, td[topic].Err)
		}
	})
}

func TestTheCustomResourceReportsFailureInsteadOfHanging(t *testing.T) {
	cf := newCloudFormation(t)
	closed := closedAddr(t) // the database is unreachable

	tests := []struct {
		name   string
		env    map[string]string
		reason string
	}{
		{"an unreachable database is a FAILED with the cause",
			map[string]string{"MYSQL_DSN": "mesh:mesh@tcp(" + closed + ")/mesh", "KAFKA_BROKERS": "127.0.0.1:1"}, "cannot reach"},
		{"a missing broker setting is a FAILED naming it",
			map[string]string{"MYSQL_DSN": "mesh:mesh@tcp(" + closed + ")/mesh"}, "KAFKA_BROKERS"},
		{"a bad partition count is a FAILED naming it",
			map[string]string{"MYSQL_DSN": "mesh:mesh@tcp(" + closed + ")/mesh", "KAFKA_BROKERS": "127.0.0.1:1", "KAFKA_PARTITIONS": "zero"}, "KAFKA_PARTITIONS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			invoke(t, tc.env, sampleEvent(t, cf, cfn.RequestCreate))
			r := cf.last(t)
			if r.Status != cfn.StatusFailed || !strings.Contains(r.Reason, tc.reason) {
				t.Fatalf("status %s reason %q, want FAILED mentioning %q", r.Status, r.Reason, tc.reason)
			}
			if r.PhysicalResourceID != deploy.PhysicalResourceID {
				t.Fatalf("id %s, want %s", r.PhysicalResourceID, deploy.PhysicalResourceID)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("failing took %v", d)
			}
		})
	}
}

func kafkaClient(t *testing.T, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// uniqueTopic names a topic no other test uses and deletes it at the end;
// the function under test creates it.
func uniqueTopic(t *testing.T, brokers []string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "test.deploy." + hex.EncodeToString(b)
	t.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err == nil {
			_, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), name)
			cl.Close()
		}
	})
	return name
}

func migrationRows(t *testing.T, db *mysql.DB) []string {
	t.Helper()
	return mysqltest.Strings(t, db, "", "SELECT CONCAT_WS(' ', version, name, applied_at) FROM schema_migrations ORDER BY version")
}

func TestTheCustomResourceRefusesATemplateWrittenForOtherMigrations(t *testing.T) {
	cf := newCloudFormation(t)
	db, dsn := mysqltest.Empty(t)
	ev := sampleEvent(t, cf, cfn.RequestCreate)
	ev.ResourceProperties = map[string]any{deploy.MigrationsHashProperty: "sha256:0000"}
	invoke(t, map[string]string{"MYSQL_DSN": dsn, "KAFKA_BROKERS": "127.0.0.1:1"}, ev)
	r := cf.last(t)
	if r.Status != cfn.StatusFailed || !strings.Contains(r.Reason, "sha256:0000") {
		t.Fatalf("status %s reason %q, want FAILED naming the template's hash", r.Status, r.Reason)
	}
	var n int
	if err := db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the refused run created %d tables", n)
	}
}

// CloudFormation waits for a custom resource's answer at a presigned S3 URL;
// here moto serves one, and each invocation must leave exactly one answer
// there: SUCCESS after migrating, FAILED with the cause when it cannot.
func TestTheCustomResourceAnswersAtAPresignedS3URL(t *testing.T) {
	moto := awstest.Start(t)
	moto.CreateBucket(t, "cfn-responses")
	brokers := kafkatest.Brokers(t)
	_, dsn := mysqltest.Empty(t)
	closed := closedAddr(t)

	tests := []struct {
		name   string
		env    map[string]string
		status cfn.StatusType
		reason string
	}{
		{"a migration that succeeds answers SUCCESS", map[string]string{
			"MYSQL_DSN": dsn, "KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_TOPIC": uniqueTopic(t, brokers), "KAFKA_PARTITIONS": "1",
		}, cfn.StatusSuccess, ""},
		{"a migration that cannot reach its database answers FAILED with the cause", map[string]string{
			"MYSQL_DSN": "mesh:mesh@tcp(" + closed + ")/mesh", "KAFKA_BROKERS": "127.0.0.1:1",
		}, cfn.StatusFailed, "cannot reach"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("arn:aws:cloudformation:us-east-1:123456789012:stack/agent-mesh/x|SchemaMigration|request-%d", i)
			ev := sampleEvent(t, nil, cfn.RequestCreate)
			ev.RequestID = fmt.Sprintf("request-%d", i)
			ev.ResponseURL = moto.PresignedPutURL("cfn-responses", key)
			moto.Calls()
			invoke(t, tc.env, ev)
			if calls := moto.Calls(); len(calls) != 1 {
				t.Fatalf("requests to S3: %v, want exactly one PUT of the answer", calls)
			}
			var r cfn.Response
			if err := json.Unmarshal(moto.GetObject(t, "cfn-responses", key), &r); err != nil {
				t.Fatalf("the answer in S3 is not a CloudFormation response: %v", err)
			}
			if r.Status != tc.status || r.RequestID != ev.RequestID || r.PhysicalResourceID != deploy.PhysicalResourceID ||
				!strings.Contains(r.Reason, tc.reason) {
				t.Fatalf("answer %+v, want %s for %s mentioning %q", r, tc.status, ev.RequestID, tc.reason)
			}
		})
	}
}

// closedAddr is a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
