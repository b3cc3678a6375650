package seal_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/seal"
)

func TestSeal(t *testing.T) {
	s, err := seal.New(bytes.Repeat([]byte{7}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	env := mesh.Envelope{EventID: "e1", To: "bob", From: "alice", Seq: 3, Type: mesh.EventMessage, TaskID: "t1",
		ContextID: "c1", GroupID: "g1", MessageID: "m1", KeyEpoch: 1}
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
		{"a body moved to another event id does not open", nil, func(e mesh.Envelope) mesh.Envelope { e.EventID = "e2"; return e }},
		{"a body readdressed to another recipient does not open", nil, func(e mesh.Envelope) mesh.Envelope { e.To = "carol"; return e }},
		{"a body moved to another context does not open", nil, func(e mesh.Envelope) mesh.Envelope { e.ContextID = "c2"; return e }},
		{"a body moved to another group does not open", nil, func(e mesh.Envelope) mesh.Envelope { e.GroupID = "g2"; return e }},
		{"a body moved out of its group does not open", nil, func(e mesh.Envelope) mesh.Envelope { e.GroupID = ""; return e }},
		{"a body moved to another message id does not open", nil, func(e mesh.Envelope) mesh.Envelope { e.MessageID = "m2"; return e }},
		{"a body relabelled with another key epoch does not open", nil, func(e mesh.Envelope) mesh.Envelope { e.KeyEpoch = 2; return e }},
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
	t.Run("every clear routing field of the envelope is bound by the AAD", func(t *testing.T) {
		// Fields outside the AAD on purpose: the sealed body itself, the
		// inbox API's delivery state, the constant version (bound as a
		// literal) and occurred_at (informational; the seq orders events).
		unbound := map[string]bool{"Sealed": true, "Body": true, "Delivery": true, "V": true, "OccurredAt": true}
		rt := reflect.TypeOf(env)
		for i := range rt.NumField() {
			f := rt.Field(i)
			if unbound[f.Name] {
				continue
			}
			e := env
			v := reflect.ValueOf(&e).Elem().Field(i)
			switch v.Kind() {
			case reflect.String:
				v.SetString(v.String() + "x")
			case reflect.Int, reflect.Int64:
				v.SetInt(v.Int() + 1)
			default:
				t.Fatalf("field %s of kind %s: add a case or list it as unbound", f.Name, v.Kind())
			}
			if bytes.Equal(seal.AAD(e), seal.AAD(env)) {
				t.Errorf("changing %s leaves the AAD unchanged", f.Name)
			}
		}
	})
	t.Run("a master key of the wrong size is refused", func(t *testing.T) {
		if _, err := seal.New(make([]byte, 16)); err == nil {
			t.Fatal("accepted a 16-byte master key")
		}
	})
}
