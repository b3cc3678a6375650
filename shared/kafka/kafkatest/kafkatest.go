// Package kafkatest gives tests a fresh topic on the real Kafka broker named
// by KAFKA_BROKERS (default: the local broker of infra/kafka.sh).
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// DefaultBrokers is the broker of infra/kafka.sh.
const DefaultBrokers = "127.0.0.1:29092"

// BrokerList is the brokers tests dial: KAFKA_BROKERS, else infra/kafka.sh's
// broker on MESH_KAFKA_PORT (the port the script starts it on), else
// DefaultBrokers.
func BrokerList() []string {
	b := os.Getenv("KAFKA_BROKERS")
	if p := os.Getenv("MESH_KAFKA_PORT"); b == "" && p != "" {
		b = "127.0.0.1:" + p
	}
	if b == "" {
		b = DefaultBrokers
	}
	return strings.Split(b, ",")
}

// Brokers returns the brokers tests use, failing (CI) or skipping the test
// when none answers.
func Brokers(t testing.TB) []string {
	t.Helper()
	brokers := BrokerList()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DialTimeout(2*time.Second))
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = cl.Ping(ctx)
		cancel()
		cl.Close()
	}
	if err != nil {
		testenv.Missing(t, "Kafka at "+strings.Join(brokers, ","), err)
	}
	return brokers
}

// Topic creates a uniquely named topic with n partitions (the project's own
// settings, via kafka.EnsureTopic) and deletes it when the test ends.
func Topic(t testing.TB, brokers []string, partitions int32) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	// Topic names allow only [a-zA-Z0-9._-] and 249 characters.
	clean := strings.Map(func(r rune) rune {
		if r < 128 && (r == '.' || r == '-' || r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return r
		}
		return '_'
	}, t.Name())
	if len(clean) > 100 {
		clean = clean[:100]
	}
	name := "test." + clean + "." + hex.EncodeToString(b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kafka.EnsureTopic(ctx, cl, kafka.TopicSpec{Name: name, Partitions: partitions, Retention: time.Hour}); err != nil {
		cl.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), name)
		cl.Close()
	})
	return name
}

// ReadTopic consumes every partition of topic from the start until it has
// read n records or the timeout passes.
func ReadTopic(t testing.TB, brokers []string, topic string, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}
