package faults_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/seal"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// growWait bounds each step of the growth test. It is shorter than meshd's
// stall fallback (StallAfter 60 s, heartbeats every 30 s), so only following
// the new partition count passes it, never the fallback.
const growWait = 30 * time.Second

// growLoad is how many messages each recipient handles before the growth
// (and twice as many more after bob's move).
const growLoad = 20

// TestGrowingTheTopicUnderLoadLosesAndReordersNothing is item 3: the inbox
// topic grows from 12 to 24 partitions while alice sends to bob and carol
// through the real API, the real dispatcher and a real meshd each. Under
// the master key picked here bob's routing id hashes to another partition
// of 24 and carol's to the same. The dispatcher's producer refreshes its
// metadata every 500 ms and meshd checks the count every 200 ms (every 30 s
// by default). A growth needs no replicas: this runs on the single broker,
// in seconds, without MESH_FAULTS.
func TestGrowingTheTopicUnderLoadLosesAndReordersNothing(t *testing.T) {
	const from, to = 12, 24
	master, sealer := growKey(t, from, to)
	dlog := &testenv.Buffer{}
	st := localstacktest.Start(t, localstacktest.Options{Kafka: true, Partitions: from,
		Env: map[string]string{"MESH_INBOX_MASTER_KEY": master}, Log: slog.New(slog.NewJSONHandler(dlog, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prod, err := kafka.NewProducer(ctx, kafka.Options{Brokers: st.Brokers}, st.Topic,
		kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	d := st.Dispatcher
	d.Publisher, d.Metrics = dispatch.KafkaPublisher{Client: prod}, &metrics.Sink{W: io.Discard}

	keys := st.Agents(t, append([]string{"alice"}, recipients...)...)
	logs, track := map[string]*testenv.Buffer{}, map[string]*tracker{}
	dispDone := make(chan error, 1)
	go func() { dispDone <- d.Run(ctx, time.Hour) }()
	t.Cleanup(func() { cancel(); <-dispDone })
	for _, r := range recipients {
		st.Befriend(t, "alice", r)
		logs[r], track[r] = &testenv.Buffer{}, newTracker()
		done := make(chan error, 1)
		go func() {
			done <- meshd.Run(ctx, meshd.Config{API: meshclient.New(st.URL, keys[r]), StateDir: filepath.Join(t.TempDir(), r),
				Mode: meshd.ModeKafka, Log: slog.New(slog.NewJSONHandler(logs[r], nil)), Handler: meshd.HandlerFunc(track[r].handle),
				PartitionCheckEvery: 200 * time.Millisecond,
				// The count is read through the consumer's client, which
				// answers from metadata up to MetadataMinAge (5 s) old.
				KafkaOpts: []kgo.Opt{kgo.MetadataMinAge(100 * time.Millisecond)}})
		}()
		t.Cleanup(func() { cancel(); <-done })
		logs[r].WaitLine(t, growWait, "consuming the agent's own partition", fmt.Sprintf(`"partitions":%d`, from))
	}
	send := startSender(t, meshclient.New(st.URL, keys["alice"]), track)
	// Load on the old partitions first, and on the new ones after the move.
	handled := func(t *testing.T, n int, when string) {
		t.Helper()
		for _, r := range recipients {
			tr := track[r]
			if err := tr.wait(growWait, fmt.Sprintf("%d messages handled %s", n, when), func() bool { return len(tr.handled) >= n }); err != nil {
				t.Fatalf("%s: %v\ndispatcher log:\n%s\nmeshd log:\n%s", r, err, tail(dlog.String(), 20), tail(logs[r].String(), 20))
			}
		}
	}
	handled(t, growLoad, "before the growth")

	res, err := kadm.NewClient(prod).UpdatePartitions(ctx, to, st.Topic)
	if err == nil {
		err = res[st.Topic].Err
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Run("bob's meshd follows his routing id to its new partition", func(t *testing.T) {
		part := kafka.PartitionFor(sealer.RoutingID("bob"), to)
		logs["bob"].WaitLine(t, growWait, "consuming the agent's own partition", fmt.Sprintf(`"partition":%d,`, part), fmt.Sprintf(`"partitions":%d`, to))
		logs["bob"].WaitLine(t, growWait, "moved to the agent's new partition")
	})
	t.Run("carol's meshd stays on her partition", func(t *testing.T) {
		logs["carol"].WaitLine(t, growWait, "the agent's partition did not", fmt.Sprintf(`"partitions":%d`, to))
	})
	t.Run("a message sent after the move reaches every recipient through Kafka", func(t *testing.T) {
		// bob's inbox catch-up at the move is over: a later send reaches
		// him only if the dispatcher produces to his new partition (the
		// stall fallback is slower than growWait).
		moved := time.Now()
		for _, r := range recipients {
			if _, err := track[r].firstAfter(moved, growWait); err != nil {
				t.Errorf("%s: %v\n%s", r, err, tail(logs[r].String(), 20))
			}
		}
		handled(t, 3*growLoad, "after the move")
	})
	sent, failed := send.stop()
	t.Run("every message is handled once, in order, with seq gapless", func(t *testing.T) {
		for _, r := range recipients {
			if err := track[r].waitAll(sent[r], growWait); err != nil {
				t.Errorf("%s: %v", r, err)
			}
			c := track[r].counts(sent[r])
			t.Logf("%s: sent=%d handled=%d lost=%d reordered=%d duplicates=%d (refused sends: %d)", r, c.sent, c.handled, c.lost, c.reordered, c.duplicates, failed)
			if c.lost != 0 || c.reordered != 0 || c.duplicates != 0 || c.sent == 0 {
				t.Errorf("%s broke a guarantee: %+v\n%s", r, c, tail(logs[r].String(), 20))
			}
		}
	})
}

// growKey returns an inbox master key (base64, as MESH_INBOX_MASTER_KEY)
// under which bob's routing id hashes to another partition when the topic
// grows from n to m partitions and carol's to the same one.
func growKey(t *testing.T, n, m int) (string, *seal.Sealer) {
	moves := func(s *seal.Sealer, agent string) bool {
		rid := s.RoutingID(agent)
		return kafka.PartitionFor(rid, n) != kafka.PartitionFor(rid, m)
	}
	for {
		key := make([]byte, seal.KeySize)
		_, _ = rand.Read(key)
		s, err := seal.New(key)
		if err != nil {
			t.Fatal(err)
		}
		if moves(s, "bob") && !moves(s, "carol") {
			return base64.StdEncoding.EncodeToString(key), s
		}
	}
}
