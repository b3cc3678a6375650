package meshd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/backoff"
	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// kafkaTarget is where the agent's partition lives.
type kafkaTarget struct {
	brokers []string
	topic   string
	opts    []kgo.Opt
}

// kafkaTarget returns the brokers and topic to consume, or nil when the
// mesh announced none (or the mode is poll).
func (r *runner) kafkaTarget(ctx context.Context, tok meshclient.Token) (*kafkaTarget, error) {
	if r.cfg.Mode == ModePoll {
		return nil, nil
	}
	t := &kafkaTarget{brokers: tok.Kafka.Brokers, topic: tok.Kafka.Topic}
	if len(r.cfg.KafkaBrokers) > 0 {
		t.brokers = r.cfg.KafkaBrokers
	}
	if r.cfg.KafkaTopic != "" {
		t.topic = r.cfg.KafkaTopic
	}
	if len(t.brokers) == 0 || t.topic == "" {
		if r.cfg.Mode == ModeKafka {
			return nil, errors.New("meshd: mode kafka but the mesh gave no Kafka brokers or topic")
		}
		r.log.Info("no Kafka brokers known; delivering through the inbox API (poll mode)")
		return nil, nil
	}
	var err error
	t.opts, err = kafka.Options{Brokers: t.brokers, Auth: tok.Kafka.Auth}.ClientOpts(ctx)
	return t, err
}

// chooseMode returns a consumer on the agent's partition (kafka) or nil
// (poll). Kafka mode waits for the brokers; auto mode polls when they do not
// answer within ProbeTimeout.
func (r *runner) chooseMode(ctx context.Context, t *kafkaTarget) (*kgo.Client, int32, error) {
	if t == nil {
		r.setMode(ModePoll)
		return nil, 0, nil
	}
	for attempt := 1; ; attempt++ {
		cl, part, err := r.openConsumer(ctx, t)
		if err == nil || ctx.Err() != nil {
			return cl, part, nil
		}
		if r.cfg.Mode == ModeAuto {
			r.log.Warn("Kafka unreachable; delivering through the inbox API (poll mode) and probing Kafka", "brokers", t.brokers, "probe_every", r.cfg.ProbeEvery.String(), "err", err)
			r.setMode(ModePoll)
			return nil, 0, nil
		}
		r.log.Warn("Kafka unreachable; retrying", "brokers", t.brokers, "err", err)
		if !r.sleep(ctx, attempt) {
			return nil, 0, nil
		}
	}
}

// openConsumer probes the brokers and opens a consumer on the agent's
// partition at the position matching the handled seq.
func (r *runner) openConsumer(ctx context.Context, t *kafkaTarget) (*kgo.Client, int32, error) {
	n, err := probe(ctx, t.opts, t.topic, r.cfg.ProbeTimeout)
	if err != nil {
		return nil, 0, err
	}
	part := kafka.PartitionFor(r.routingID, int(n))
	cl, err := r.consumer(ctx, t.opts, t.topic, part)
	if err != nil {
		return nil, 0, err
	}
	r.watch.count, r.watch.next, r.watch.moving = n, r.cfg.Clock().Add(r.cfg.PartitionCheckEvery), false
	r.setMode(ModeKafka)
	r.log.Info("consuming the agent's own partition", "brokers", t.brokers, "topic", t.topic, "partition", part, "partitions", n)
	return cl, part, nil
}

// errTopicRecreated ends a consumer whose topic was recreated under its
// name: deliverLoop opens a new one.
var errTopicRecreated = errors.New("meshd: the Kafka topic was recreated")

// errChannelBack ends poll mode: auto mode found Kafka (or the push
// channel) reachable again.
var errChannelBack = errors.New("meshd: the delivery channel is reachable again")

// probeUntilReachable probes the brokers every ProbeEvery until one answers
// (the returned channel closes) or ctx ends.
func (r *runner) probeUntilReachable(ctx context.Context, t *kafkaTarget) <-chan struct{} {
	back := make(chan struct{})
	go func() {
		for {
			if !backoff.Wait(ctx, r.cfg.ProbeEvery) {
				return
			}
			if _, err := probe(ctx, t.opts, t.topic, r.cfg.ProbeTimeout); err == nil {
				close(back)
				return
			}
		}
	}()
	return back
}

