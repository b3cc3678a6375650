package dispatch

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/mesh"
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
	// A record the broker refuses would be dead-lettered: refuse the
	// configuration at start instead, naming both numbers.
	why := fmt.Sprintf("MESH_MAX_MESSAGE_BYTES=%d", cfg.MaxMessageBytes)
	if err := kafka.CheckRecordFits(ctx, cl, cfg.KafkaTopic, MaxRecordBytes(cfg.MaxMessageBytes), why); err != nil {
		cl.Close()
		return nil, err
	}
	d := &Dispatcher{DB: db, Publisher: KafkaPublisher{Client: cl}, Topic: cfg.KafkaTopic, Sealer: s, Log: log}
	return d, d.Validate()
}

// MaxBodyOverhead bounds what an event body adds to the parts it carries
// (the API bounds those by MESH_MAX_MESSAGE_BYTES, measured as stored): the
// task summary and the message, status or artifact fields around them, each
// id at its column's 64 characters and every character escaped to 6 bytes,
// and an artifact's 200-character name. A test builds every kind of body
// at these limits against it.
const MaxBodyOverhead = 8 << 10

// MaxRecordBytes is the largest record batch (kafka.BatchBytes) the
// dispatcher produces for an event whose parts take maxMessageBytes: the
// sealed event is the envelope's fields at their columns' limits plus the
// body, padded up to its bucket, sealed, base64-encoded in the record value,
// keyed by the routing id.
func MaxRecordBytes(maxMessageBytes int) int {
	plain := envelopeOverhead + MaxBodyOverhead + maxMessageBytes
	value := len(`{"v":,"key_epoch":,"sealed":""}`) + 2*len(fmt.Sprint(math.MinInt32)) +
		base64.StdEncoding.EncodedLen(seal.Bucket(plain))
	return kafka.BatchBytes(seal.RoutingIDLen, value)
}

// envelopeOverhead is the sealed event without its body's content: every
// field at its outbox column's limit, each character escaped to 6 bytes
// (\u003c), the longest time and numbers. The sealed event is what
// json.Marshal makes of the envelope, so it is measured that way.
var envelopeOverhead = func() int {
	worst := func(n int) string { return strings.Repeat("<", n) }
	env := mesh.Envelope{
		V: seal.RecordVersion, EventID: worst(40), Seq: math.MinInt64, Type: worst(16),
		To: worst(64), From: worst(64), TaskID: worst(64), ContextID: worst(64), GroupID: worst(64), MessageID: worst(64),
		OccurredAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(23*3600+59*60))),
		KeyEpoch:   math.MinInt32, TraceID: worst(64), Body: json.RawMessage(`0`),
	}
	b, err := json.Marshal(env)
	if err != nil {
		panic(err) // a fixed value always encodes
	}
	return len(b) - 1 // the body's content is counted apart
}()
