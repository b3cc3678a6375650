package seal_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// openPlain opens value under key for routing id and epoch and returns the
// sealed plaintext as it is, padding included.
func openPlain(t *testing.T, key []byte, routing string, epoch int, value []byte) []byte {
	t.Helper()
	var rec seal.Record
	if err := json.Unmarshal(value, &rec); err != nil {
		t.Fatal(err)
	}
	aad := []byte(fmt.Sprintf("agentmesh record v%d|%s|%d", seal.RecordVersion, routing, epoch))
	plain, err := seal.Open(key, rec.Sealed, aad)
	if err != nil {
		t.Fatal(err)
	}
	return plain
}

// TestTheSealedEventIsWhatJSONMarshalMakesOfIt holds the hand-written
// encoder of SealEvent to encoding/json's output, byte for byte, and the
// record value to json.Marshal of the Record.
func TestTheSealedEventIsWhatJSONMarshalMakesOfIt(t *testing.T) {
	s, err := seal.New(bytes.Repeat([]byte{5}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	base := mesh.Envelope{EventID: "0b6c2f5e-1d7a-4f0e-9d3c-5a4b3c2d1e0f", Seq: 7, Type: mesh.EventMessage, To: "bob", From: "alice",
		TaskID: "task-1", ContextID: "ctx-1", MessageID: "msg-1", KeyEpoch: 3,
		OccurredAt: time.Date(2026, 3, 1, 9, 0, 0, 123456000, time.UTC), Body: json.RawMessage(`{"parts":[{"kind":"text","text":"hello there"}]}`)}
	for _, tc := range []struct {
		name string
		edit func(*mesh.Envelope)
	}{
		{"a compact body is copied as it is", func(*mesh.Envelope) {}},
		{"a body with whitespace between tokens is compacted", func(e *mesh.Envelope) { e.Body = json.RawMessage("{ \"a\" : [1, 2],\n\t\"b\":\r\"x y\" }") }},
		{"a body whose string holds an escaped quote before a space outside it is compacted", func(e *mesh.Envelope) { e.Body = json.RawMessage(`{"a":"\"", "b":1}`) }},
		{"a body whose string ends in an escaped backslash is compacted after it", func(e *mesh.Envelope) { e.Body = json.RawMessage(`{"a":"\\", "b":"\\\""}`) }},
		{"a body with < has it escaped", func(e *mesh.Envelope) { e.Body = json.RawMessage(`{"t":"a<b"}`) }},
		{"a body with > has it escaped", func(e *mesh.Envelope) { e.Body = json.RawMessage(`{"t":"a>b"}`) }},
		{"a body with & has it escaped", func(e *mesh.Envelope) { e.Body = json.RawMessage(`{"t":"a&b"}`) }},
		{"a body with U+2028 and U+2029 has them escaped", func(e *mesh.Envelope) { e.Body = json.RawMessage("{\"t\":\"a\u2028b\u2029c\"}") }},
		{"a body with other non-ASCII text is copied", func(e *mesh.Envelope) { e.Body = json.RawMessage(`{"t":"Grüße, 世界 ✓"}`) }},
		{"a scalar body is copied", func(e *mesh.Envelope) { e.Body = json.RawMessage(`"just text"`) }},
		{"an empty body is left out", func(e *mesh.Envelope) { e.Body = nil }},
		{"a group id and a trace id are written when set", func(e *mesh.Envelope) { e.GroupID, e.TraceID = "grp-1", "1-5e1b4151-5ac6c58f5b5daa6532e9a2c5" }},
		{"strings with quotes, backslashes, controls and HTML characters are escaped", func(e *mesh.Envelope) {
			// One kind per field: any of them alone must be escaped.
			e.From, e.TaskID, e.ContextID = "a\"b", "c\\d", "t\x01\x1f\n\t\b\f"
			e.MessageID, e.GroupID, e.TraceID = "<x", "x>", "a&b"
		}},
		{"strings with non-ASCII and invalid UTF-8 are written as encoding/json writes them", func(e *mesh.Envelope) {
			e.MessageID, e.GroupID, e.TraceID, e.To = "x\u2028y", "bad\xc3", "日本", "bøb"
		}},
		{"a time with a zone and no fraction is written as RFC 3339", func(e *mesh.Envelope) {
			e.OccurredAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600+1800))
		}},
		{"a delivery state is dropped and v is the record version", func(e *mesh.Envelope) { e.Delivery, e.V = "sent", 1 }},
		{"negative and large numbers are written in full", func(e *mesh.Envelope) { e.Seq, e.KeyEpoch = 1<<62, -1 }},
		{"a body that fills more than one bucket is padded to the next", func(e *mesh.Envelope) {
			e.Body = json.RawMessage(`"` + strings.Repeat("x", 5000) + `"`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := base
			tc.edit(&env)
			key, value, err := s.SealEvent(env)
			if err != nil {
				t.Fatal(err)
			}
			want := env
			want.V, want.Delivery = seal.RecordVersion, ""
			plain, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			padded := append(plain, bytes.Repeat([]byte{' '}, seal.Bucket(len(plain))-28-len(plain))...)
			got := openPlain(t, s.AgentKey(env.To, env.KeyEpoch), s.RoutingID(env.To), env.KeyEpoch, value)
			if !bytes.Equal(got, padded) {
				t.Fatalf("sealed event\n%q\nwant json.Marshal's\n%q", got, padded)
			}
			var rec seal.Record
			if err := json.Unmarshal(value, &rec); err != nil {
				t.Fatal(err)
			}
			if std, _ := json.Marshal(rec); !bytes.Equal(std, value) {
				t.Fatalf("record value %s, want json.Marshal's %s", value, std)
			}
			if string(key) != s.RoutingID(env.To) {
				t.Fatalf("record key %q, want the routing id of %q", key, env.To)
			}
		})
	}
	t.Run("an invalid body is refused as json.Marshal refuses it", func(t *testing.T) {
		env := base
		env.Body = json.RawMessage(`{"a":`)
		if _, _, err := s.SealEvent(env); err == nil {
			t.Fatal("sealed an event whose body is not JSON")
		}
	})
}

func TestTheKeyCache(t *testing.T) {
	t.Run("an epoch bump seals with the new epoch's key, never the cached one of the old epoch", func(t *testing.T) {
		s, _ := seal.New(bytes.Repeat([]byte{6}, seal.KeySize))
		env := mesh.Envelope{EventID: "e", Seq: 1, Type: mesh.EventMessage, To: "bob", From: "alice", OccurredAt: time.Now(), KeyEpoch: 1}
		if _, _, err := s.SealEvent(env); err != nil { // caches bob's epoch-1 key
			t.Fatal(err)
		}
		env.KeyEpoch = 2
		_, value, err := s.SealEvent(env)
		if err != nil {
			t.Fatal(err)
		}
		routing := s.RoutingID("bob")
		if _, err := seal.OpenEvent(map[int][]byte{2: s.AgentKey("bob", 2)}, routing, value); err != nil {
			t.Fatalf("bob's epoch-2 key does not open his epoch-2 record: %v", err)
		}
		var rec seal.Record
		_ = json.Unmarshal(value, &rec)
		if _, err := seal.Open(s.AgentKey("bob", 1), rec.Sealed, []byte(fmt.Sprintf("agentmesh record v2|%s|2", routing))); err == nil {
			t.Fatal("bob's retired epoch-1 key opens a record of epoch 2")
		}
	})
	t.Run("each agent's records are sealed with its own key and routing id, cached or not", func(t *testing.T) {
		s, _ := seal.New(bytes.Repeat([]byte{6}, seal.KeySize))
		for range 2 {
			for _, to := range []string{"bob", "carol"} {
				key, value, err := s.SealEvent(mesh.Envelope{EventID: "e", To: to, OccurredAt: time.Now(), KeyEpoch: 1})
				if err != nil {
					t.Fatal(err)
				}
				if string(key) != s.RoutingID(to) {
					t.Fatalf("record for %s keyed %q", to, key)
				}
				if _, err := seal.OpenEvent(map[int][]byte{1: s.AgentKey(to, 1)}, string(key), value); err != nil {
					t.Fatalf("%s cannot open its record: %v", to, err)
				}
			}
		}
	})
	t.Run("the cache holds at most MaxCachedKeys keys", func(t *testing.T) {
		s, _ := seal.New(bytes.Repeat([]byte{6}, seal.KeySize))
		for i := range seal.MaxCachedKeys + 50 {
			if _, _, err := s.SealEvent(mesh.Envelope{EventID: "e", To: fmt.Sprintf("agent-%d", i), OccurredAt: time.Now(), KeyEpoch: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if n := seal.CachedKeys(s); n != seal.MaxCachedKeys {
			t.Fatalf("cache holds %d keys, want the cap %d", n, seal.MaxCachedKeys)
		}
	})
}

// BenchmarkSealValidEvent measures sealing one event the way the dispatcher
// does, with the agent's key cached.
func BenchmarkSealValidEvent(b *testing.B) {
	s, _ := seal.New(bytes.Repeat([]byte{9}, seal.KeySize))
	env := mesh.Envelope{EventID: "0b6c2f5e-1d7a-4f0e-9d3c-5a4b3c2d1e0f", Seq: 42, Type: mesh.EventMessage, To: "bob", From: "alice",
		TaskID: "task-7", ContextID: "ctx-9", MessageID: "msg-11", KeyEpoch: 1, OccurredAt: time.Now(),
		Body: json.RawMessage(`{"message":{"message_id":"m","parts":[{"kind":"text","text":"Please translate the attached release notes into German."}]}}`)}
	for b.Loop() {
		if _, _, err := s.SealValidEvent(env); err != nil {
			b.Fatal(err)
		}
	}
}
