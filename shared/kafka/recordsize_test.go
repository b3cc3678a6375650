package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
)

// A topic the answering broker does not know yet (just created elsewhere;
// seen on a loaded three-broker cluster) is waited for, within a bound; a
// topic that never appears is reported, naming it, once the bound passed.
func TestTopicMaxMessageBytesWaitsForATopicTheBrokerDoesNotKnowYet(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	defer kafka.SetOnUnknownTopic(nil)

	t.Run("a topic created after the first answer is read once it appears", func(t *testing.T) {
		topic := fmt.Sprintf("test.appears.%d", time.Now().UnixNano())
		var created error
		unknown := 0
		kafka.SetOnUnknownTopic(func() {
			if unknown++; unknown == 1 {
				_, created = kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic)
			}
		})
		n, err := kafka.TopicMaxMessageBytes(ctx, cl, topic)
		if created != nil {
			t.Fatalf("creating %s: %v", topic, created)
		}
		if unknown == 0 {
			t.Fatal("the broker knew the topic at once: the case was not exercised")
		}
		if err != nil || n <= 0 {
			t.Fatalf("TopicMaxMessageBytes = %d, %v; want the topic's max.message.bytes", n, err)
		}
	})

	t.Run("a topic that never appears is reported after the bound", func(t *testing.T) {
		defer kafka.SetTopicAppearWait(300 * time.Millisecond)()
		kafka.SetOnUnknownTopic(nil)
		topic := fmt.Sprintf("test.never.%d", time.Now().UnixNano())
		_, err := kafka.TopicMaxMessageBytes(ctx, cl, topic)
		if !errors.Is(err, kerr.UnknownTopicOrPartition) || !strings.Contains(err.Error(), topic) {
			t.Fatalf("err = %v, want UNKNOWN_TOPIC_OR_PARTITION naming %s", err, topic)
		}
	})
}
