package identity

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// jwtService is a Service without a database: enough for verifyToken.
func jwtService(keys []config.JWTKey, now time.Time) *Service {
	return &Service{JWTKeys: keys, TokenTTL: time.Hour, Clock: func() time.Time { return now }}
}

// tokenCase is a token to verify at a time, and whether it is accepted.
type tokenCase struct {
	name  string
	token string
	at    time.Time
	ok    bool
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

	cases := []tokenCase{
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

func TestAVerifiedTokenIsRememberedOnlyWhileItIsValid(t *testing.T) {
	now := time.Date(2026, 3, 12, 10, 0, 0, 0, time.UTC)
	at := now
	s := &Service{JWTKeys: testJWTKeys, TokenTTL: time.Hour, Clock: func() time.Time { return at }}
	good, err := s.sign("alice", "AAAAAAAAAAAA")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(good, ".")
	verify := func(tok string, when time.Time) error {
		at = when
		_, err := s.verifyToken(tok)
		return err
	}
	steps := []tokenCase{
		{"the first verification remembers the token", good, now, true},
		{"the remembered token is valid one second before it expires", good, now.Add(time.Hour - time.Second), true},
		{"a tampered signature is refused though the token is remembered", parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2])), now, false},
		{"the remembered token is refused once it expires", good, now.Add(time.Hour + time.Second), false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := verify(st.token, st.at); (err == nil) != st.ok {
				t.Fatalf("verify: %v, want ok=%v", err, st.ok)
			}
		})
	}

	t.Run("a remembered token is answered without verifying its signature again", func(t *testing.T) {
		fresh := &Service{JWTKeys: testJWTKeys, TokenTTL: time.Hour, Clock: func() time.Time { return now }}
		if _, err := fresh.verifyToken(good); err != nil {
			t.Fatal(err)
		}
		// With no key left to verify a signature, only the memory answers.
		fresh.JWTKeys = nil
		if got, err := fresh.verifyToken(good); err != nil || got.Subject != "alice" {
			t.Fatalf("a remembered token was verified again: %v", err)
		}
	})

	t.Run("the memory holds at most maxVerifiedTokens tokens", func(t *testing.T) {
		full := &Service{JWTKeys: testJWTKeys, TokenTTL: time.Hour, Clock: func() time.Time { return now }}
		for i := range maxVerifiedTokens + 10 {
			tok, err := full.sign(fmt.Sprintf("agent-%d", i), "AAAAAAAAAAAA")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := full.verifyToken(tok); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(full.verified.m); n > maxVerifiedTokens {
			t.Fatalf("%d tokens remembered, bound %d", n, maxVerifiedTokens)
		}
	})
}
