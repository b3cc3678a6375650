package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

func nest(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }

// verdict is how a path served a stored body: "" when whole, else the
// placeholder's code.
func verdict(t *testing.T, e mesh.Envelope, stored string) string {
	t.Helper()
	if e.Type != mesh.EventUndeliverable {
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(stored)); err != nil || !bytes.Equal(e.Body, want.Bytes()) {
			t.Fatalf("seq %d served whole as %.80s, want the stored %.80s", e.Seq, e.Body, stored)
		}
		return ""
	}
	var b mesh.UndeliverableBody
	if err := json.Unmarshal(e.Body, &b); err != nil || b.Code == "" || b.OriginalType != mesh.EventMessage {
		t.Fatalf("seq %d: placeholder body %s (%v)", e.Seq, e.Body, err)
	}
	return b.Code
}

// One stored event must reach its recipient the same way through Kafka and
// through GET /v1/inbox: whole on both paths, or as the same placeholder on
// both. (Invalid UTF-8 cannot be stored in a utf8mb4 column under strict
// mode; the dispatcher's verdict on it is checked without a database in
// TestTheDispatcherJudgesBodiesByTheSharedRule.)
func TestTheDispatcherAndTheInboxGiveEveryStoredBodyTheSameVerdict(t *testing.T) {
	cases := []struct {
		name string
		body string
		want string
	}{
		{"a plain message body is served whole", `{"text":"hi"}`, ""},
		{"a body with multi-byte characters is served whole", `{"text":"héllo ☃ 😀"}`, ""},
		{"a body with a lone surrogate escape is served whole", `{"text":"\ud800"}`, ""},
		{"a body 40 levels deep, as the API accepts it, is served whole", nest(40), ""},
		{"a body at the served depth limit is served whole", nest(jsonlimit.MaxServedDepth), ""},
		{"a body one level past the served depth limit is too deep", nest(jsonlimit.MaxServedDepth + 1), jsonlimit.TooDeep},
		{"a body 100 levels deep is too deep", nest(100), jsonlimit.TooDeep},
		{"a body 600 levels deep is too deep", nest(600), jsonlimit.TooDeep},
		{"a body 10,000 levels deep is too deep", strings.Repeat("[", 10000) + strings.Repeat("]", 10000), jsonlimit.TooDeep},
		{"a body that is not JSON is unencodable", `{"parts": [`, jsonlimit.Unencodable},
		{"a body with trailing garbage is unencodable", `{"text":"hi"} x`, jsonlimit.Unencodable},
	}
	f := newDispFixture(t, 1)
	f.agents(t, "bob")
	f.send(t, "x", "bob", len(cases))
	for i, c := range cases {
		// As stored by a version of the API that accepted such bodies.
		if _, err := f.db.Exec("UPDATE outbox_events SET body = ? WHERE recipient = 'bob' AND seq = ?", c.body, i+1); err != nil {
			t.Fatal(err)
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sink := &metrics.Sink{W: io.Discard}

	inbox, err := outbox.Inbox{DB: f.db, Log: quiet, Metrics: sink}.Read(context.Background(), "bob", 0, len(cases))
	if err != nil || len(inbox) != len(cases) {
		t.Fatalf("the inbox read %d events (%v), want %d", len(inbox), err, len(cases))
	}
	d := f.dispatcher(nil, sink)
	d.Log = quiet
	f.drain(t, d)
	kafka := map[int64]mesh.Envelope{}
	for _, r := range kafkatest.ReadTopic(t, f.brokers, f.topic, len(cases), 10*time.Second) {
		env, err := decode(r)
		if err != nil {
			t.Fatal(err)
		}
		kafka[env.Seq] = env
	}

	for i, c := range cases {
		seq := int64(i + 1)
		t.Run(c.name+" on both paths", func(t *testing.T) {
			k, ok := kafka[seq]
			if !ok {
				t.Fatalf("seq %d never reached Kafka", seq)
			}
			viaKafka, viaInbox := verdict(t, k, c.body), verdict(t, inbox[i], c.body)
			if viaKafka != viaInbox {
				t.Fatalf("Kafka served it as %q, the inbox as %q (\"\" = whole)", viaKafka, viaInbox)
			}
			if viaKafka != c.want {
				t.Fatalf("both paths served it as %q, want %q", viaKafka, c.want)
			}
		})
	}
}
