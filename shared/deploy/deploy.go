// Package deploy runs the stack's deploy-time steps, the schema migrations
// and the creation of the inbox topic, as the handler of the CloudFormation
// custom resource Custom::SchemaMigration (functions/migrate).
package deploy

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// PhysicalResourceID names the one schema the custom resource stands for. It
// never changes: a new id on Update would make CloudFormation treat the
// resource as replaced and send a Delete for the "old" one.
const PhysicalResourceID = "agentmesh-schema"

// MigrationsHashProperty is the custom resource's property holding
// mysql.MigrationsHash of the migrations the template was written for.
// CloudFormation calls the function again only when a property changes, so
// this is what makes a deploy with a new migration run it.
const MigrationsHashProperty = "MigrationsHash"

// responseMargin is kept back from the Lambda deadline so that a FAILED
// response still reaches CloudFormation: a function that times out sends
// nothing, and the stack then waits an hour for its custom resource.
const responseMargin = 15 * time.Second

// Result is what one run did.
type Result struct {
	// Applied lists the migration versions this run applied (none on a re-run).
	Applied []int
	// SchemaVersion is the newest embedded migration.
	SchemaVersion int
	// MigrationsHash identifies the embedded migrations (mysql.MigrationsHash).
	MigrationsHash string
	Topic          string
	// Partitions is the topic's partition count as the cluster reports it.
	Partitions int32
	// AppUser is the application user this run created or updated (empty
	// when it was given none: local runs).
	AppUser string
}

// Apply migrates the database named by cfg, creates the application user
// when cfg names one (cfg.AppDBUser: DML only, with the password of its
// secret, which RDS Proxy logs in with) and makes sure the inbox topic exists
// with its explicit settings (partitions, 7-day retention, replication as the
// cluster allows). Every step is idempotent; an existing topic is never
// shrunk or reconfigured, only raised to the configured partition count, and
// log says what was found and changed.
func Apply(ctx context.Context, cfg config.Config, log *slog.Logger) (Result, error) {
	if err := cfg.Require("MYSQL_DSN", "KAFKA_BROKERS"); err != nil {
		return Result{}, err
	}
	var res Result
	migs, err := mysql.Migrations()
	if err != nil {
		return res, err
	}
	if len(migs) > 0 {
		res.SchemaVersion = migs[len(migs)-1].Version
	}
	if res.MigrationsHash, err = mysql.MigrationsHash(); err != nil {
		return res, err
	}
	db, err := mysql.OpenWithCredentials(ctx, cfg.MySQLDSN, cfg.DBCredentials)
	if err != nil {
		return res, err
	}
	defer db.Close()
	if res.Applied, err = db.Migrate(ctx); err != nil {
		return res, err
	}
	// After the migrations, so that a failed one leaves the user as it was;
	// the grant covers the schema's tables present and future.
	if cfg.AppDBUser != "" {
		if err := db.EnsureAppUser(ctx, cfg.AppDBUser, cfg.AppDBPassword); err != nil {
			return res, err
		}
		res.AppUser = cfg.AppDBUser
	}

	opts, err := kafka.Options{Brokers: cfg.KafkaBrokers, Auth: cfg.KafkaAuth}.ClientOpts(ctx)
	if err != nil {
		return res, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return res, fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	res.Topic = cfg.KafkaTopic
	res.Partitions, err = kafka.EnsureTopic(ctx, cl, kafka.TopicSpec{
		Name:       cfg.KafkaTopic,
		Partitions: int32(cfg.KafkaPartitions),
		Retention:  cfg.OutboxRetention,
		Log:        log,
	})
	return res, err
}

// Handler returns the custom resource's function, for cfn.LambdaWrap. Create
// and Update apply the migrations and the topic; Delete does nothing, because
// deleting the stack must never drop the messages. The configuration is read
// per request (secrets included), so that a bad setting becomes a FAILED
// response with its reason instead of an init crash that CloudFormation would
// wait on for an hour.
func Handler(getenv config.Getenv, log *slog.Logger) cfn.CustomResourceFunction {
	return func(ctx context.Context, ev cfn.Event) (string, map[string]any, error) {
		if ev.RequestType == cfn.RequestDelete {
			log.Info("schema migration: delete leaves the schema and the topic in place", "request_id", ev.RequestID)
			// Answer with the id CloudFormation holds (after a crashed Create
			// it is the wrapper's fallback, not ours).
			if ev.PhysicalResourceID != "" {
				return ev.PhysicalResourceID, nil, nil
			}
			return PhysicalResourceID, nil, nil
		}
		if deadline, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline.Add(-responseMargin))
			defer cancel()
		}
		// The template names the migrations it expects; code that embeds
		// others (a template not updated with them, or an old build) must
		// not report success for a schema it did not apply.
		if want, _ := ev.ResourceProperties[MigrationsHashProperty].(string); want != "" {
			if have, err := mysql.MigrationsHash(); err != nil || have != want {
				return PhysicalResourceID, nil, fmt.Errorf("the template's %s is %s but this build embeds %s: set that value in template.yaml", MigrationsHashProperty, want, have)
			}
		}
		start := time.Now()
		cfg, err := config.LoadAWS(ctx, getenv)
		if err != nil {
			return PhysicalResourceID, nil, err
		}
		res, err := Apply(ctx, cfg, log)
		if err != nil {
			log.Error("schema migration failed", "request", string(ev.RequestType), "applied", res.Applied, "err", err)
			return PhysicalResourceID, nil, err
		}
		if want := int32(cfg.KafkaPartitions); res.Partitions != want {
			// Only a topic with more partitions than configured: it is never
			// shrunk (Kafka cannot, and it would move agents' partitions).
			log.Warn("inbox topic has a different partition count than configured", "topic", res.Topic, "partitions", res.Partitions, "configured", want)
		}
		log.Info("schema migration", "request", string(ev.RequestType), "applied", res.Applied,
			"schema_version", res.SchemaVersion, "topic", res.Topic, "partitions", res.Partitions, "took", time.Since(start))
		return PhysicalResourceID, res.data(), nil
	}
}

// data is the custom resource's attributes (Fn::GetAtt SchemaMigration.X);
// CloudFormation wants strings.
func (r Result) data() map[string]any {
	applied := make([]string, len(r.Applied))
	for i, v := range r.Applied {
		applied[i] = strconv.Itoa(v)
	}
	return map[string]any{
		"AppliedVersions": strings.Join(applied, ","),
		"SchemaVersion":   strconv.Itoa(r.SchemaVersion),
		"MigrationsHash":  r.MigrationsHash,
		"Topic":           r.Topic,
		"Partitions":      strconv.Itoa(int(r.Partitions)),
		"AppUser":         r.AppUser,
	}
}
