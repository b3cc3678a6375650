package kafka_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// TestTheProducerFollowsAGrownTopicWithinAMinute: franz-go refreshes a
// producer's metadata every 5 minutes by default; the dispatcher's must
// produce by a grown topic's new partition count within 60 s, the bound
// meshd follows within too.
func TestTheProducerFollowsAGrownTopicWithinAMinute(t *testing.T) {
	cl, err := kafka.NewProducer(context.Background(), kafka.Options{Brokers: []string{"127.0.0.1:1"}}, "inbox.events")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if age, _ := cl.OptValue(kgo.MetadataMaxAge).(time.Duration); age <= 0 || age > time.Minute {
		t.Errorf("the producer's metadata max age is %v, want at most 1m0s", age)
	}
}

// TestEnsureTopicNeverShrinksOrChangesATopicAndSaysWhatItFound runs the
// migrate function's topic step (kafka.EnsureTopic) against existing topics.
func TestEnsureTopicNeverShrinksOrChangesATopicAndSaysWhatItFound(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tests := []struct {
		name       string
		partitions int32
		retention  time.Duration
		want       int32
		log        []string
	}{
		{"a topic with fewer partitions than configured is raised to the configured count", 8, time.Hour, 8,
			[]string{"inbox topic found; raised its partition count", `"partitions":4`, `"changed":"partitions 4 -> 8"`, `"min_insync_replicas":"1"`, `"replication":1`}},
		{"a topic with more partitions than configured is never shrunk", 2, time.Hour, 4,
			[]string{"never shrunk", `"partitions":4`, `"configured_partitions":2`, `"changed":"nothing"`}},
		{"a topic as configured is left alone", 4, time.Hour, 4,
			[]string{"inbox topic found; nothing changed", `"partitions":4`, `"changed":"nothing"`}},
		{"another retention is reported, not applied", 4, 2 * time.Hour, 4,
			[]string{"inbox topic found; nothing changed", `"retention_ms":"3600000"`, `"changed":"nothing"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topic := kafkatest.Topic(t, brokers, 4) // 4 partitions, retention 1 h
			logs := &testenv.Buffer{}
			n, err := kafka.EnsureTopic(ctx, cl, kafka.TopicSpec{Name: topic, Partitions: tc.partitions, Retention: tc.retention,
				Log: slog.New(slog.NewJSONHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.want {
				t.Errorf("EnsureTopic returned %d partitions, want %d", n, tc.want)
			}
			found, err := kafka.DescribeTopic(ctx, cl, topic)
			if err != nil {
				t.Fatal(err)
			}
			if found.Partitions != tc.want || found.RetentionMS != "3600000" {
				t.Errorf("the topic has %d partitions and retention.ms %s, want %d and 3600000 (unchanged)", found.Partitions, found.RetentionMS, tc.want)
			}
			logs.WaitLine(t, time.Second, tc.log...)
		})
	}
	t.Run("a missing topic is created and says with what", func(t *testing.T) {
		topic := "test.ensure." + time.Now().Format("150405.000000000")
		t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
		logs := &testenv.Buffer{}
		n, err := kafka.EnsureTopic(ctx, cl, kafka.TopicSpec{Name: topic, Partitions: 3, Retention: time.Hour,
			Log: slog.New(slog.NewJSONHandler(logs, nil))})
		if err != nil || n != 3 {
			t.Fatalf("EnsureTopic = %d, %v; want 3 partitions", n, err)
		}
		logs.WaitLine(t, time.Second, "inbox topic created", `"partitions":3`, `"replication":1`, `"min_insync_replicas":"1"`, `"retention_ms":"3600000"`)
	})
}
