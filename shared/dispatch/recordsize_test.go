package dispatch_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/seal"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// worstID is an id at its column's 64 characters, each escaped by JSON to
// six bytes: more than any id the API accepts.
var worstID = strings.Repeat("<", 64)

// partsOf is stored parts (what validateParts returns) of exactly n bytes.
func partsOf(n int) json.RawMessage {
	const head, tail = `[{"kind":"text","text":"`, `"}]`
	return json.RawMessage(head + strings.Repeat("x", n-len(head)-len(tail)) + tail)
}

// worstBodies are the event bodies of each kind carrying parts, with every
// other field at its limit.
func worstBodies(parts json.RawMessage) map[string]any {
	at := time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(23*3600+59*60)))
	task := tasks.TaskRef{TaskID: worstID, ContextID: worstID, GroupID: worstID, Initiator: worstID, Recipient: worstID, Status: "input-required"}
	msg := tasks.EventMessage{MessageID: worstID, From: worstID, Parts: parts, CreatedAt: at}
	return map[string]any{
		mesh.EventMessage: tasks.MessageBody{Message: msg, Task: task},
		mesh.EventStatus: tasks.StatusBody{Status: tasks.StatusChange{State: "input-required", Previous: "input-required", By: worstID,
			Reason: tasks.ReasonIdleTimeout, Message: &msg}, Task: task},
		mesh.EventArtifact: tasks.ArtifactBody{Artifact: tasks.EventArtifact{ArtifactID: worstID, Name: strings.Repeat("<", 200),
			Parts: parts, CreatedBy: worstID, CreatedAt: at}, Task: task},
	}
}

// worstEnvelope is an event of typ with body whose every other field is at
// its column's limit.
func worstEnvelope(t *testing.T, typ string, body any) mesh.Envelope {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return mesh.Envelope{EventID: strings.Repeat("<", 40), Seq: 1 << 62, Type: typ, To: "bob", From: worstID,
		TaskID: worstID, ContextID: worstID, GroupID: worstID, MessageID: worstID,
		OccurredAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(23*3600+59*60))),
		KeyEpoch:   1 << 30, TraceID: worstID, Body: b}
}

// sealWorst seals body as the dispatcher does, in worstEnvelope, and
// returns the record.
func sealWorst(t *testing.T, typ string, body any) *kgo.Record {
	t.Helper()
	key := make([]byte, seal.KeySize)
	_, _ = rand.Read(key)
	s, err := seal.New(key)
	if err != nil {
		t.Fatal(err)
	}
	k, v, err := s.SealEvent(worstEnvelope(t, typ, body))
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Key: k, Value: v}
}

// overhead is what the worst body of each kind adds to its parts.
func bodyOverhead(t *testing.T) int {
	worst := 0
	for typ, body := range worstBodies(partsOf(100)) {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(b) - 100; n > worst {
			worst = n
		}
		if len(b)-100 > dispatch.MaxBodyOverhead {
			t.Errorf("a %s body adds %d bytes to its parts, more than MaxBodyOverhead %d", typ, len(b)-100, dispatch.MaxBodyOverhead)
		}
	}
	return worst
}

func TestMaxRecordBytesBoundsTheRecordOfTheLargestMessage(t *testing.T) {
	over := bodyOverhead(t)
	// Parts that leave the sealed event one byte past a bucket: a bound
	// that undercounts anything (fields, body, seal, base64, batch) is
	// below the real record here.
	edge := func(bucket int) int {
		probe := sealPlainLen(t, partsOf(1000)) - 1000
		return bucket - 28 - probe + 1
	}
	cases := []struct {
		name string
		max  int
	}{
		{"the default limit of 256 KiB", tasks.DefaultMaxMessageBytes},
		{"a small limit of 4 KiB", 4 << 10},
		{"a limit whose largest message just spills into the 512 KiB bucket", edge(256 << 10)},
		{"a limit whose largest message just spills into the 64 KiB bucket", edge(32 << 10)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bound := dispatch.MaxRecordBytes(c.max)
			for typ, body := range worstBodies(partsOf(c.max)) {
				rec := sealWorst(t, typ, body)
				got := kafka.BatchBytes(len(rec.Key), len(rec.Value))
				if got > bound {
					t.Errorf("a %s event with %d bytes of parts makes a %d-byte batch, over MaxRecordBytes %d", typ, c.max, got, bound)
				}
			}
		})
	}
	t.Logf("worst body overhead %d bytes (bound %d)", over, dispatch.MaxBodyOverhead)
}

