package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// batchOverhead is a record batch without its records as franz-go sizes it
// against ProducerBatchMaxBytes: Kafka's 61-byte v2 batch header plus the
// 4-byte array length of the produce request. A broker measures the same
// batch 4 bytes smaller, so a bound in these terms holds for both.
const batchOverhead = 65

// BatchBytes is the size of a record batch holding one record with a key of
// keyLen bytes and a value of valueLen bytes, no headers, uncompressed, as
// the producer counts it against ProducerBatchMaxBytes; the broker's count
// against max.message.bytes is 4 bytes less. NewProducer's batches are
// uncompressed, so this is what the broker receives.
func BatchBytes(keyLen, valueLen int) int {
	// attributes, timestamp delta (0 in a batch of one), offset delta (0),
	// key length, key, value length, value, header count (0)
	rec := 1 + 1 + 1 + kbin.VarintLen(int32(keyLen)) + keyLen + kbin.VarintLen(int32(valueLen)) + valueLen + 1
	return batchOverhead + kbin.VarintLen(int32(rec)) + rec
}

// topicAppearWait bounds how long TopicMaxMessageBytes waits for a topic
// the broker it asks does not know yet: a topic just created reaches every
// broker's metadata within moments, and one that is really missing is
// reported once this has passed. A variable for tests.
var topicAppearWait = 10 * time.Second

// onUnknownTopic, in tests, runs when a broker answered that it does not
// know the topic, before the pause that waits for it.
var onUnknownTopic func()

// TopicMaxMessageBytes reads the topic's effective max.message.bytes (its
// own setting, or the broker default it inherits) from the cluster.
func TopicMaxMessageBytes(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	deadline := time.Now().Add(topicAppearWait)
	pause := 100 * time.Millisecond
	var rc kadm.ResourceConfig
	for {
		res, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topic)
		if err != nil {
			return 0, fmt.Errorf("kafka: describe topic %s configs: %w", topic, err)
		}
		rc, err = res.On(topic, nil)
		if err == nil {
			err = rc.Err
		}
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.UnknownTopicOrPartition) || time.Now().Add(pause).After(deadline) {
			return 0, fmt.Errorf("kafka: describe topic %s configs: %w", topic, err)
		}
		if onUnknownTopic != nil {
			onUnknownTopic()
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("kafka: describe topic %s configs: %w", topic, err)
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" && c.Value != nil {
			n, err := strconv.Atoi(*c.Value)
			if err != nil {
				return 0, fmt.Errorf("kafka: topic %s: max.message.bytes %q is not a number", topic, *c.Value)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("kafka: topic %s: the cluster did not report max.message.bytes", topic)
}

// ErrRecordTooLarge means the largest record a process may produce does not
// fit the topic or the producer.
var ErrRecordTooLarge = errors.New("kafka: the largest record does not fit")

// CheckRecordFits returns an error wrapping ErrRecordTooLarge when a record
// batch of batchBytes (see BatchBytes) would be refused by the producer cl
// (ProducerBatchMaxBytes) or by the broker (topic's actual
// max.message.bytes). why names where batchBytes comes from; the error
// names both numbers, so the operator sees what to change.
func CheckRecordFits(ctx context.Context, cl *kgo.Client, topic string, batchBytes int, why string) error {
	if limit := producerBatchMaxBytes(cl, topic); batchBytes > limit {
		return fmt.Errorf("%w: %s makes a record batch of up to %d bytes; the producer's ProducerBatchMaxBytes is %d", ErrRecordTooLarge, why, batchBytes, limit)
	}
	topicMax, err := TopicMaxMessageBytes(ctx, cl, topic)
	if err != nil {
		return err
	}
	// The broker counts the batch 4 bytes smaller than the producer does.
	if broker := batchBytes - 4; broker > topicMax {
		return fmt.Errorf("%w: %s makes a record batch of up to %d bytes; topic %s has max.message.bytes %d", ErrRecordTooLarge, why, broker, topic, topicMax)
	}
	return nil
}

// producerBatchMaxBytes is the client's ProducerBatchMaxBytes for topic
// (franz-go's default 1,000,012 unless set).
func producerBatchMaxBytes(cl *kgo.Client, topic string) int {
	if fn, ok := cl.OptValue(kgo.ProducerBatchMaxBytesFn).(func(string) int32); ok {
		return int(fn(topic))
	}
	return 1000012
}
