// Package faults_test proves the delivery guarantees on a replicated Kafka
// (issue 19): a three-node KRaft cluster of infra/kafka.sh (replication 3,
// min.insync.replicas 2 on the topic, as on MSK) under load, through the real
// API, the real dispatcher and a real meshd, while brokers are killed,
// restarted and moved. The cluster runs on ports of its own, beside the
// single broker the other tests use. The tests start it themselves and stop
// it when they end; they run with MESH_FAULTS=1 (make faults), since three
// JVMs and their elections do not belong in every go test ./... .
package faults_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/agentmesh/agentmesh/shared/samtemplate"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// The cluster's ports: below the ephemeral range (32768+), apart from the
// single broker's 29092/29093.
const (
	clusterPort           = 29392
	clusterControllerPort = 29492
	clusterNodes          = 3
)

// Bounds of the cluster's own operations: a JVM start on a loaded 2-core
// machine, an election, a reassignment.
const (
	scriptTimeout = 3 * time.Minute
	settleTimeout = 90 * time.Second
)

var (
	clusterOnce sync.Once
	theCluster  *cluster
	clusterErr  error
)

// figures are the measured times and rates, printed (and written to
// MESH_FAULTS_REPORT) when the run ends.
var figures = struct {
	sync.Mutex
	lines []string
}{}

func figure(format string, a ...any) {
	figures.Lock()
	defer figures.Unlock()
	figures.lines = append(figures.lines, fmt.Sprintf(format, a...))
}

func TestMain(m *testing.M) {
	code := m.Run()
	if theCluster != nil && os.Getenv("MESH_FAULTS_KEEP") == "" {
		if out, err := theCluster.script(context.Background(), "down"); err != nil {
			fmt.Fprintf(os.Stderr, "faults: stopping the cluster: %v\n%s", err, out)
			code = 1
		}
	}
	if len(figures.lines) > 0 {
		report := "# Faults on a three-broker cluster (make faults)\n\n" + strings.Join(figures.lines, "\n") + "\n"
		fmt.Print("\n" + report)
		if p := os.Getenv("MESH_FAULTS_REPORT"); p != "" {
			if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "faults: %v\n", err)
			}
		}
	}
	os.Exit(code)
}

// cluster is the three-node cluster of infra/kafka.sh and an admin client on it.
type cluster struct {
	root    string
	brokers []string
	adm     *kadm.Client
	cl      *kgo.Client
}

// startCluster brings the cluster up once per run (up is idempotent: a
// node that is down is started, the others are left alone).
func startCluster(t *testing.T) *cluster {
	t.Helper()
	if os.Getenv("MESH_FAULTS") == "" {
		t.Skip("the cluster fault tests run with MESH_FAULTS=1: make faults")
	}
	clusterOnce.Do(func() {
		root, err := samtemplate.FindRepoRoot(".")
		if err != nil {
			clusterErr = err
			return
		}
		c := &cluster{root: root}
		for n := 1; n <= clusterNodes; n++ {
			c.brokers = append(c.brokers, "127.0.0.1:"+strconv.Itoa(clusterPort+n-1))
		}
		theCluster = c // from here on TestMain stops it
		if _, err := exec.LookPath("java"); err != nil {
			clusterErr = err
			return
		}
		if out, err := c.script(context.Background(), "up"); err != nil {
			clusterErr = fmt.Errorf("%v\n%s", err, out)
			return
		}
		if c.cl, err = kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.DialTimeout(2*time.Second),
			kgo.RetryTimeout(5*time.Second)); err != nil {
			clusterErr = err
			return
		}
		c.adm = kadm.NewClient(c.cl)
	})
	if clusterErr != nil {
		testenv.Missing(t, "a three-node Kafka cluster (infra/kafka.sh with MESH_KAFKA_NODES=3)", clusterErr)
	}
	return theCluster
}