// sealPlainLen is the longest sealed event's plaintext (before padding)
// of the worst bodies with parts.
func sealPlainLen(t *testing.T, parts json.RawMessage) int {
	n := 0
	for typ, body := range worstBodies(parts) {
		env := worstEnvelope(t, typ, body)
		env.V = seal.RecordVersion
		b, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		n = max(n, len(b))
	}
	return n
}

// setMaxMessageBytes sets the topic's own max.message.bytes.
func setMaxMessageBytes(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v := strconv.Itoa(n)
	res, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, topic)
	if err == nil {
		_, err = res.On(topic, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the broker reports it: the check reads it back.
	for {
		got, err := kafka.TopicMaxMessageBytes(ctx, cl, topic)
		if err == nil && got == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s: max.message.bytes is %d (%v), want %d", topic, got, err, n)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestTheBrokerAcceptsTheLargestRecordAtTheBoundAndNotBelowIt(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	const maxMsg = 4 << 10
	rec := sealWorst(t, mesh.EventArtifact, worstBodies(partsOf(maxMsg))[mesh.EventArtifact])
	rec.Topic = topic
	real := kafka.BatchBytes(len(rec.Key), len(rec.Value))
	cases := []struct {
		name     string
		topicMax int
		refused  bool
	}{
		{"a topic limit one byte under the record's batch refuses it", real - 4 - 1, true},
		{"a topic limit equal to the record's batch takes it", real - 4, false},
		{"a topic limit at MaxRecordBytes takes it", dispatch.MaxRecordBytes(maxMsg) - 4, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setMaxMessageBytes(t, brokers, topic, c.topicMax)
			// Uncompressed, as the dispatcher's producer sends sealed
			// (incompressible) records; a client and a record per case.
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(1))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value}).FirstErr()
			if refused := errors.Is(err, kerr.MessageTooLarge); refused != c.refused || (err != nil && !refused) {
				t.Fatalf("produce with max.message.bytes %d (batch %d): err %v, want refused=%v", c.topicMax, real, err, c.refused)
			}
		})
	}
}

func TestTheDispatcherRefusesAMaxMessageSizeWhoseRecordCouldNotFit(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	key := make([]byte, seal.KeySize)
	_, _ = rand.Read(key)
	start := func(maxMsg int) error {
		cfg, err := config.Load(func(k string) string {
			return map[string]string{
				"KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_TOPIC": topic,
				"MESH_INBOX_MASTER_KEY":  base64.StdEncoding.EncodeToString(key),
				"MESH_MAX_MESSAGE_BYTES": strconv.Itoa(maxMsg),
			}[k]
		})
		if err != nil {
			t.Fatal(err)
		}
		d, err := dispatch.NewKafkaDispatcher(context.Background(), new(mysql.DB), cfg, nil)
		if err == nil {
			d.Publisher.(dispatch.KafkaPublisher).Client.Close()
		}
		return err
	}
	const maxMsg = 256 << 10
	need := dispatch.MaxRecordBytes(maxMsg) - 4 // as the broker counts
	big := 600 << 10                            // its sealed event takes the 1 MiB bucket
	cases := []struct {
		name     string
		topicMax int
		maxMsg   int
		refused  []string // what the error names; none: the dispatcher starts
	}{
		{"a topic that holds the largest record exactly starts", need, maxMsg, nil},
		{"a topic one byte too small is refused, naming both numbers", need - 1, maxMsg,
			[]string{"MESH_MAX_MESSAGE_BYTES=262144", strconv.Itoa(need), "max.message.bytes " + strconv.Itoa(need-1)}},
		{"a limit past the producer's batch size is refused, naming both numbers", 8 << 20, big,
			[]string{fmt.Sprintf("MESH_MAX_MESSAGE_BYTES=%d", big), strconv.Itoa(dispatch.MaxRecordBytes(big)), "ProducerBatchMaxBytes is 1000012"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setMaxMessageBytes(t, brokers, topic, c.topicMax)
			err := start(c.maxMsg)
			if c.refused == nil {
				if err != nil {
					t.Fatalf("the dispatcher did not start: %v", err)
				}
				return
			}
			if !errors.Is(err, kafka.ErrRecordTooLarge) {
				t.Fatalf("start: err %v, want ErrRecordTooLarge", err)
			}
			for _, s := range c.refused {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error %q does not name %q", err, s)
				}
			}
		})
	}
}
