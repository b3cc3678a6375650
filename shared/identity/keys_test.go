package identity_test

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

// TestKeysAndTokens covers the key lifecycle against the database: a token
// dies with its key at once, rotation keeps or revokes the old keys, and the
// inbox key epoch moves only when asked.
func TestKeysAndTokens(t *testing.T) {
	s, clock, _ := identitytest.NewService(t)
	ctx := context.Background()
	key1, tok1 := identitytest.NewAgent(t, s, "keyed")

	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}
	var rot identity.RotatedKey
	step("a rotated key works alongside the old one", func(t *testing.T) {
		var err error
		if rot, err = s.RotateKey(ctx, "keyed", identity.RotateOptions{}); err != nil {
			t.Fatal(err)
		}
		if rot.KeyEpoch != 1 || len(rot.RevokedKeyIDs) != 0 {
			t.Fatalf("rotation %+v", rot)
		}
		for _, k := range []string{key1, rot.APIKey} {
			if _, err := s.IssueToken(ctx, k, ""); err != nil {
				t.Fatalf("key %s…: %v", k[:16], err)
			}
		}
	})
	step("revoking a key kills its tokens at once, not at expiry", func(t *testing.T) {
		if _, err := s.AuthenticateAgent(ctx, tok1); err != nil {
			t.Fatal(err)
		}
		r, err := s.RevokeKey(ctx, "keyed", key1[len(identity.APIKeyPrefix):len(identity.APIKeyPrefix)+identity.APIKeyIDLen])
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.AuthenticateAgent(ctx, tok1)
		if me := mesh.AsError(err); me.Kind != mesh.KindUnauthorized || me.Code != "key_revoked" {
			t.Fatalf("token of a revoked key: %v", err)
		}
		if _, err := s.IssueToken(ctx, key1, ""); mesh.AsError(err).Code != "invalid_api_key" {
			t.Fatalf("revoked key exchanged: %v", err)
		}
		clock.Advance(time.Minute)
		again, err := s.RevokeKey(ctx, "keyed", r.KeyID)
		if err != nil || !again.RevokedAt.Equal(r.RevokedAt) {
			t.Fatalf("revoking twice: %+v %v, want the original time %v", again, err, r.RevokedAt)
		}
		if r.KeyEpoch != 2 || again.KeyEpoch != 2 {
			t.Fatalf("epochs after revoking once and twice: %d, %d; want 2 and 2 (a repeat rotates nothing)", r.KeyEpoch, again.KeyEpoch)
		}
	})
	step("a revocation retires the inbox key that the revoked key could fetch", func(t *testing.T) {
		// key1 was revoked above: the live key's token carries the next epoch.
		tok, err := s.IssueToken(ctx, rot.APIKey, "")
		if err != nil {
			t.Fatal(err)
		}
		old := base64.StdEncoding.EncodeToString(s.Sealer.AgentKey("keyed", 1))
		if cur := tok.InboxKeys[len(tok.InboxKeys)-1]; cur.KeyEpoch != 2 || cur.Key == old {
			t.Fatalf("token after a revocation: epoch %d, same inbox key as before: %v", cur.KeyEpoch, cur.Key == old)
		}
	})
	step("revoking another agent's key is a 404", func(t *testing.T) {
		identitytest.NewAgent(t, s, "other")
		if _, err := s.RevokeKey(ctx, "other", rot.KeyID); mesh.AsError(err).Code != "key_not_found" {
			t.Fatalf("got %v", err)
		}
	})
	step("rotating with revoke_existing and rotate_inbox_key leaves only the new key and bumps the epoch", func(t *testing.T) {
		before, _ := s.IssueToken(ctx, rot.APIKey, "")
		r2, err := s.RotateKey(ctx, "keyed", identity.RotateOptions{RevokeExisting: true, RotateInboxKey: true})
		if err != nil {
			t.Fatal(err)
		}
		// One bump for both reasons: the epoch was 2 after the revocation above.
		if len(r2.RevokedKeyIDs) != 1 || r2.RevokedKeyIDs[0] != rot.KeyID || r2.KeyEpoch != 3 {
			t.Fatalf("rotation %+v", r2)
		}
		if _, err := s.IssueToken(ctx, rot.APIKey, ""); err == nil {
			t.Fatal("the old key still works")
		}
		after, err := s.IssueToken(ctx, r2.APIKey, "")
		if err != nil {
			t.Fatal(err)
		}
		cur, prev := after.InboxKeys[len(after.InboxKeys)-1], before.InboxKeys[len(before.InboxKeys)-1]
		if cur.KeyEpoch != 3 || cur.Key == prev.Key {
			t.Fatalf("inbox key did not rotate: epoch %d", cur.KeyEpoch)
		}
	})
	step("rotating with revoke_existing alone still retires the inbox key", func(t *testing.T) {
		r3, err := s.RotateKey(ctx, "keyed", identity.RotateOptions{RevokeExisting: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(r3.RevokedKeyIDs) != 1 || r3.KeyEpoch != 4 {
			t.Fatalf("rotation %+v, want one revoked key and epoch 4", r3)
		}
		r4, err := s.RotateKey(ctx, "keyed", identity.RotateOptions{})
		if err != nil || r4.KeyEpoch != 4 {
			t.Fatalf("a plain rotation revokes nothing and keeps the epoch: %+v %v", r4, err)
		}
	})
	step("rotating an unknown agent is a 404", func(t *testing.T) {
		if _, err := s.RotateKey(ctx, "nobody", identity.RotateOptions{}); mesh.AsError(err).Code != "agent_not_found" {
			t.Fatalf("got %v", err)
		}
	})
	step("agent ids are compared exactly", func(t *testing.T) {
		if _, _, err := s.CreateAgent(ctx, "Keyed", ""); err != nil {
			t.Fatalf("Keyed is a different agent from keyed: %v", err)
		}
		if _, _, err := s.CreateAgent(ctx, "keyed", ""); mesh.AsError(err).Code != "agent_exists" {
			t.Fatalf("duplicate: %v", err)
		}
		if _, _, err := s.CreateAgent(ctx, "me", ""); mesh.AsError(err).Code != "reserved_agent_id" {
			t.Fatalf("me: %v", err)
		}
		for _, bad := range []string{"", "keyed ", "-x", "a/b", strings.Repeat("a", 65), "ünï"} {
			if _, _, err := s.CreateAgent(ctx, bad, ""); mesh.AsError(err).Code != "invalid_agent_id" {
				t.Fatalf("%q: %v", bad, err)
			}
		}
	})
}

// TestTokenCarriesEveryRetainedInboxKey: the token holds the routing id and
// the inbox keys from the epoch of the oldest event the agent's outbox still
// holds to the current one, so a rotation or revocation never strands mail.
func TestTokenCarriesEveryRetainedInboxKey(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	ctx := context.Background()
	key, _ := identitytest.NewAgent(t, s, "keeper")
	write := func(t *testing.T) {
		t.Helper()
		err := s.DB.InTx(ctx, func(tx *sql.Tx) error {
			return outbox.Append(ctx, tx, []outbox.Event{{Type: mesh.EventMessage, To: "keeper", From: "x", TaskID: "t", ContextID: "c",
				MessageID: outbox.NewEventID(), OccurredAt: time.Now(), Body: json.RawMessage(`{}`)}})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	rotate := func(t *testing.T) {
		t.Helper()
		if _, err := s.RotateKey(ctx, "keeper", identity.RotateOptions{RotateInboxKey: true}); err != nil {
			t.Fatal(err)
		}
	}
	epochs := func(t *testing.T) []int {
		t.Helper()
		tok, err := s.IssueToken(ctx, key, "")
		if err != nil {
			t.Fatal(err)
		}
		if tok.RoutingID != s.Sealer.RoutingID("keeper") {
			t.Fatalf("routing id %q, want the sealer's", tok.RoutingID)
		}
		var out []int
		for _, k := range tok.InboxKeys {
			if k.Key != base64.StdEncoding.EncodeToString(s.Sealer.AgentKey("keeper", k.KeyEpoch)) {
				t.Fatalf("key of epoch %d is not the agent's", k.KeyEpoch)
			}
			out = append(out, k.KeyEpoch)
		}
		return out
	}
	t.Run("with an empty inbox the token holds the current key only", func(t *testing.T) {
		if got := epochs(t); fmt.Sprint(got) != "[1]" {
			t.Fatalf("epochs %v", got)
		}
	})
	t.Run("after rotations it holds every epoch since the oldest retained event", func(t *testing.T) {
		write(t) // seq 1 under epoch 1
		rotate(t)
		rotate(t) // epoch 3
		write(t)  // seq 2 under epoch 3
		if got := epochs(t); fmt.Sprint(got) != "[1 2 3]" {
			t.Fatalf("epochs %v, want [1 2 3]", got)
		}
	})
	t.Run("epochs older than the oldest retained event are left out", func(t *testing.T) {
		if _, err := s.DB.ExecContext(ctx, "DELETE FROM outbox_events WHERE recipient = 'keeper' AND seq = 1"); err != nil {
			t.Fatal(err)
		}
		if got := epochs(t); fmt.Sprint(got) != "[3]" {
			t.Fatalf("epochs %v, want [3]", got)
		}
	})
	t.Run("the number of keys is bounded, newest kept", func(t *testing.T) {
		// An old retained event under epoch 3, and many rotations since.
		write(t)
		if _, err := s.DB.ExecContext(ctx, "UPDATE agents SET key_epoch = key_epoch + ? WHERE agent_id = 'keeper'", identity.MaxInboxKeys+2); err != nil {
			t.Fatal(err)
		}
		got := epochs(t)
		if len(got) != identity.MaxInboxKeys || got[len(got)-1] != identity.MaxInboxKeys+5 {
			t.Fatalf("%d keys up to epoch %d, want %d up to %d", len(got), got[len(got)-1], identity.MaxInboxKeys, identity.MaxInboxKeys+5)
		}
	})
}
