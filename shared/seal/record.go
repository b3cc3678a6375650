package seal

import (
	"bytes"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

// RecordVersion is the v of the Kafka record value and of the event
// sealed in it: the envelope version.
const RecordVersion = mesh.EnvelopeVersion

// Record is the Kafka record value of envelope v2. It tells an onlooker of
// the shared topic nothing but the key epoch: every field of the event, its
// body included, travels inside Sealed, padded to a size bucket. The record
// key is the recipient's routing id, and records carry no headers.
type Record struct {
	V        int    `json:"v"`
	KeyEpoch int    `json:"key_epoch"`
	Sealed   string `json:"sealed"`
}

// MinBucket is the smallest sealed size; sealed sizes are the powers of two
// from it, so a record's length says little about its content.
const MinBucket = 256

// gcmOverhead is the nonce and tag that sealing adds to the plaintext.
const gcmOverhead = 12 + 16

// RoutingIDLen is the length of a routing id (16 bytes, base64url).
const RoutingIDLen = 22

// RoutingID is the opaque, stable routing id of agentID: an HMAC of the id
// under a key derived from the master secret, so that nobody without the
// secret can tell whose partition key it is. It is the record key on the
// shared topic; meshd learns its own from the token response.
func (s *Sealer) RoutingID(agentID string) string {
	m := hmac.New(sha256.New, s.routingKey)
	m.Write([]byte(agentID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

func deriveRoutingKey(master []byte) []byte {
	k, err := hkdf.Key(sha256.New, master, nil, "agentmesh routing id v1", KeySize)
	if err != nil {
		panic(err) // only for impossible lengths
	}
	return k
}

// recordAAD binds a sealed record to its routing id, version and epoch: a
// record moved to another recipient's key or relabelled with another epoch
// does not open.
func recordAAD(routingID string, epoch int) []byte {
	return []byte("agentmesh record v" + strconv.Itoa(RecordVersion) + "|" + routingID + "|" + strconv.Itoa(epoch))
}

// Bucket is the sealed size for a plaintext of n bytes: the smallest power
// of two, from MinBucket, that holds it with the nonce and tag.
func Bucket(n int) int {
	b := MinBucket
	for b < n+gcmOverhead {
		b *= 2
	}
	return b
}

// SealEvent builds the record of env for its recipient (env.To) under
// env.KeyEpoch: the record key (routing id) and value. env is sealed whole
// (every field and the body), padded with JSON whitespace to a bucket.
func (s *Sealer) SealEvent(env mesh.Envelope) (key, value []byte, err error) {
	if env.To == "" {
		return nil, nil, errors.New("seal: event without a recipient")
	}
	env.V = RecordVersion
	env.Delivery = "" // the inbox API's state, not part of the event
	plain, err := json.Marshal(env)
	if err != nil {
		return nil, nil, fmt.Errorf("seal: encode event: %w", err)
	}
	// Trailing spaces are insignificant to a JSON decoder, so the padding
	// needs no framing of its own.
	padded := append(plain, bytes.Repeat([]byte{' '}, Bucket(len(plain))-gcmOverhead-len(plain))...)
	routing := s.RoutingID(env.To)
	sealed, err := SealWithKey(s.AgentKey(env.To, env.KeyEpoch), padded, recordAAD(routing, env.KeyEpoch))
	if err != nil {
		return nil, nil, err
	}
	value, err = json.Marshal(Record{V: RecordVersion, KeyEpoch: env.KeyEpoch, Sealed: sealed})
	return []byte(routing), value, err
}

// ErrNoKey means the record was sealed under an epoch the opener holds no
// key for (a newer epoch: fetch a new token; an older one: past retention).
var ErrNoKey = errors.New("seal: no inbox key for the record's epoch")

// OpenEvent opens a record value addressed to routingID with the inbox keys
// the opener holds, by epoch. It refuses any other record version, and an
// event that does not name a recipient and epoch matching the record.
func OpenEvent(keys map[int][]byte, routingID string, value []byte) (mesh.Envelope, error) {
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return mesh.Envelope{}, fmt.Errorf("seal: record is not an envelope v%d: %w", RecordVersion, err)
	}
	if rec.V != RecordVersion {
		return mesh.Envelope{}, fmt.Errorf("seal: record version %d, want %d", rec.V, RecordVersion)
	}
	key, ok := keys[rec.KeyEpoch]
	if !ok {
		return mesh.Envelope{}, fmt.Errorf("%w (epoch %d)", ErrNoKey, rec.KeyEpoch)
	}
	plain, err := Open(key, rec.Sealed, recordAAD(routingID, rec.KeyEpoch))
	if err != nil {
		return mesh.Envelope{}, err
	}
	var env mesh.Envelope
	if err := json.Unmarshal(plain, &env); err != nil {
		return mesh.Envelope{}, fmt.Errorf("seal: sealed event is not JSON: %w", err)
	}
	if env.V != RecordVersion || env.KeyEpoch != rec.KeyEpoch {
		return mesh.Envelope{}, errors.New("seal: sealed event does not match its record")
	}
	return env, nil
}
