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
func NewProducer(ctx context.Context, o Options, topic string) (*kgo.Client, error) {
	opts, err := o.ClientOpts(ctx)
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.RecordRetries(5),
		kgo.ProduceRequestTimeout(10*time.Second),
		kgo.RecordDeliveryTimeout(20*time.Second),
		kgo.AllowIdempotentProduceCancellation(),
		// Retries (and so cancellations, and reconnecting once a broker is
		// back) happen at most half a second apart instead of 2.5 s.
		kgo.RetryBackoffFn(func(tries int) time.Duration { return produceRetry.Delay(tries + 1) }),
		kgo.ProducerLinger(0),
	)
	return kgo.NewClient(opts...)
}

// PartitionFor returns the partition Kafka's default (murmur2) partitioner
// picks for key among n partitions: meshd consumes only that one.
func PartitionFor(key string, n int) int32 {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("")
	return int32(p.Partition(&kgo.Record{Key: []byte(key)}, n))
}

// TopicSpec is the inbox topic's explicit settings.
type TopicSpec struct {
	Name       string
	Partitions int32
	Retention  time.Duration
}

// EnsureTopic creates the topic if it does not exist, never relying on
// auto-creation: replication 3 and min.insync.replicas 2 where the cluster
// has three brokers or more, else what the cluster can hold. It returns the
// topic's partition count.
func EnsureTopic(ctx context.Context, cl *kgo.Client, spec TopicSpec) (int32, error) {
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
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return 0, fmt.Errorf("kafka: create topic %s: %w", spec.Name, err)
	}
	if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
		return 0, fmt.Errorf("kafka: create topic %s: %w", spec.Name, resp.Err)
	}
	return Partitions(ctx, cl, spec.Name)
}

// Partitions returns the number of partitions of topic.
func Partitions(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	adm := kadm.NewClient(cl)
	var lastErr error
	// Metadata can lag a fresh CreateTopics, more so on a loaded machine.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if t, ok := td[topic]; ok && t.Err == nil && len(t.Partitions) > 0 {
				return int32(len(t.Partitions)), nil
			} else if ok {
				err = t.Err
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
