package dispatch

import (
	"context"
	"log/slog"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// NewKafkaDispatcher wires a Dispatcher to the Kafka cluster of cfg. The
// caller closes the returned publisher's client when done.
func NewKafkaDispatcher(ctx context.Context, db *mysql.DB, cfg config.Config, log *slog.Logger) (*Dispatcher, error) {
	if err := cfg.Require("KAFKA_BROKERS", "MESH_INBOX_MASTER_KEY"); err != nil {
		return nil, err
	}
	s, err := seal.New(cfg.InboxMasterKey)
	if err != nil {
		return nil, err
	}
	cl, err := kafka.NewProducer(ctx, kafka.Options{Brokers: cfg.KafkaBrokers, Auth: cfg.KafkaAuth}, cfg.KafkaTopic)
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{DB: db, Publisher: KafkaPublisher{Client: cl}, Topic: cfg.KafkaTopic, Sealer: s, Log: log}
	return d, d.Validate()
}
