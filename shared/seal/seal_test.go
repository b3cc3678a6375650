package seal_test

import (
	"bytes"
	"testing"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/seal"
)

func TestSeal(t *testing.T) {
	s, err := seal.New(bytes.Repeat([]byte{7}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	env := mesh.Envelope{EventID: "e1", To: "bob", From: "alice", Seq: 3, Type: mesh.EventMessage, TaskID: "t1", MessageID: "m1", KeyEpoch: 1}
	body := []byte(`{"text":"hi"}`)
	sealed, err := s.Seal("bob", 1, body, seal.AAD(env))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the recipient's key of the same epoch opens the body", func(t *testing.T) {
		got, err := seal.Open(s.AgentKey("bob", 1), sealed, seal.AAD(env))
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	refused := []struct {
		name string
		key  []byte
		env  func(mesh.Envelope) mesh.Envelope
	}{
		{"another agent's key cannot open it", s.AgentKey("alice", 1), nil},
		{"the recipient's key of another epoch cannot open it", s.AgentKey("bob", 2), nil},
		{"a body moved to another seq does not open", nil, func(e mesh.Envelope) mesh.Envelope { e.Seq = 4; return e }},
		{"a body moved to another sender does not open", nil, func(e mesh.Envelope) mesh.Envelope { e.From = "mallory"; return e }},
		{"a body moved to another task does not open", nil, func(e mesh.Envelope) mesh.Envelope { e.TaskID = "t2"; return e }},
		{"a body relabelled with another type does not open", nil, func(e mesh.Envelope) mesh.Envelope { e.Type = mesh.EventStatus; return e }},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			key, e := tc.key, env
			if key == nil {
				key = s.AgentKey("bob", 1)
			}
			if tc.env != nil {
				e = tc.env(env)
			}
			if _, err := seal.Open(key, sealed, seal.AAD(e)); err == nil {
				t.Fatal("opened")
			}
		})
	}
	t.Run("a master key of the wrong size is refused", func(t *testing.T) {
		if _, err := seal.New(make([]byte, 16)); err == nil {
			t.Fatal("accepted a 16-byte master key")
		}
	})
}
