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
	"sync"
)

// KeySize is the size of master and derived keys.
const KeySize = 32

// Sealer derives per-agent keys and routing ids from a master secret. It is
// safe for concurrent use.
type Sealer struct {
	master, routingKey []byte
	// keys caches what sealing a record needs per agent and epoch (the
	// cipher of the derived key, the routing id), so that a batch does not
	// run HKDF, an AES key schedule and an HMAC for every event.
	keys keyCache
}

// MaxCachedKeys bounds the Sealer's cache of derived keys (per agent and
// epoch, about a kilobyte each): a dispatcher batch holds at most a few
// hundred recipients, so this keeps every batch's keys with room to spare.
const MaxCachedKeys = 4096

// keyCache maps (agent, epoch) to its cipher and routing id. The epoch is
// part of the cache key: an agent whose epoch is bumped gets a new entry, so
// a cached key never serves another epoch. Full, it drops an arbitrary entry.
type keyCache struct {
	mu sync.Mutex
	m  map[agentEpoch]*agentCipher
}

type agentEpoch struct {
	agent string
	epoch int
}

type agentCipher struct {
	aead    cipher.AEAD
	routing string
}

// get returns agent's cipher and routing id for epoch, deriving them once.
func (c *keyCache) get(s *Sealer, agent string, epoch int) *agentCipher {
	ae := agentEpoch{agent, epoch}
	c.mu.Lock()
	k, ok := c.m[ae]
	c.mu.Unlock()
	if ok {
		return k
	}
	aead, err := newAEAD(s.AgentKey(agent, epoch))
	if err != nil {
		panic(err) // a derived key is always KeySize bytes
	}
	k = &agentCipher{aead: aead, routing: s.RoutingID(agent)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[agentEpoch]*agentCipher)
	}
	if len(c.m) >= MaxCachedKeys {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[ae] = k
	return k
}

// len is how many keys c holds (for tests).
func (c *keyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

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