// probe returns the topic's partition count if the brokers answer in time.
func probe(ctx context.Context, opts []kgo.Opt, topic string, timeout time.Duration) (int32, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		return 0, err
	}
	return kafka.Partitions(pctx, cl, topic)
}

// clockSlack is how far the clocks of the API's writers and of the
// dispatcher may disagree. A record of a later event than the handled one
// was produced after that event committed, so its timestamp is no earlier
// than the handled event's occurred_at minus this slack.
const clockSlack = 5 * time.Minute

// startOffset is where consuming resumes: the later of the record after the
// last consumed one and the first record no older than the handled event's
// occurred_at (minus clockSlack). The second matters after delivery through
// the inbox API (poll mode, a restart without an offset): without it the
// partition would be read from the start of retention. Both are lower
// bounds of the next unhandled record, so nothing is skipped; what is read
// twice is dropped by seq.
func (r *runner) startOffset(ctx context.Context, opts []kgo.Opt, topic string, part int32) kgo.Offset {
	from := int64(-1)
	if r.state.Offset >= 0 && r.state.Topic == topic && r.state.Partition == part {
		from = r.state.Offset + 1
	} else if r.state.Offset >= 0 && r.watch.moving {
		r.log.Info("the new partition is read from the handled event's time", "old_partition", r.state.Partition, "partition", part)
	} else if r.state.Offset >= 0 {
		// The topic or partition count changed: the old offset means
		// nothing here.
		r.log.Warn("Kafka position belongs to another topic or partition; resuming by time instead",
			"old_topic", r.state.Topic, "old_partition", r.state.Partition, "topic", topic, "partition", part)
	}
	if r.state.LastSeq > 0 && !r.state.LastAt.IsZero() {
		if off, err := offsetAfter(ctx, opts, topic, part, r.state.LastAt.Add(-clockSlack), r.cfg.ProbeTimeout); err != nil {
			r.log.Warn("cannot look up the Kafka offset for the handled seq; resuming from the persisted offset", "err", err)
		} else if off > from {
			from = off
		}
	}
	if from < 0 {
		return kgo.NewOffset().AtStart()
	}
	return kgo.NewOffset().At(from)
}

// offsetAfter is the offset of the first record of topic/part with a
// timestamp at or after t (the end offset when there is none).
func offsetAfter(ctx context.Context, opts []kgo.Opt, topic string, part int32, t time.Time, timeout time.Duration) (int64, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := kadm.NewClient(cl).ListOffsetsAfterMilli(lctx, t.UnixMilli(), topic)
	if err != nil {
		return 0, err
	}
	o, ok := res.Lookup(topic, part)
	if !ok {
		return 0, errors.New("no offset answer for the partition")
	}
	if o.Err != nil {
		return 0, o.Err
	}
	return o.Offset, nil
}

func (r *runner) consumer(ctx context.Context, opts []kgo.Opt, topic string, part int32) (*kgo.Client, error) {
	start := r.startOffset(ctx, opts, topic, part)
	r.state.Topic, r.state.Partition = topic, part
	r.watch.pos = start.EpochOffset().Offset // < 0: the partition's start, not known yet
	opts = append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: start}}),
		// Lost or reset positions re-read rather than skip: seq dedup makes
		// re-reading harmless, skipping would not be.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// One buffered fetch of bounded size and no fetching while it is
		// undrained: a slow handler grows lag on the broker, not memory here.
		kgo.MaxConcurrentFetches(1),
		kgo.FetchMaxBytes(4<<20),
		kgo.FetchMaxPartitionBytes(1<<20),
		kgo.FetchMaxWait(time.Second),
	)
	opts = append(opts, r.cfg.KafkaOpts...)
	return kgo.NewClient(opts...)
}

// pollRecords bounds the records taken from the consumer's buffer at once
// (when Config.Batch is not larger).
const pollRecords = 256

