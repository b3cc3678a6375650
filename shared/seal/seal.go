// Package seal encrypts events per recipient (AES-256-GCM) so that a Kafka
// consumer can open only its own agent's mail and learns nothing of anyone
// else's (envelope v2, record.go). Each agent's key is derived from one
// master secret with HKDF-SHA256 over (agent_id, epoch): bumping an agent's
// epoch (a rotation or a revocation) retires that agent's key alone.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
)

// KeySize is the size of master and derived keys.
const KeySize = 32

// Sealer derives per-agent keys and routing ids from a master secret.
type Sealer struct{ master, routingKey []byte }

// New returns a Sealer; master must be KeySize bytes of secret randomness.
func New(master []byte) (*Sealer, error) {
	if len(master) != KeySize {
		return nil, fmt.Errorf("seal: master key must be %d bytes, got %d", KeySize, len(master))
	}
	return &Sealer{master: append([]byte(nil), master...), routingKey: deriveRoutingKey(master)}, nil
}

// AgentKey derives the key of agentID for epoch.
func (s *Sealer) AgentKey(agentID string, epoch int) []byte {
	info := "agentmesh inbox v1|" + agentID + "|" + strconv.Itoa(epoch)
	k, err := hkdf.Key(sha256.New, s.master, nil, info, KeySize)
	if err != nil {
		panic(err) // only for impossible lengths
	}
	return k
}

// SealWithKey encrypts with an already derived key: base64(nonce || ciphertext).
func SealWithKey(key, plaintext, aad []byte) (string, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := aead.Seal(nonce, nonce, plaintext, aad)
	return base64.StdEncoding.EncodeToString(out), nil
}

// Open decrypts what SealWithKey produced.
func Open(key []byte, sealed string, aad []byte) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil {
		return nil, fmt.Errorf("seal: not base64: %w", err)
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	if len(raw) < aead.NonceSize() {
		return nil, errors.New("seal: ciphertext too short")
	}
	pt, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], aad)
	if err != nil {
		return nil, errors.New("seal: cannot open (wrong key, epoch or tampered)")
	}
	return pt, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return cipher.NewGCM(block)
}
