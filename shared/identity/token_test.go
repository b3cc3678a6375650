package identity

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

// jwtService is a Service without a database: enough for verifyToken.
func jwtService(keys []config.JWTKey, now time.Time) *Service {
	return &Service{JWTKeys: keys, TokenTTL: time.Hour, Clock: func() time.Time { return now }}
}

func encodeSegment(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestVerifyToken(t *testing.T) {
	now := time.Date(2026, 3, 12, 10, 0, 0, 0, time.UTC)
	first, second := testJWTKeys[0], testJWTKeys[1]
	signer := jwtService(testJWTKeys, now)
	good, err := signer.sign("alice", "AAAAAAAAAAAA")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(good, ".")

	// Before rotation only the old key existed and signed.
	oldSigner := jwtService([]config.JWTKey{second}, now)
	byOldKey, _ := oldSigner.sign("alice", "AAAAAAAAAAAA")

	// A token claiming the first key's kid but signed with the second.
	wrongKey := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims{KeyID: "AAAAAAAAAAAA", RegisteredClaims: jwt.RegisteredClaims{
			Subject: "alice", Issuer: tokenIssuer, ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}})
		tok.Header["kid"] = first.ID
		s, _ := tok.SignedString(second.Signer())
		return s
	}()
	withClaims := func(method jwt.SigningMethod, kid string, key any, c claims) string {
		tok := jwt.NewWithClaims(method, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	valid := claims{KeyID: "AAAAAAAAAAAA", RegisteredClaims: jwt.RegisteredClaims{Subject: "alice", Issuer: tokenIssuer, ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}}
	noExp := valid
	noExp.ExpiresAt = nil
	otherIssuer := valid
	otherIssuer.Issuer = "someone-else"
	badSubject := valid
	badSubject.Subject = "alice smith"
	century := valid
	century.ExpiresAt = jwt.NewNumericDate(now.Add(100 * 365 * 24 * time.Hour))
	beyondTTL := valid
	beyondTTL.ExpiresAt = jwt.NewNumericDate(now.Add(time.Hour + 2*time.Minute))

	cases := []struct {
		name  string
		token string
		at    time.Time
		ok    bool
	}{
		{"a fresh token signed by the first key verifies", good, now, true},
		{"a token is still valid one second before it expires", good, now.Add(time.Hour - time.Second), true},
		{"a token signed by the second (previous) key verifies", byOldKey, now, true},
		{"an expired token is refused", good, now.Add(time.Hour + time.Second), false},
		{"alg none is refused", encodeSegment(`{"alg":"none","typ":"JWT","kid":"`+first.ID+`"}`) + "." + parts[1] + ".", now, false},
		{"alg none with the original signature is refused", encodeSegment(`{"alg":"none","typ":"JWT","kid":"`+first.ID+`"}`) + "." + parts[1] + "." + parts[2], now, false},
		{"a tampered payload is refused", parts[0] + "." + encodeSegment(`{"akid":"AAAAAAAAAAAA","sub":"mallory","iss":"agentmesh","exp":`+strconv.FormatInt(now.Add(time.Hour).Unix(), 10)+`}`) + "." + parts[2], now, false},
		{"a tampered signature is refused", parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2])), now, false},
		{"an unknown kid is refused", withClaims(jwt.SigningMethodEdDSA, "k-unknown", first.Signer(), valid), now, false},
		{"a missing kid is refused", withClaims(jwt.SigningMethodEdDSA, "", first.Signer(), valid), now, false},
		{"a known kid with the other key's signature is refused", wrongKey, now, false},
		{"a token signed with a key outside the configured ones is refused", withClaims(jwt.SigningMethodEdDSA, first.ID, config.JWTKey{ID: first.ID, Secret: []byte(strings.Repeat("m", 32))}.Signer(), valid), now, false},
		{"HS256 keyed with the secret is refused (only the token function has it, and it signs EdDSA)", withClaims(jwt.SigningMethodHS256, first.ID, first.Secret, valid), now, false},
		{"HS256 keyed with the public key is refused (algorithm confusion)", withClaims(jwt.SigningMethodHS256, first.ID, []byte(first.Public().Key), valid), now, false},
		{"HS512 is refused even with the right secret", withClaims(jwt.SigningMethodHS512, first.ID, first.Secret, valid), now, false},
		{"a token without expiry is refused", withClaims(jwt.SigningMethodEdDSA, first.ID, first.Signer(), noExp), now, false},
		{"a token from another issuer is refused", withClaims(jwt.SigningMethodEdDSA, first.ID, first.Signer(), otherIssuer), now, false},
		{"a token whose subject is not an agent id is refused", withClaims(jwt.SigningMethodEdDSA, first.ID, first.Signer(), badSubject), now, false},
		{"a validly signed token that expires in 100 years is refused", withClaims(jwt.SigningMethodEdDSA, first.ID, first.Signer(), century), now, false},
		{"a validly signed token that outlives the token lifetime is refused", withClaims(jwt.SigningMethodEdDSA, first.ID, first.Signer(), beyondTTL), now, false},
		{"garbage is refused", "not.a.token", now, false},
		{"an empty token is refused", "", now, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			verifier := jwtService(testJWTKeys, c.at)
			got, err := verifier.verifyToken(c.token)
			if c.ok {
				if err != nil || got.Subject != "alice" || got.KeyID != "AAAAAAAAAAAA" {
					t.Fatalf("refused a valid token: %v (%+v)", err, got)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted: %+v", got)
			}
			if me := mesh.AsError(err); me.Kind != mesh.KindUnauthorized || me.Code != "invalid_token" {
				t.Fatalf("error %v, want 401 invalid_token", err)
			}
		})
	}

	t.Run("a function holding only the public keys verifies tokens and cannot mint one", func(t *testing.T) {
		verifier := &Service{JWTPublicKeys: []config.JWTPublicKey{first.Public(), second.Public()}, TokenTTL: time.Hour,
			Clock: func() time.Time { return now }}
		for _, tok := range []string{good, byOldKey} {
			if got, err := verifier.verifyToken(tok); err != nil || got.Subject != "alice" {
				t.Fatalf("refused a token of the token function: %v", err)
			}
		}
		if _, err := verifier.sign("alice", "AAAAAAAAAAAA"); err == nil {
			t.Fatal("a verifier minted a token")
		}
	})

	t.Run("the token carries the signing key's kid in its header", func(t *testing.T) {
		tok, _, err := jwt.NewParser().ParseUnverified(good, &claims{})
		if err != nil || tok.Header["kid"] != first.ID || tok.Header["alg"] != "EdDSA" {
			t.Fatalf("header %v (%v)", tok.Header, err)
		}
	})
}