// kafkaLoop consumes the agent's partition, in order.
func (r *runner) kafkaLoop(ctx context.Context, cl *kgo.Client, part int32) error {
	var lastFetchWarn time.Time
	for {
		if ctx.Err() != nil {
			return errStop
		}
		if err := r.catchUpIfStalled(ctx); err != nil {
			return err
		}
		if err := r.followPartitions(ctx, cl, part); err != nil {
			return err
		}
		// A short poll so stall checks and offset flushes run while idle.
		// It takes what is buffered (one bounded fetch), not one record per
		// call: a poll per event cost as much as the rest of the event.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollRecords(pctx, max(r.cfg.Batch, pollRecords))
		cancel()
		if ctx.Err() != nil {
			return errStop
		}
		recreated := false
		fs.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			if errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.InconsistentTopicID) {
				// The topic was deleted and created again under its name (a
				// restarted local broker): this client keeps asking for the
				// old topic id and would never recover.
				recreated = true
				return
			}
			if now := r.cfg.Clock(); now.Sub(lastFetchWarn) > 30*time.Second {
				lastFetchWarn = now
				r.log.Warn("Kafka fetch error (the client retries; heartbeats catch up through the inbox API meanwhile)", "topic", topic, "partition", p, "err", err)
			}
		})
		if recreated {
			return errTopicRecreated
		}
		var recs []*kgo.Record
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Partition == part {
				recs = append(recs, rec)
				r.watch.pos = rec.Offset + 1
			}
		})
		if err := r.deliverPolled(ctx, recs); err != nil {
			return err
		}
		if r.dirty && r.cfg.Clock().Sub(r.flushed) >= r.cfg.FlushEvery {
			if err := r.persist(); err != nil {
				return err
			}
		}
	}
}

// errPartitionMoved ends a consumer whose topic grew so that the agent's
// routing id hashes to another partition, once it has finished the old one:
// deliverLoop moves to the new one (movePartition).
var errPartitionMoved = errors.New("meshd: the agent's partition moved")

// maxPartitionDrain bounds how long a consumer keeps reading its old
// partition after noticing the move: with PartitionCheckEvery (30 s) and
// ProbeTimeout (5 s) meshd is on the new partition within a minute of the
// growth. What it did not get to is read from the inbox API.
const maxPartitionDrain = 20 * time.Second

// partitionWatch is how the consumer follows a grown topic.
type partitionWatch struct {
	count int32     // the topic's partition count the consumer was opened for
	next  time.Time // the next check of the count
	pos   int64     // the next offset of the consumed partition; < 0: not known yet
	// moving: the routing id hashes to another partition now; the old one
	// is read up to drainTo (its end offset at the check) or until drainBy.
	moving  bool
	drainTo int64
	drainBy time.Time
}

// followPartitions checks the topic's partition count every
// PartitionCheckEvery. When the topic grew and the agent's routing id now
// hashes to another partition (the producer places new records there within
// kafka.MetadataMaxAge), it reads on until the old partition's end at the
// check and then returns errPartitionMoved. A failed check waits for the
// next one: the fetch errors are reported by kafkaLoop.
func (r *runner) followPartitions(ctx context.Context, cl *kgo.Client, part int32) error {
	w, topic, now := &r.watch, r.state.Topic, r.cfg.Clock()
	if !w.moving {
		if now.Before(w.next) {
			return nil
		}
		w.next = now.Add(r.cfg.PartitionCheckEvery)
		n, start, end, err := partitionOffsets(ctx, cl, topic, part, r.cfg.ProbeTimeout)
		if err != nil || n == w.count {
			return nil
		}
		to := kafka.PartitionFor(r.routingID, int(n))
		if to == part {
			r.log.Info("the Kafka topic's partition count changed; the agent's partition did not", "partition", part, "partitions", n, "was", w.count)
			w.count = n
			return nil
		}
		r.log.Info("the Kafka topic's partition count changed and the agent's routing id now hashes to another partition; finishing the old one first",
			"partition", part, "new_partition", to, "partitions", n, "was", w.count, "until_offset", end)
		w.moving, w.drainTo, w.drainBy = true, end, now.Add(maxPartitionDrain)
		if w.pos < 0 {
			w.pos = start // nothing read yet: the consumer began at the partition's start
		}
	}
	if w.pos >= w.drainTo || !now.Before(w.drainBy) {
		return errPartitionMoved
	}
	return nil
}

