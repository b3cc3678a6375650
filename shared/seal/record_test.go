package seal_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/seal"
)

func TestSealEvent(t *testing.T) {
	s, err := seal.New(bytes.Repeat([]byte{9}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	env := mesh.Envelope{EventID: "0b6c2f5e-1d7a-4f0e-9d3c-5a4b3c2d1e0f", Seq: 42, Type: mesh.EventMessage, To: "bob", From: "alice",
		TaskID: "task-7", ContextID: "ctx-9", GroupID: "grp-3", MessageID: "msg-11", KeyEpoch: 2,
		OccurredAt: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC), Body: json.RawMessage(`{"parts":[{"kind":"text","text":"hello"}]}`)}
	bobKeys := map[int][]byte{1: s.AgentKey("bob", 1), 2: s.AgentKey("bob", 2)}
	key, value, err := s.SealEvent(env)
	if err != nil {
		t.Fatal(err)
	}
	routing := s.RoutingID("bob")

	t.Run("the recipient opens the whole event with its key of the record's epoch", func(t *testing.T) {
		got, err := seal.OpenEvent(bobKeys, routing, value)
		if err != nil {
			t.Fatal(err)
		}
		want := env
		want.V = seal.RecordVersion
		if got.EventID != want.EventID || got.Seq != want.Seq || got.From != want.From || got.GroupID != want.GroupID ||
			got.MessageID != want.MessageID || !got.OccurredAt.Equal(want.OccurredAt) || string(got.Body) != string(want.Body) || got.V != 2 {
			t.Fatalf("opened %+v, want %+v", got, want)
		}
	})
	t.Run("the record key is the recipient's routing id", func(t *testing.T) {
		if string(key) != routing || len(routing) != seal.RoutingIDLen {
			t.Fatalf("key %q, routing id %q", key, routing)
		}
	})
	t.Run("routing ids are stable, differ per agent and per secret, and do not contain the id", func(t *testing.T) {
		other, _ := seal.New(bytes.Repeat([]byte{8}, seal.KeySize))
		if s.RoutingID("bob") != routing || s.RoutingID("alice") == routing || other.RoutingID("bob") == routing ||
			strings.Contains(routing, "bob") {
			t.Fatal("routing ids are not opaque and stable")
		}
	})
	t.Run("nothing but the version and the epoch is readable in the value", func(t *testing.T) {
		var fields map[string]any
		if err := json.Unmarshal(value, &fields); err != nil || len(fields) != 3 || fields["v"] != 2.0 || fields["key_epoch"] != 2.0 {
			t.Fatalf("value fields %v (%v), want only v, key_epoch, sealed", fields, err)
		}
		sealed, _ := fields["sealed"].(string)
		raw, err := base64.StdEncoding.DecodeString(sealed)
		if err != nil {
			t.Fatal(err)
		}
		// The clear part must show nothing at all; the ciphertext is random,
		// so only strings too long to occur in it by chance are looked for.
		clear := bytes.Replace(value, []byte(sealed), nil, 1)
		for _, id := range []string{env.EventID, "bob", "alice", env.TaskID, env.ContextID, env.GroupID, env.MessageID, "hello", "42", "2026"} {
			if bytes.Contains(clear, []byte(id)) {
				t.Errorf("the clear part of the value shows %q: %s", id, clear)
			}
			if len(id) >= 5 && (bytes.Contains(raw, []byte(id)) || strings.Contains(sealed, id)) {
				t.Errorf("the sealed blob shows %q", id)
			}
		}
	})
	t.Run("sealed sizes are buckets: powers of two from 256 bytes", func(t *testing.T) {
		for _, n := range []int{0, 100, 228, 229, 1000, 70000, 300000} {
			e := env
			e.Body = json.RawMessage(`"` + strings.Repeat("x", n) + `"`)
			_, v, err := s.SealEvent(e)
			if err != nil {
				t.Fatal(err)
			}
			var rec seal.Record
			if err := json.Unmarshal(v, &rec); err != nil {
				t.Fatal(err)
			}
			raw, err := base64.StdEncoding.DecodeString(rec.Sealed)
			if err != nil {
				t.Fatal(err)
			}
			if l := len(raw); l < seal.MinBucket || l&(l-1) != 0 {
				t.Fatalf("body of %d bytes sealed to %d bytes, not a bucket", n, l)
			}
		}
	})
	refused := []struct {
		name    string
		keys    map[int][]byte
		routing string
		value   func() []byte
	}{
		{"another agent's keys cannot open it", map[int][]byte{2: s.AgentKey("alice", 2)}, routing, nil},
		{"a record moved to another routing id does not open", bobKeys, s.RoutingID("alice"), nil},
		{"a record relabelled with another epoch does not open", bobKeys, routing, func() []byte {
			return bytes.Replace(value, []byte(`"key_epoch":2`), []byte(`"key_epoch":1`), 1)
		}},
		{"a record of a version other than 2 is refused", bobKeys, routing, func() []byte {
			return bytes.Replace(value, []byte(`"v":2`), []byte(`"v":1`), 1)
		}},
		{"a record with extra clear fields is refused", bobKeys, routing, func() []byte {
			return bytes.Replace(value, []byte(`"v":2`), []byte(`"v":2,"to":"bob"`), 1)
		}},
		{"a tampered ciphertext does not open", bobKeys, routing, func() []byte {
			var rec seal.Record
			_ = json.Unmarshal(value, &rec)
			raw, _ := base64.StdEncoding.DecodeString(rec.Sealed)
			raw[len(raw)/2] ^= 1
			rec.Sealed = base64.StdEncoding.EncodeToString(raw)
			v, _ := json.Marshal(rec)
			return v
		}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			v := value
			if tc.value != nil {
				v = tc.value()
			}
			if got, err := seal.OpenEvent(tc.keys, tc.routing, v); err == nil {
				t.Fatalf("opened %+v", got)
			}
		})
	}
	t.Run("a record of an epoch the opener holds no key for says so", func(t *testing.T) {
		_, err := seal.OpenEvent(map[int][]byte{1: s.AgentKey("bob", 1)}, routing, value)
		if !errors.Is(err, seal.ErrNoKey) {
			t.Fatalf("got %v, want ErrNoKey", err)
		}
	})
}

// BenchmarkSealEvent measures sealing (dispatcher) and opening (meshd) one
// event, padding included, by body size.
func BenchmarkSealEvent(b *testing.B) {
	s, _ := seal.New(bytes.Repeat([]byte{9}, seal.KeySize))
	keys := map[int][]byte{1: s.AgentKey("bob", 1)}
	routing := s.RoutingID("bob")
	for _, n := range []int{200, 4 << 10, 256 << 10} {
		env := mesh.Envelope{EventID: "0b6c2f5e-1d7a-4f0e-9d3c-5a4b3c2d1e0f", Seq: 42, Type: mesh.EventMessage, To: "bob", From: "alice",
			TaskID: "task-7", ContextID: "ctx-9", MessageID: "msg-11", KeyEpoch: 1, OccurredAt: time.Now(),
			Body: json.RawMessage(`"` + strings.Repeat("x", n) + `"`)}
		b.Run(fmt.Sprintf("body %d B", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				_, v, err := s.SealEvent(env)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := seal.OpenEvent(keys, routing, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