func TestParseAPIKey(t *testing.T) {
	keyID, key, hash := NewAPIKey()
	cases := []struct {
		name string
		key  string
		ok   bool
	}{
		{"a freshly minted key parses", key, true},
		{"a key without the prefix is malformed", strings.TrimPrefix(key, apiKeyPrefix), false},
		{"a key with another prefix is malformed", "xyz_" + strings.TrimPrefix(key, apiKeyPrefix), false},
		{"a key missing its last character is malformed", key[:len(key)-1], false},
		{"a key with an extra character is malformed", key + "A", false},
		{"a key whose separator moved is malformed", apiKeyPrefix + keyID[:11] + "_" + key[len(apiKeyPrefix)+11:], false},
		{"a key with a character outside base64url is malformed", key[:len(key)-1] + "=", false},
		{"a key with whitespace is malformed", " " + key, false},
		{"an empty key is malformed", "", false},
		{"the prefix alone is malformed", apiKeyPrefix, false},
		{"a JWT is not an API key", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, h, ok := parseAPIKey(c.key)
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v", ok, c.ok)
			}
			if ok && (id != keyID || string(h) != string(hash)) {
				t.Fatalf("parsed id %q, want %q (hash match %v)", id, keyID, string(h) == string(hash))
			}
		})
	}
	t.Run("key ids may contain the separator and still parse by position", func(t *testing.T) {
		for i := 0; i < 200; i++ {
			id, k, _ := NewAPIKey()
			if got, _, ok := parseAPIKey(k); !ok || got != id {
				t.Fatalf("key %q parsed to %q, %v", k, got, ok)
			}
		}
	})
	t.Run("two minted keys differ", func(t *testing.T) {
		_, k2, _ := NewAPIKey()
		if k2 == key {
			t.Fatal("same key twice")
		}
	})
}

// TestKeysAndTokens covers the key lifecycle against the database: a token
// dies with its key at once, rotation keeps or revokes the old keys, and the
// inbox key epoch moves only when asked.
func TestKeysAndTokens(t *testing.T) {
	s, clock, _ := newTestService(t)
	ctx := context.Background()
	key1, tok1 := newAgent(t, s, "keyed")

	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}
	var rot RotatedKey
	step("a rotated key works alongside the old one", func(t *testing.T) {
		var err error
		if rot, err = s.RotateKey(ctx, "keyed", RotateOptions{}); err != nil {
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
		r, err := s.RevokeKey(ctx, "keyed", key1[len(apiKeyPrefix):len(apiKeyPrefix)+apiKeyIDLen])
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
		newAgent(t, s, "other")
		if _, err := s.RevokeKey(ctx, "other", rot.KeyID); mesh.AsError(err).Code != "key_not_found" {
			t.Fatalf("got %v", err)
		}
	})
	step("rotating with revoke_existing and rotate_inbox_key leaves only the new key and bumps the epoch", func(t *testing.T) {
		before, _ := s.IssueToken(ctx, rot.APIKey, "")
		r2, err := s.RotateKey(ctx, "keyed", RotateOptions{RevokeExisting: true, RotateInboxKey: true})
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
		r3, err := s.RotateKey(ctx, "keyed", RotateOptions{RevokeExisting: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(r3.RevokedKeyIDs) != 1 || r3.KeyEpoch != 4 {
			t.Fatalf("rotation %+v, want one revoked key and epoch 4", r3)
		}
		r4, err := s.RotateKey(ctx, "keyed", RotateOptions{})
		if err != nil || r4.KeyEpoch != 4 {
			t.Fatalf("a plain rotation revokes nothing and keeps the epoch: %+v %v", r4, err)
		}
	})
	step("rotating an unknown agent is a 404", func(t *testing.T) {
		if _, err := s.RotateKey(ctx, "nobody", RotateOptions{}); mesh.AsError(err).Code != "agent_not_found" {
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
	s, _, _ := newTestService(t)
	ctx := context.Background()
	key, _ := newAgent(t, s, "keeper")
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
		if _, err := s.RotateKey(ctx, "keeper", RotateOptions{RotateInboxKey: true}); err != nil {
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
		if _, err := s.DB.ExecContext(ctx, "UPDATE agents SET key_epoch = key_epoch + ? WHERE agent_id = 'keeper'", MaxInboxKeys+2); err != nil {
			t.Fatal(err)
		}
		got := epochs(t)
		if len(got) != MaxInboxKeys || got[len(got)-1] != MaxInboxKeys+5 {
			t.Fatalf("%d keys up to epoch %d, want %d up to %d", len(got), got[len(got)-1], MaxInboxKeys, MaxInboxKeys+5)
		}
	})
}
