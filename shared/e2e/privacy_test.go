package e2e_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/agentmesh/agentmesh/shared/kafka"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// Agent ids long enough that none can turn up by chance in a base64 blob
// (a three-letter id would, now and then, in a few hundred records).
const (
	alice = "agent.alice-7c1f"
	bob   = "agent.bob-52ad0"
	carol = "agent.carol-e93b"
	dave  = "agent.dave-0f6e4"
	eve   = "agent.eve-onlooker"
)

// TestTheSharedTopicNamesNobody runs a mixed workload (direct messages, a
// reply, status moves, an artifact, a group fan-out) through the real stack
// and broker, then reads the whole topic as an onlooker holding nothing but
// its own API key (eve, a member of no conversation): no agent, task,
// context, group, message, event or trace id of anyone appears in any
// record key, header or value, every value is {v, key_epoch, sealed} with a
// bucket-sized sealed blob, and eve opens nothing.
func TestTheSharedTopicNamesNobody(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stack := localstacktest.Start(t, localstacktest.Options{Kafka: true, Partitions: 3})
	keys := stack.Agents(t, alice, bob, carol, dave, eve)
	stack.Befriend(t, alice, bob)
	stack.Befriend(t, bob, carol)
	var group struct {
		GroupID   string `json:"group_id"`
		ContextID string `json:"context_id"`
	}
	stack.AdminPOST(t, "/v1/admin/groups", map[string]any{"name": "planning", "owner": alice, "members": []string{bob, carol, dave}}, &group)
	api := map[string]*meshclient.Client{}
	for id, k := range keys {
		api[id] = meshclient.New(stack.URL, k)
	}

	// The workload: every event type, direct and through the group.
	text := func(s string) []mesh.Part { return []mesh.Part{{Kind: "text", Text: s}} }
	m1, err := api[alice].Send(ctx, meshclient.SendRequest{To: bob, Parts: text("the quarterly numbers are in")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api[bob].Reply(ctx, m1.TaskID, meshclient.ReplyRequest{Parts: text("thanks, reading them now")}); err != nil {
		t.Fatal(err)
	}
	if _, err := api[bob].UpdateStatus(ctx, m1.TaskID, meshclient.StatusRequest{Status: mesh.TaskWorking}); err != nil {
		t.Fatal(err)
	}
	agentPOST(ctx, t, api[bob], stack, "/v1/tasks/"+m1.TaskID+"/artifacts",
		map[string]any{"name": "summary-report", "parts": []mesh.Part{{Kind: "data", Data: json.RawMessage(`{"revenue":12}`)}}})
	if _, err := api[bob].UpdateStatus(ctx, m1.TaskID, meshclient.StatusRequest{Status: mesh.TaskCompleted,
		Message: &meshclient.StatusMessage{Parts: text("all done")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := api[bob].Send(ctx, meshclient.SendRequest{To: carol, Parts: text(strings.Repeat("a longer note ", 300))}); err != nil {
		t.Fatal(err)
	}
	agentPOST(ctx, t, api[alice], stack, "/v1/groups/"+group.GroupID+"/messages", map[string]any{"parts": text("stand-up moved to 10:00")})
	// On AWS each write records its X-Ray trace id; the local stack has
	// none, so give every event one, as X-Ray would.
	if _, err := stack.Env.DB.ExecContext(ctx, "UPDATE outbox_events SET trace_id = CONCAT('1-674e5f00-', LEFT(SHA2(event_id, 256), 24))"); err != nil {
		t.Fatal(err)
	}
	drain(ctx, t, stack)

	// Everything that names someone, as the recipients' own inboxes show it.
	secret := map[string]string{group.GroupID: "group id", group.ContextID: "group context id",
		"quarterly numbers": "message text", "summary-report": "artifact name", "a longer note": "message text"}
	for _, id := range []string{alice, bob, carol, dave, eve} {
		secret[id] = "agent id"
	}
	inboxes := map[string][]mesh.Envelope{}
	total := 0
	for _, id := range []string{alice, bob, carol, dave} {
		page, err := api[id].Inbox(ctx, 0, 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		inboxes[id] = page.Events
		total += len(page.Events)
		for _, e := range page.Events {
			for v, what := range map[string]string{e.EventID: "event id", e.TaskID: "task id", e.ContextID: "context id",
				e.MessageID: "message id", e.GroupID: "group id", e.TraceID: "trace id"} {
				if len(v) >= 8 {
					secret[v] = what
				}
			}
		}
	}
	types, traced := map[string]bool{}, 0
	for _, evs := range inboxes {
		for _, e := range evs {
			types[e.Type] = true
			if e.TraceID != "" {
				traced++
			}
		}
	}
	if traced != total {
		t.Fatalf("%d of %d events carry a trace id; the check of trace ids needs them all", traced, total)
	}
	if total != 9 || !types[mesh.EventMessage] || !types[mesh.EventStatus] || !types[mesh.EventArtifact] || len(inboxes[dave]) != 1 {
		t.Fatalf("the workload made %d events of types %v (dave: %d); want 9: messages, statuses and artifacts, and the group send", total, types, len(inboxes[dave]))
	}

	// Eve reads the whole topic with what her own token lists.
	eveTok, err := api[eve].Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recs := readAll(t, eveTok.Kafka, total)
	if len(recs) != total {
		t.Fatalf("eve read %d records, the inboxes hold %d events", len(recs), total)
	}
	eveKeys, _ := eveTok.Keys()

	t.Run("no record key, header or value holds an id of anyone", func(t *testing.T) {
		for _, r := range recs {
			for v, what := range secret {
				if bytes.Contains(r.Key, []byte(v)) || bytes.Contains(r.Value, []byte(v)) {
					t.Fatalf("record at %d/%d shows the %s %q: key %q, value of %d bytes", r.Partition, r.Offset, what, v, r.Key, len(r.Value))
				}
			}
			if len(r.Headers) != 0 {
				t.Fatalf("record at %d/%d carries headers %v", r.Partition, r.Offset, r.Headers)
			}
		}
	})
	t.Run("every value is v, key_epoch and a sealed blob of a bucket size", func(t *testing.T) {
		for _, r := range recs {
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(r.Value, &fields); err != nil || len(fields) != 3 || string(fields["v"]) != "2" || fields["key_epoch"] == nil {
				t.Fatalf("record value %s, want exactly {v: 2, key_epoch, sealed}", r.Value)
			}
			var rec seal.Record
			_ = json.Unmarshal(r.Value, &rec)
			raw, err := base64.StdEncoding.DecodeString(rec.Sealed)
			if n := len(raw); err != nil || n < seal.MinBucket || n&(n-1) != 0 {
				t.Fatalf("sealed length %d (%v) is not a bucket size", n, err)
			}
			if len(r.Key) != seal.RoutingIDLen {
				t.Fatalf("record key %q is not a routing id", r.Key)
			}
		}
	})
	t.Run("eve opens nothing, under her own routing id or the record's", func(t *testing.T) {
		for _, r := range recs {
			for _, rid := range []string{eveTok.RoutingID, string(r.Key)} {
				if env, err := seal.OpenEvent(eveKeys, rid, r.Value); err == nil {
					t.Fatalf("eve opened %+v", env)
				}
			}
		}
	})
	plainBytes, sealedBytes := 0, 0
	t.Run("each recipient opens exactly its own events, on the partition its routing id hashes to", func(t *testing.T) {
		for id, evs := range inboxes {
			tok, err := api[id].Token(ctx)
			if err != nil {
				t.Fatal(err)
			}
			k, _ := tok.Keys()
			part := kafka.PartitionFor(tok.RoutingID, 3)
			var got []string
			for _, r := range recs {
				if string(r.Key) != tok.RoutingID {
					continue
				}
				env, err := seal.OpenEvent(k, tok.RoutingID, r.Value)
				if err != nil || env.To != id || r.Partition != part {
					t.Fatalf("%s's record at %d/%d: %+v, %v (partition %d wanted)", id, r.Partition, r.Offset, env, err, part)
				}
				got = append(got, env.EventID)
				plain, _ := json.Marshal(env)
				var v seal.Record
				_ = json.Unmarshal(r.Value, &v)
				raw, _ := base64.StdEncoding.DecodeString(v.Sealed)
				plainBytes, sealedBytes = plainBytes+len(plain), sealedBytes+len(raw)
			}
			var want []string
			for _, e := range evs {
				want = append(want, e.EventID)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s opened events %v, its inbox holds %v", id, got, want)
			}
		}
		t.Logf("%d events of %d bytes of JSON sealed into %d bytes of buckets", len(recs), plainBytes, sealedBytes)
	})
}

// TestARevocationRetiresTheInboxKey: after the admin revokes one of bob's
// API keys, events written afterwards do not open with an inbox key issued
// before (not even relabelled with the old epoch), while a token issued
// afterwards opens the old and the new events.
func TestARevocationRetiresTheInboxKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stack := localstacktest.Start(t, localstacktest.Options{Kafka: true, Partitions: 3})
	keys := stack.Agents(t, alice)
	var created struct {
		KeyID  string `json:"key_id"`
		APIKey string `json:"api_key"`
	}
	stack.AdminPOST(t, "/v1/admin/agents", map[string]string{"agent_id": bob, "name": "bob"}, &created)
	stack.Befriend(t, alice, bob)
	send := func(s string) {
		t.Helper()
		if _, err := meshclient.New(stack.URL, keys[alice]).Send(ctx, meshclient.SendRequest{To: bob, Parts: []mesh.Part{{Kind: "text", Text: s}}}); err != nil {
			t.Fatal(err)
		}
		drain(ctx, t, stack)
	}

	before, err := meshclient.New(stack.URL, created.APIKey).Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send("before the revocation")
	var second struct {
		APIKey string `json:"api_key"`
	}
	stack.AdminPOST(t, "/v1/admin/agents/"+bob+"/keys", map[string]any{}, &second)
	stack.Call(t, http.MethodDelete, "/v1/admin/agents/"+bob+"/keys/"+created.KeyID, stack.AdminKey, nil, nil)
	send("after the revocation")

	tok, _ := meshclient.New(stack.URL, second.APIKey).Token(ctx)
	recs := readAll(t, tok.Kafka, 2)
	if len(recs) != 2 || string(recs[0].Key) != tok.RoutingID || string(recs[1].Key) != tok.RoutingID {
		t.Fatalf("want bob's two records, got %d", len(recs))
	}
	oldKeys, _ := before.Keys()
	newKeys, _ := tok.Keys()

	t.Run("the inbox key issued before opens the event written before", func(t *testing.T) {
		if env, err := seal.OpenEvent(oldKeys, before.RoutingID, recs[0].Value); err != nil || env.Seq != 1 {
			t.Fatalf("%+v, %v", env, err)
		}
	})
	t.Run("the inbox key issued before does not open the event written after", func(t *testing.T) {
		if env, err := seal.OpenEvent(oldKeys, before.RoutingID, recs[1].Value); !errors.Is(err, seal.ErrNoKey) {
			t.Fatalf("opened seq %d (%v)", env.Seq, err)
		}
		var rec seal.Record
		_ = json.Unmarshal(recs[1].Value, &rec)
		rec.KeyEpoch = before.KeyEpoch()
		relabelled, _ := json.Marshal(rec)
		if env, err := seal.OpenEvent(oldKeys, before.RoutingID, relabelled); err == nil {
			t.Fatalf("relabelled with the old epoch, seq %d opened", env.Seq)
		}
	})
	t.Run("a token issued after opens the old and the new events", func(t *testing.T) {
		if tok.KeyEpoch() <= before.KeyEpoch() {
			t.Fatalf("epoch %d after the revocation, %d before", tok.KeyEpoch(), before.KeyEpoch())
		}
		for i, r := range recs {
			env, err := seal.OpenEvent(newKeys, tok.RoutingID, r.Value)
			if err != nil || env.Seq != int64(i+1) || env.To != bob {
				t.Fatalf("record %d: %+v, %v", i, env, err)
			}
		}
	})
}

// drain runs the dispatcher until the outbox has nothing pending.
func drain(ctx context.Context, t *testing.T, stack *localstacktest.Stack) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := stack.Dispatcher.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		var pending int
		if err := stack.Env.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox_events WHERE delivery <> 'sent'").Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events still not sent", pending)
		}
	}
}

// readAll consumes every partition of the topic a token names, from the
// start, until n records arrived (and a moment more, for any extra).
func readAll(t *testing.T, k meshclient.KafkaInfo, n int) []*kgo.Record {
	t.Helper()
	opts, err := kafka.Options{Brokers: k.Brokers, Auth: k.Auth}.ClientOpts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(k.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		pctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
		if len(out) >= n && len(fs.Records()) == 0 {
			break
		}
	}
	return out
}

// agentPOST posts body as the agent and fails the test on anything but a 2xx.
func agentPOST(ctx context.Context, t *testing.T, c *meshclient.Client, stack *localstacktest.Stack, path string, body any) {
	t.Helper()
	tok, err := c.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stack.Call(t, http.MethodPost, path, tok.Token, body, nil)
}