// partitionOffsets is topic's partition count and part's start and end
// offsets, each asked of the consumer's own client within timeout.
func partitionOffsets(ctx context.Context, cl *kgo.Client, topic string, part int32, timeout time.Duration) (n int32, start, end int64, err error) {
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(lctx, topic)
	if err != nil {
		return 0, 0, 0, err
	}
	t, ok := td[topic]
	if !ok || t.Err != nil || len(t.Partitions) == 0 {
		return 0, 0, 0, fmt.Errorf("no metadata for topic %s: %v", topic, t.Err)
	}
	offset := func(list func(context.Context, ...string) (kadm.ListedOffsets, error)) (int64, error) {
		res, err := list(lctx, topic)
		if err != nil {
			return 0, err
		}
		o, ok := res.Lookup(topic, part)
		if !ok {
			return 0, errors.New("no offset answer for the partition")
		}
		return o.Offset, o.Err
	}
	if start, err = offset(adm.ListStartOffsets); err != nil {
		return 0, 0, 0, err
	}
	if end, err = offset(adm.ListEndOffsets); err != nil {
		return 0, 0, 0, err
	}
	return int32(len(t.Partitions)), start, end, nil
}

// movePartition opens the consumer on the agent's partition of the grown
// topic (logging the usual "consuming the agent's own partition" line) and
// then delivers what the inbox API has beyond the handled seq: records the
// dispatcher put on the old partition after it was finished. Later such
// records show up as a gap on the new partition or as a stall.
func (r *runner) movePartition(ctx context.Context, t *kafkaTarget) (*kgo.Client, int32, error) {
	if err := r.persist(); err != nil {
		return nil, 0, err
	}
	cl, part, err := r.chooseMode(ctx, t)
	if err != nil || cl == nil {
		return cl, part, err
	}
	if ctx.Err() != nil {
		cl.Close()
		return nil, 0, errStop
	}
	if err := r.catchUpInbox(ctx); err != nil {
		cl.Close()
		return nil, 0, err
	}
	r.log.Info("moved to the agent's new partition; the inbox API filled in what the old one missed", "partition", part, "last_seq", r.state.LastSeq)
	return cl, part, nil
}

