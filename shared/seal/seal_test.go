package seal_test

import (
	"bytes"
	"testing"

	"github.com/agentmesh/agentmesh/shared/seal"
)

func TestSealWithKey(t *testing.T) {
	s, err := seal.New(bytes.Repeat([]byte{7}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	body, aad := []byte(`{"text":"hi"}`), []byte("bound")
	sealed, err := seal.SealWithKey(s.AgentKey("bob", 1), body, aad)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the recipient's key of the same epoch opens it", func(t *testing.T) {
		got, err := seal.Open(s.AgentKey("bob", 1), sealed, aad)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	refused := []struct {
		name string
		key  []byte
		aad  []byte
	}{
		{"another agent's key cannot open it", s.AgentKey("alice", 1), aad},
		{"the recipient's key of another epoch cannot open it", s.AgentKey("bob", 2), aad},
		{"other associated data does not open it", s.AgentKey("bob", 1), []byte("moved")},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := seal.Open(tc.key, sealed, tc.aad); err == nil {
				t.Fatal("opened")
			}
		})
	}
	t.Run("keys differ per agent and per epoch and are stable", func(t *testing.T) {
		if bytes.Equal(s.AgentKey("bob", 1), s.AgentKey("bob", 2)) || bytes.Equal(s.AgentKey("bob", 1), s.AgentKey("alice", 1)) ||
			!bytes.Equal(s.AgentKey("bob", 1), s.AgentKey("bob", 1)) {
			t.Fatal("derived keys are not per agent and epoch")
		}
	})
	t.Run("a master key of the wrong size is refused", func(t *testing.T) {
		if _, err := seal.New(make([]byte, 16)); err == nil {
			t.Fatal("accepted a 16-byte master key")
		}
	})
}
