// Package kafka builds franz-go clients for the inbox topic: a producer with
// acks=all and idempotence for the dispatcher, a partition consumer for meshd,
// topic creation with explicit settings, and MSK IAM auth (TLS + SASL
// AWS_MSK_IAM with credentials from the AWS SDK's default chain).
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/aws"

	"github.com/agentmesh/agentmesh/shared/backoff"
)

// Auth modes.
const (
	AuthNone   = "none"
	AuthMSKIAM = "aws-msk-iam"
)

// Options names a cluster and how to reach it.
type Options struct {
	Brokers []string
	Auth    string
}

// produceRetry spaces the client's own retries of a request: short, since
// the dispatcher bounds every publish and retries the rest itself.
var produceRetry = backoff.Policy{Base: 100 * time.Millisecond, Max: 500 * time.Millisecond}

// ClientOpts returns the franz-go options for connecting with o.
func (o Options) ClientOpts(ctx context.Context) ([]kgo.Opt, error) {
	if len(o.Brokers) == 0 {
		return nil, errors.New("kafka: no brokers configured (KAFKA_BROKERS)")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(o.Brokers...), kgo.DialTimeout(5 * time.Second)}
	switch o.Auth {
	case "", AuthNone:
	case AuthMSKIAM:
		cfg, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("kafka: AWS config: %w", err)
		}
		opts = append(opts,
			kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}),
			kgo.SASL(aws.ManagedStreamingIAM(func(ctx context.Context) (aws.Auth, error) {
				c, err := cfg.Credentials.Retrieve(ctx)
				if err != nil {
					return aws.Auth{}, err
				}
				return aws.Auth{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken}, nil
			})))
	default:
		return nil, fmt.Errorf("kafka: unknown auth %q (want %q or %q)", o.Auth, AuthNone, AuthMSKIAM)
	}
	return opts, nil
}

// NewProducer returns a client that produces with acks=all and idempotence
// (franz-go's defaults, stated here because the no-loss guarantee rests on
// them), Kafka's murmur2 key partitioner, and records that fail at their
// context's deadline or the delivery timeout even with the broker gone.
// (After such a failure the client needs a new producer epoch from the broker
// before it produces again, which no record's context bounds: callers that
// must return in time bound their wait themselves, as dispatch.KafkaPublisher
// does.)
//
// Failing in time needs AllowIdempotentProduceCancellation: without it an idempotent
// franz-go producer refuses to fail a record once it was written to a
// connection (it cannot tell "not received" from "reply lost") and waits for
// the broker however long it takes, past any context deadline. The price is a
// possible duplicate of a cancelled record when it is published again, which
// consumers drop by seq like any republication.
//
// Its view of the topic's partitions is at most MetadataMaxAge old, so a
// grown topic is produced by its new count within that bound. extra options
// (tests: a shorter metadata age) come last.
func NewProducer(ctx context.Context, o Options, topic string, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := o.ClientOpts(ctx)
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(Partitioner()),
		// franz-go's default is 5 minutes: a grown topic's new partitions
		// would wait that long for their records while meshd follows the
		// new count.
		kgo.MetadataMaxAge(MetadataMaxAge),
		kgo.RecordRetries(5),
		kgo.ProduceRequestTimeout(10*time.Second),
		kgo.RecordDeliveryTimeout(20*time.Second),
		kgo.AllowIdempotentProduceCancellation(),
		// Retries (and so cancellations, and reconnecting once a broker is
		// back) happen at most half a second apart instead of 2.5 s.
		kgo.RetryBackoffFn(func(tries int) time.Duration { return produceRetry.Delay(tries + 1) }),
		kgo.ProducerLinger(0),
		// Every value is sealed: ciphertext in base64, which snappy cannot
		// shrink (a batch of 100 sealed records: 142,300 bytes, 142,307
		// compressed). franz-go's default would compress each batch and then
		// send it uncompressed anyway, a few microseconds of the relay's CPU
		// per record for nothing.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	)
	return kgo.NewClient(append(opts, extra...)...)
}

// MetadataMaxAge bounds how old the producer's view of the topic's
// partition count gets (the dispatcher produces by a grown count within
// it); meshd checks the count as often (see meshd.Config.PartitionCheckEvery).
const MetadataMaxAge = 30 * time.Second

// Partitioner is the one partitioner of the inbox topic: Kafka's default
// murmur2 hash of the record key (the routing id) over the topic's current
// partition count. The producer places records with it and PartitionFor
// (meshd) finds them with it.
func Partitioner() kgo.Partitioner { return kgo.StickyKeyPartitioner(nil) }

// PartitionFor returns the partition Partitioner picks for key among n
// partitions: meshd consumes only that one.
func PartitionFor(key string, n int) int32 {
	p := Partitioner().ForTopic("")
	return int32(p.Partition(&kgo.Record{Key: []byte(key)}, n))
}

// TopicSpec is the inbox topic's explicit settings.
type TopicSpec struct {
	Name       string
	Partitions int32
	Retention  time.Duration
	// Log receives what EnsureTopic found and changed (the migrate
	// function's log); nil logs nothing (tests' topics).
	Log *slog.Logger
}

// TopicFound is an existing topic's settings as the cluster describes them.
type TopicFound struct {
	Partitions  int32
	Replication int    // replicas of its partition 0
	MinISR      string // min.insync.replicas ("" when it cannot be described)
	RetentionMS string
}

