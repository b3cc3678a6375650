package faults_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestTheInboxTopicIsCreatedAsOnMSK: the topic the migrate function's code
// path (kafka.EnsureTopic) creates on a cluster of three is replicated three
// times, with min.insync.replicas 2 set on the topic itself (a broker
// default would not follow the topic to MSK).
func TestTheInboxTopicIsCreatedAsOnMSK(t *testing.T) {
	c := startCluster(t)
	m := startMesh(t, c)
	m.send.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := c.partitions(m.topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("every partition has three replicas", func(t *testing.T) {
		for _, p := range ps {
			if len(p.Replicas) != 3 {
				t.Errorf("partition %d has replicas %v", p.Partition, p.Replicas)
			}
		}
	})
	t.Run("min.insync.replicas is 2 on the topic itself", func(t *testing.T) {
		rc, err := c.adm.DescribeTopicConfigs(ctx, m.topic)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := rc.On(m.topic, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range cfg.Configs {
			if kv.Key == "min.insync.replicas" {
				if kv.MaybeValue() != "2" || kv.Source != 1 /* DYNAMIC_TOPIC_CONFIG */ {
					t.Errorf("min.insync.replicas = %q from source %v, want 2 set on the topic", kv.MaybeValue(), kv.Source)
				}
				return
			}
		}
		t.Error("min.insync.replicas not described")
	})
}

// TestDeliveryGoesOnWhenThePartitionLeaderIsKilled is case (a): the leader
// of a recipient's partition is SIGKILLed while the dispatcher publishes.
func TestDeliveryGoesOnWhenThePartitionLeaderIsKilled(t *testing.T) {
	c := startCluster(t)
	m := startMesh(t, c)
	leader := c.leader(t, m.topic, m.partitionOf("bob"))
	c.kill(t, leader)
	// From the moment the process is gone (kill waits for it): a send
	// accepted before could still have been delivered by the live leader.
	killed := time.Now()
	// The controller fences a dead broker only after its session timeout;
	// until then the metadata still names it. The case is a leader's loss
	// only if another replica takes over.
	waitFor(t, settleTimeout, "another leader of bob's partition", func() bool {
		after := c.leader(t, m.topic, m.partitionOf("bob"))
		return after >= 0 && after != leader
	})
	rec := m.recovered(killed)
	t.Logf("(a) leader %d killed: delivery resumed after %v", leader, rec.Round(time.Millisecond))
	figure("- (a) leader kill: delivery resumed %.1f s after the partition leader was SIGKILLed", rec.Seconds())
	c.start(t, leader)
	m.finish("(a) leader loss", 1)
}

// TestQuorumLostThenRegained is case (b): two of three brokers killed.
// Produce fails within the publish bound, recipients back off without
// dead letters, the API keeps accepting sends; when one broker returns,
// delivery resumes.
func TestQuorumLostThenRegained(t *testing.T) {
	c := startCluster(t)
	m := startMesh(t, c)
	leader := c.leader(t, m.topic, m.partitionOf("bob"))
	var other int32
	for n := int32(1); n <= clusterNodes; n++ {
		if n != leader {
			other = n
			break
		}
	}
	lost := time.Now()
	c.kill(t, leader)
	c.kill(t, other)
	t.Run("produce fails within the publish bound", func(t *testing.T) {
		longest := m.pub.failedSince(t, lost, 2*time.Minute)
		if longest > publishTimeout+time.Second {
			t.Errorf("a publish took %v, over the bound %v", longest, publishTimeout)
		}
	})
	t.Run("recipients back off and count no attempt", func(t *testing.T) {
		waitFor(t, time.Minute, "bob's dispatch_state backed off", func() bool {
			var attempts int
			var lastErr *string
			err := m.stack.Env.DB.QueryRow("SELECT attempts, last_error FROM dispatch_state WHERE recipient = 'bob'").Scan(&attempts, &lastErr)
			if err != nil || lastErr == nil {
				return false
			}
			if attempts != 0 {
				t.Errorf("an outage counted %d attempts towards dead-lettering", attempts)
			}
			return true
		})
	})
	t.Run("the API keeps accepting sends", func(t *testing.T) {
		before := m.send.count()
		waitFor(t, time.Minute, "20 more sends accepted during the outage", func() bool { return m.send.count() >= before+20 })
	})
	back := time.Now()
	took := c.start(t, other)
	rec := m.recovered(back)
	t.Logf("(b) quorum lost (nodes %d and %d killed); node %d back in %v; delivery resumed %v after its restart began",
		leader, other, other, took.Round(time.Millisecond), rec.Round(time.Millisecond))
	figure("- (b) quorum lost: delivery resumed %.1f s after one broker was restarted (its start took %.1f s)", rec.Seconds(), took.Seconds())
	c.start(t, leader)
	m.finish("(b) quorum lost", 2)
}

// TestARollingRestartLosesNothing is case (c): every broker restarted, one
// at a time, waiting for the replicas to be in sync in between, as in an
// MSK maintenance window.
func TestARollingRestartLosesNothing(t *testing.T) {
	c := startCluster(t)
	m := startMesh(t, c)
	start := time.Now()
	for n := int32(1); n <= clusterNodes; n++ {
		c.stop(t, n)
		c.start(t, n)
		c.healthy(t, m.topic)
	}
	total := time.Since(start)
	rec := m.recovered(time.Now())
	longest := m.longestPause(start)
	t.Logf("(c) rolling restart took %v; longest pause in delivery %v", total.Round(time.Millisecond), longest.Round(time.Millisecond))
	figure("- (c) rolling restart of 3 brokers (%.0f s): longest pause in delivery %.1f s, delivery after the last restart %.1f s", total.Seconds(), longest.Seconds(), rec.Seconds())
	m.finish("(c) rolling restart", 3)
}

// TestDeliveryGoesOnWhenTheControllerFailsOver is case (d): the active
// KRaft controller is SIGKILLed (after bob's partition leadership was moved
// off it, so this is the controller's failover, not a leader's).
func TestDeliveryGoesOnWhenTheControllerFailsOver(t *testing.T) {
	c := startCluster(t)
	m := startMesh(t, c)
	ctrl := c.controller(t)
	for _, r := range recipients {
		if c.leader(t, m.topic, m.partitionOf(r)) == ctrl {
			c.moveLeader(t, m.topic, m.partitionOf(r), ctrl)
		}
	}
	c.kill(t, ctrl)
	killed := time.Now() // the process is gone: kill waits for it
	var next int32
	waitFor(t, settleTimeout, "a new active controller", func() bool {
		next = c.controller(t)
		return next != ctrl
	})
	rec := m.recovered(killed)
	t.Logf("(d) controller %d killed; node %d took over; delivery of a new send %v after the kill", ctrl, next, rec.Round(time.Millisecond))
	figure("- (d) controller failover: node %d took over from %d; a new send delivered %.1f s after the kill", next, ctrl, rec.Seconds())
	c.start(t, ctrl)
	m.finish("(d) controller failover", 1)
}

// TestMeshdFollowsItsPartitionLeaderToAnotherBroker is case (e): the leader
// of bob's partition moves to another broker (a preferred-leader election);
// meshd keeps consuming without a restart or a fallback to the inbox API.
func TestMeshdFollowsItsPartitionLeaderToAnotherBroker(t *testing.T) {
	c := startCluster(t)
	m := startMesh(t, c)
	p := m.partitionOf("bob")
	from := c.leader(t, m.topic, p)
	moved := time.Now()
	to := c.moveLeader(t, m.topic, p, from)
	rec := m.recovered(moved)
	t.Logf("(e) bob's partition %d moved from node %d to %d; delivery of a new send %v after", p, from, to, rec.Round(time.Millisecond))
	figure("- (e) partition leader moved (%d → %d): a new send delivered %.1f s after", from, to, rec.Seconds())
	m.finish("(e) leader moved", 0)
	if n := strings.Count(m.logs["bob"].String(), "consuming the agent's own partition"); n != 1 {
		t.Errorf("bob's meshd (re)started consuming %d times; it must follow the leader without a restart:\n%s", n, tail(m.logs["bob"].String(), 20))
	}
	if strings.Contains(m.logs["bob"].String(), "inbox API (poll mode)") {
		t.Errorf("bob's meshd fell back to the inbox API:\n%s", tail(m.logs["bob"].String(), 20))
	}
}