// deliverPolled handles the records of one poll, in order, with their
// decryption running ahead of their delivery.
func (r *runner) deliverPolled(ctx context.Context, recs []*kgo.Record) error {
	r.ahead = r.openAhead(ctx, recs)
	defer func() {
		r.ahead.close()
		r.ahead = nil
	}()
	for len(recs) > 0 {
		n, err := r.onRecords(ctx, recs)
		if err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

// opener opens the agent's records of one poll ahead of their delivery, in
// a goroutine: their decryption (JSON, base64, AES-GCM) then overlaps the
// fdatasync of the marks before them instead of adding to each event. It
// opens with the keys the token held at the poll and keeps only what
// opened: anything else is opened again in line by runner.open, which
// knows how to refresh the token for a newer epoch.
type opener struct {
	out  chan openedRecord // in the records' order
	got  map[int64]openedRecord
	stop chan struct{}
}

type openedRecord struct {
	offset int64
	env    mesh.Envelope
	ok     bool
}

// openAhead starts opening this agent's records of recs; nil when there is
// nothing to gain (fewer than two records) or no keys to open with.
func (r *runner) openAhead(ctx context.Context, recs []*kgo.Record) *opener {
	if len(recs) < 2 {
		return nil
	}
	keys, _, err := r.inboxKeys(ctx, false)
	if err != nil {
		return nil
	}
	o := &opener{out: make(chan openedRecord, len(recs)), got: make(map[int64]openedRecord, len(recs)), stop: make(chan struct{})}
	routingID := r.routingID
	go func() {
		defer close(o.out)
		for _, rec := range recs {
			if string(rec.Key) != routingID {
				continue
			}
			select {
			case <-o.stop:
				return
			default:
			}
			env, err := seal.OpenEvent(keys, routingID, rec.Value)
			o.out <- openedRecord{offset: rec.Offset, env: env, ok: err == nil}
		}
	}()
	return o
}

// take is rec's envelope if it was opened ahead (waiting for its turn).
func (o *opener) take(rec *kgo.Record) (mesh.Envelope, bool) {
	if o == nil {
		return mesh.Envelope{}, false
	}
	for {
		if g, ok := o.got[rec.Offset]; ok {
			return g.env, g.ok
		}
		g, more := <-o.out
		if !more {
			return mesh.Envelope{}, false
		}
		o.got[g.offset] = g
	}
}

// close ends the opening (early on a stop or an error) and waits for the
// goroutine, so none outlives its poll.
func (o *opener) close() {
	if o == nil {
		return
	}
	close(o.stop)
	for range o.out {
	}
}

// openRecord opens a Kafka record of this agent: from the opener when it
// got there first, else in line.
func (r *runner) openRecord(ctx context.Context, rec *kgo.Record) (mesh.Envelope, error) {
	if env, ok := r.ahead.take(rec); ok {
		return env, nil
	}
	return r.open(ctx, rec.Value)
}

// onRecords handles the first of recs, or, with batches on, the run of
// ready events at their head as one batch; it returns how many records it
// consumed.
func (r *runner) onRecords(ctx context.Context, recs []*kgo.Record) (int, error) {
	bh, ok := r.batchHandler()
	if !ok || len(recs) < 2 {
		return 1, r.onRecord(ctx, recs[0])
	}
	envs, offsets, n := r.kafkaBatch(ctx, recs)
	if len(envs) < 2 {
		// Nothing to batch: the head record takes the usual path (it is
		// opened again; this is rare, at a batch's edge).
		return 1, r.onRecord(ctx, recs[0])
	}
	return n, r.deliverBatch(ctx, bh, envs, offsets)
}

// kafkaBatch collects the events at the head of recs that can run as one
// batch: this agent's records that open, in seq order from the next
// unhandled one without a gap, up to Config.Batch events and MaxBatchBytes
// of stdin. Other agents' records between them are consumed with them. It
// stops at the first record that needs the usual path (a repeat, a gap, a
// record that does not open, a placeholder) and returns how many records
// the batch spans, up to its last event.
func (r *runner) kafkaBatch(ctx context.Context, recs []*kgo.Record) (envs []mesh.Envelope, offsets []int64, n int) {
	size := 0
	for i, rec := range recs {
		if len(envs) == r.cfg.Batch {
			break
		}
		if string(rec.Key) != r.routingID {
			continue
		}
		env, err := r.openRecord(ctx, rec)
		if err != nil || env.To != r.agentID || env.Seq != r.state.LastSeq+1+int64(len(envs)) || !batchable(env) {
			break
		}
		line, err := BatchLine(env)
		if err != nil || (len(envs) > 0 && size+len(line) > MaxBatchBytes) {
			break
		}
		size += len(line)
		envs, offsets, n = append(envs, env), append(offsets, rec.Offset), i+1
	}
	return envs, offsets, n
}

// onRecord handles one Kafka record: skip what is not ours or already
// handled, open it, fill a gap from the inbox API, deliver. A record of
// ours that does not open is replaced by the inbox API's copy.
func (r *runner) onRecord(ctx context.Context, rec *kgo.Record) error {
	skip := func() error {
		r.state.Offset = rec.Offset
		r.dirty = true
		return nil
	}
	if string(rec.Key) != r.routingID {
		return skip() // another agent's mail on the shared partition
	}
	env, err := r.openRecord(ctx, rec)
	if err == nil && env.To != r.agentID {
		err = fmt.Errorf("the sealed event names recipient %q", env.To)
	}
	if err != nil {
		if ctx.Err() != nil {
			return errStop
		}
		r.log.Info("cannot open a Kafka record of this agent; reading the next event from the inbox API", "offset", rec.Offset, "reason", err)
		return r.fromInbox(ctx, rec.Offset)
	}
	// A duplicate (dispatcher retry), a re-read, or what a gap's catch-up
	// delivered already is skipped.
	if delivered, err := r.deliverNext(ctx, env, rec.Offset, "Kafka"); err != nil || delivered {
		return err
	}
	return skip()
}

// deliverNext delivers env, an event of the agent's stream (Kafka or push),
// in seq order: a seq already handled is a repeat and not delivered
// (false); one past the next is preceded by the missing events, fetched
// from the inbox API. offset is the Kafka offset marked with it (-1: none).
func (r *runner) deliverNext(ctx context.Context, env mesh.Envelope, offset int64, stream string) (delivered bool, err error) {
	if env.Seq <= r.state.LastSeq {
		return false, nil
	}
	if env.Seq > r.state.LastSeq+1 {
		r.log.Info("gap in the "+stream+" stream; fetching the missing events from the inbox API", "have", r.state.LastSeq, "got", env.Seq)
		if err := r.catchUp(ctx, env.Seq-1); err != nil {
			return false, err
		}
		if env.Seq <= r.state.LastSeq {
			return false, nil
		}
	}
	return true, r.deliver(ctx, env, offset)
}