// EnsureTopic creates the topic if it does not exist, never relying on
// auto-creation: replication 3 and min.insync.replicas 2 where the cluster
// has three brokers or more, else what the cluster can hold. An existing
// topic is never shrunk and its settings are never changed: the one change
// made is raising its partition count to spec.Partitions when that is
// higher (the dispatcher and meshd follow a grown topic; Kafka cannot
// shrink one). It logs what it found and what it changed, and returns the
// topic's partition count.
func EnsureTopic(ctx context.Context, cl *kgo.Client, spec TopicSpec) (int32, error) {
	log := spec.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	adm := kadm.NewClient(cl)
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, fmt.Errorf("kafka: metadata: %w", err)
	}
	repl, minISR := int16(3), "2"
	if n := len(meta.Brokers); n < 3 {
		repl, minISR = int16(n), "1"
	}
	retention := strconv.FormatInt(spec.Retention.Milliseconds(), 10)
	cfg := map[string]*string{
		"retention.ms":        &retention,
		"min.insync.replicas": &minISR,
		"cleanup.policy":      ptr("delete"),
	}
	resp, err := adm.CreateTopic(ctx, spec.Partitions, repl, cfg, spec.Name)
	if err == nil {
		err = resp.Err
	}
	if err == nil {
		log.Info("inbox topic created", "topic", spec.Name, "partitions", spec.Partitions, "replication", repl,
			"min_insync_replicas", minISR, "retention_ms", retention)
		return partitionsAtLeast(ctx, cl, spec.Name, spec.Partitions)
	}
	if !errors.Is(err, kerr.TopicAlreadyExists) {
		return 0, fmt.Errorf("kafka: create topic %s: %w", spec.Name, err)
	}
	found, err := DescribeTopic(ctx, cl, spec.Name)
	if err != nil {
		return 0, err
	}
	attrs := []any{"topic", spec.Name, "partitions", found.Partitions, "replication", found.Replication,
		"min_insync_replicas", found.MinISR, "retention_ms", found.RetentionMS, "configured_partitions", spec.Partitions}
	switch {
	case found.Partitions < spec.Partitions:
		r, err := adm.UpdatePartitions(ctx, int(spec.Partitions), spec.Name)
		if err == nil {
			err = r[spec.Name].Err
		}
		if err != nil {
			return 0, fmt.Errorf("kafka: raise the partitions of %s from %d to %d: %w", spec.Name, found.Partitions, spec.Partitions, err)
		}
		log.Warn("inbox topic found; raised its partition count (the dispatcher and meshd follow within a minute; nothing else changed)",
			append(attrs, "changed", fmt.Sprintf("partitions %d -> %d", found.Partitions, spec.Partitions))...)
		return partitionsAtLeast(ctx, cl, spec.Name, spec.Partitions)
	case found.Partitions > spec.Partitions:
		log.Warn("inbox topic found with more partitions than configured; a topic is never shrunk, nothing changed",
			append(attrs, "changed", "nothing")...)
	default:
		log.Info("inbox topic found; nothing changed", append(attrs, "changed", "nothing")...)
	}
	return found.Partitions, nil
}

// DescribeTopic returns an existing topic's partitions, replication and
// the two settings EnsureTopic sets. A config the cluster will not describe
// (a missing permission) is left empty rather than failing: the partitions
// are what callers act on.
func DescribeTopic(ctx context.Context, cl *kgo.Client, topic string) (TopicFound, error) {
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return TopicFound{}, fmt.Errorf("kafka: describe topic %s: %w", topic, err)
	}
	t, ok := td[topic]
	if !ok || t.Err != nil {
		return TopicFound{}, fmt.Errorf("kafka: describe topic %s: %v", topic, t.Err)
	}
	f := TopicFound{Partitions: int32(len(t.Partitions))}
	if p, ok := t.Partitions[0]; ok {
		f.Replication = len(p.Replicas)
	}
	if rc, err := adm.DescribeTopicConfigs(ctx, topic); err == nil {
		if c, err := rc.On(topic, nil); err == nil {
			for _, kv := range c.Configs {
				switch kv.Key {
				case "min.insync.replicas":
					f.MinISR = kv.MaybeValue()
				case "retention.ms":
					f.RetentionMS = kv.MaybeValue()
				}
			}
		}
	}
	return f, nil
}

// Partitions returns the number of partitions of topic.
func Partitions(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	return partitionsAtLeast(ctx, cl, topic, 1)
}

// partitionsAtLeast returns topic's partition count once the metadata
// shows at least least partitions (it lags a fresh create or raise).
func partitionsAtLeast(ctx context.Context, cl *kgo.Client, topic string, least int32) (int32, error) {
	adm := kadm.NewClient(cl)
	var lastErr error
	// Metadata can lag a fresh CreateTopics, more so on a loaded machine.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if t, ok := td[topic]; ok && t.Err == nil && len(t.Partitions) >= int(max(least, 1)) {
				return int32(len(t.Partitions)), nil
			} else if ok && t.Err != nil {
				err = t.Err
			} else {
				err = fmt.Errorf("%d partitions, want %d", len(t.Partitions), least)
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("kafka: topic %s not found: %v", topic, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func ptr(s string) *string { return &s }