// script runs infra/kafka.sh against the cluster (bounded).
func (c *cluster) script(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.root, "infra", "kafka.sh"), args...)
	cmd.Env = append(os.Environ(), "MESH_KAFKA_NODES="+strconv.Itoa(clusterNodes),
		"MESH_KAFKA_PORT="+strconv.Itoa(clusterPort), "MESH_KAFKA_CONTROLLER_PORT="+strconv.Itoa(clusterControllerPort))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *cluster) must(t *testing.T, args ...string) time.Duration {
	t.Helper()
	start := time.Now()
	out, err := c.script(context.Background(), args...)
	if err != nil {
		t.Fatalf("infra/kafka.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return time.Since(start)
}

// kill SIGKILLs node n; stop stops it cleanly (controlled shutdown); start
// starts it and returns once it has rejoined.
func (c *cluster) kill(t *testing.T, n int32) { c.must(t, "stop-node", strconv.Itoa(int(n)), "--kill") }
func (c *cluster) stop(t *testing.T, n int32) { c.must(t, "stop-node", strconv.Itoa(int(n))) }
func (c *cluster) start(t *testing.T, n int32) time.Duration {
	return c.must(t, "start-node", strconv.Itoa(int(n)))
}

// healthy waits until every node runs and every partition of topic has its
// three replicas in sync: the state each case starts from, and the state a
// rolling restart waits for between two brokers, as MSK does.
func (c *cluster) healthy(t *testing.T, topic string) {
	t.Helper()
	c.must(t, "up")
	waitFor(t, settleTimeout, "all replicas of "+topic+" in sync", func() bool {
		p, err := c.partitions(topic)
		if err != nil || len(p) == 0 {
			return false
		}
		for _, d := range p {
			if d.Leader < 0 || len(d.ISR) != clusterNodes {
				return false
			}
		}
		return true
	})
}

func (c *cluster) partitions(topic string) (kadm.PartitionDetails, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	td, err := c.adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, err
	}
	d, ok := td[topic]
	if !ok || d.Err != nil {
		return nil, fmt.Errorf("topic %s: %v", topic, d.Err)
	}
	return d.Partitions, nil
}

// leader is the leader of topic's partition p (-1 when there is none).
func (c *cluster) leader(t *testing.T, topic string, p int32) int32 {
	t.Helper()
	var l int32 = -1
	waitFor(t, settleTimeout, "metadata of "+topic, func() bool {
		ps, err := c.partitions(topic)
		if err != nil {
			return false
		}
		l = ps[p].Leader
		return true
	})
	return l
}

// controller is the node id of the active KRaft controller (the leader of
// the metadata quorum).
func (c *cluster) controller(t *testing.T) int32 {
	t.Helper()
	var id int32 = -1
	waitFor(t, settleTimeout, "the active controller", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := kmsg.NewPtrDescribeQuorumRequest()
		tp := kmsg.NewDescribeQuorumRequestTopic()
		tp.Topic = "__cluster_metadata"
		pp := kmsg.NewDescribeQuorumRequestTopicPartition()
		tp.Partitions = append(tp.Partitions, pp)
		req.Topics = append(req.Topics, tp)
		resp, err := req.RequestWith(ctx, c.cl)
		if err != nil || len(resp.Topics) == 0 || len(resp.Topics[0].Partitions) == 0 {
			return false
		}
		rp := resp.Topics[0].Partitions[0]
		id = rp.LeaderID
		return rp.ErrorCode == 0 && id >= 0
	})
	return id
}

// moveLeader makes another replica (not avoid) the leader of topic's
// partition p, without moving data: the replica list is reordered and a
// preferred-leader election run, as MSK's rebalancing does. It returns
// the new leader.
func (c *cluster) moveLeader(t *testing.T, topic string, p int32, avoid int32) int32 {
	t.Helper()
	ps, err := c.partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	replicas := ps[p].Replicas
	order := make([]int32, 0, len(replicas))
	for _, r := range replicas {
		if r != avoid && len(order) == 0 {
			order = append(order, r)
		}
	}
	for _, r := range replicas {
		if r != order[0] {
			order = append(order, r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, p, order)
	resp, err := c.adm.AlterPartitionAssignments(ctx, req)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("reordering the replicas of %s/%d to %v: %v", topic, p, order, err)
	}
	// The reassignment completes at once (same replicas); the election may
	// need a retry until the controller has applied it.
	waitFor(t, settleTimeout, fmt.Sprintf("node %d leading %s/%d", order[0], topic, p), func() bool {
		if _, err := c.adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {p: {}}}); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("preferred election: %v", err)
		}
		l, err := c.partitions(topic)
		return err == nil && l[p].Leader == order[0]
	})
	return order[0]
}

// waitFor polls cond (a state of another process: the cluster's metadata)
// every 100 ms until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// median of the durations (or rates) measured.
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
