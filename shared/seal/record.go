package seal

import (
	"bytes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"

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
const (
	nonceSize   = 12
	tagSize     = 16
	gcmOverhead = nonceSize + tagSize
)

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
// (every field and the body), padded with JSON whitespace to a bucket. The
// sealed event is byte for byte what json.Marshal makes of env (v set,
// delivery dropped); an invalid body is refused as json.Marshal refuses it.
func (s *Sealer) SealEvent(env mesh.Envelope) (key, value []byte, err error) {
	if len(env.Body) > 0 && !json.Valid(env.Body) {
		return nil, nil, fmt.Errorf("seal: encode event: body is not valid JSON")
	}
	return s.SealValidEvent(env)
}

// SealValidEvent is SealEvent for a caller that has already checked env.Body
// with json.Valid (the dispatcher does, through jsonlimit.Unservable), so the
// body is not scanned twice. A body that is not valid JSON makes a record
// that meshd cannot decode: the check is the caller's.
func (s *Sealer) SealValidEvent(env mesh.Envelope) (key, value []byte, err error) {
	if env.To == "" {
		return nil, nil, errors.New("seal: event without a recipient")
	}
	k := s.keys.get(s, env.To, env.KeyEpoch)
	bufp := plainPool.Get().(*[]byte)
	defer plainPool.Put(bufp)
	plain, err := appendEvent((*bufp)[:0], env)
	if err != nil {
		return nil, nil, fmt.Errorf("seal: encode event: %w", err)
	}
	// Trailing spaces are insignificant to a JSON decoder, so the padding
	// needs no framing of its own.
	n := Bucket(len(plain)) - gcmOverhead
	for len(plain) < n {
		plain = append(plain, ' ')
	}
	if cap(plain) <= maxPooledPlain {
		*bufp = plain
	}
	sealed := make([]byte, nonceSize, nonceSize+len(plain)+tagSize)
	if _, err := rand.Read(sealed); err != nil {
		return nil, nil, err
	}
	sealed = k.aead.Seal(sealed, sealed, plain, recordAAD(k.routing, env.KeyEpoch))
	// The value is what json.Marshal makes of Record: base64 needs no
	// escaping, so it is written as is.
	value = make([]byte, 0, len(`{"v":,"key_epoch":,"sealed":""}`)+40+base64.StdEncoding.EncodedLen(len(sealed)))
	value = append(value, `{"v":`...)
	value = strconv.AppendInt(value, RecordVersion, 10)
	value = append(value, `,"key_epoch":`...)
	value = strconv.AppendInt(value, int64(env.KeyEpoch), 10)
	value = append(value, `,"sealed":"`...)
	value = base64.StdEncoding.AppendEncode(value, sealed)
	value = append(value, `"}`...)
	return []byte(k.routing), value, nil
}

// plainPool recycles the plaintext buffers of SealValidEvent; buffers past
// maxPooledPlain (a large body) are left to the collector.
var plainPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

const maxPooledPlain = 64 << 10

// appendEvent appends env as json.Marshal encodes it, with v set to
// RecordVersion and delivery dropped, without reflection. Strings that need
// escaping and bodies that are not already compact and escaped go through
// encoding/json itself, so the output is always json.Marshal's.
func appendEvent(b []byte, env mesh.Envelope) ([]byte, error) {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, RecordVersion, 10)
	b = append(b, `,"event_id":`...)
	b = appendString(b, env.EventID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, env.Seq, 10)
	b = append(b, `,"type":`...)
	b = appendString(b, env.Type)
	b = append(b, `,"to":`...)
	b = appendString(b, env.To)
	b = append(b, `,"from":`...)
	b = appendString(b, env.From)
	b = append(b, `,"task_id":`...)
	b = appendString(b, env.TaskID)
	b = append(b, `,"context_id":`...)
	b = appendString(b, env.ContextID)
	if env.GroupID != "" {
		b = append(b, `,"group_id":`...)
		b = appendString(b, env.GroupID)
	}
	b = append(b, `,"message_id":`...)
	b = appendString(b, env.MessageID)
	b = append(b, `,"occurred_at":"`...)
	var err error
	// time.Time's MarshalJSON is AppendText between quotes.
	if b, err = env.OccurredAt.AppendText(b); err != nil {
		return nil, err
	}
	b = append(b, `","key_epoch":`...)
	b = strconv.AppendInt(b, int64(env.KeyEpoch), 10)
	if env.TraceID != "" {
		b = append(b, `,"trace_id":`...)
		b = appendString(b, env.TraceID)
	}
	if len(env.Body) > 0 {
		b = append(b, `,"body":`...)
		if compactAndEscaped(env.Body) {
			b = append(b, env.Body...)
		} else {
			enc, err := json.Marshal(env.Body)
			if err != nil {
				return nil, err
			}
			b = append(b, enc...)
		}
	}
	return append(b, '}'), nil
}

// appendString appends s as a JSON string the way encoding/json does. Most
// strings (ids, types) are plain ASCII that needs no escaping and are copied;
// any other goes through encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always encodes
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// compactAndEscaped reports whether the valid JSON body is already what
// encoding/json makes of it as a json.RawMessage: no whitespace outside
// strings, and none of the characters it escapes (<, >, &, U+2028, U+2029).
// Bodies the API stored are, so they are copied as they are.
func compactAndEscaped(body []byte) bool {
	inString := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '<' || c == '>' || c == '&':
			return false
		case c == 0xE2 && i+2 < len(body) && body[i+1] == 0x80 && body[i+2]&^1 == 0xA8:
			return false
		case inString && c == '\\':
			i++ // the escaped character cannot end the string
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

// ErrNoKey means the record was sealed under an epoch the opener holds no
// key for (a newer epoch: fetch a new token; an older one: past retention).
var ErrNoKey = errors.New("seal: no inbox key for the record's epoch")

// OpenEvent opens a record value addressed to routingID with the inbox keys
// the opener holds, by epoch. It refuses any other record version, and an
// event that does not name a recipient and epoch matching the record.
func OpenEvent(keys map[int][]byte, routingID string, value []byte) (mesh.Envelope, error) {
	v, epoch, sealed, fast := parseRecord(value)
	if !fast {
		var rec Record
		dec := json.NewDecoder(bytes.NewReader(value))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return mesh.Envelope{}, fmt.Errorf("seal: record is not an envelope v%d: %w", RecordVersion, err)
		}
		v, epoch, sealed = rec.V, rec.KeyEpoch, []byte(rec.Sealed)
	}
	if v != RecordVersion {
		return mesh.Envelope{}, fmt.Errorf("seal: record version %d, want %d", v, RecordVersion)
	}
	key, ok := keys[epoch]
	if !ok {
		return mesh.Envelope{}, fmt.Errorf("%w (epoch %d)", ErrNoKey, epoch)
	}
	plain, err := openSealed(key, sealed, recordAAD(routingID, epoch))
	if err != nil {
		return mesh.Envelope{}, err
	}
	env, fast := parseEvent(plain)
	if !fast {
		if err := json.Unmarshal(plain, &env); err != nil {
			return mesh.Envelope{}, fmt.Errorf("seal: sealed event is not JSON: %w", err)
		}
	}
	if env.V != RecordVersion || env.KeyEpoch != epoch {
		return mesh.Envelope{}, errors.New("seal: sealed event does not match its record")
	}
	return env, nil
}

// The fast paths of OpenEvent below read exactly the forms SealValidEvent
// writes (fields in its order, plain ASCII strings, no extra whitespace) in
// one pass; anything else goes through encoding/json as before, so what is
// accepted and what each field decodes to never differ from it.

// parseRecord reads `{"v":V,"key_epoch":E,"sealed":"B64"}` and nothing
// after it; ok is false for any other form.
func parseRecord(value []byte) (v, epoch int, sealed []byte, ok bool) {
	p := jsonCursor{b: value}
	if !p.lit(`{"v":`) || !p.int(&v) || !p.lit(`,"key_epoch":`) || !p.int(&epoch) || !p.lit(`,"sealed":"`) {
		return 0, 0, nil, false
	}
	start := p.i
	for p.i < len(p.b) && isBase64Byte(p.b[p.i]) {
		p.i++
	}
	sealed = p.b[start:p.i]
	if !p.lit(`"}`) || p.i != len(p.b) {
		return 0, 0, nil, false
	}
	return v, epoch, sealed, true
}

func isBase64Byte(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '='
}

// parseEvent reads a sealed event as appendEvent writes it, then padding
// spaces; ok is false for any other form.
func parseEvent(plain []byte) (env mesh.Envelope, ok bool) {
	p := jsonCursor{b: plain}
	var occurred []byte
	if !p.lit(`{"v":`) || !p.int(&env.V) ||
		!p.lit(`,"event_id":`) || !p.str(&env.EventID) ||
		!p.lit(`,"seq":`) || !p.int64(&env.Seq) ||
		!p.lit(`,"type":`) || !p.str(&env.Type) ||
		!p.lit(`,"to":`) || !p.str(&env.To) ||
		!p.lit(`,"from":`) || !p.str(&env.From) ||
		!p.lit(`,"task_id":`) || !p.str(&env.TaskID) ||
		!p.lit(`,"context_id":`) || !p.str(&env.ContextID) {
		return mesh.Envelope{}, false
	}
	if p.lit(`,"group_id":`) && !p.str(&env.GroupID) {
		return mesh.Envelope{}, false
	}
	if !p.lit(`,"message_id":`) || !p.str(&env.MessageID) ||
		!p.lit(`,"occurred_at":`) || !p.raw(&occurred) || env.OccurredAt.UnmarshalText(occurred) != nil ||
		!p.lit(`,"key_epoch":`) || !p.int(&env.KeyEpoch) {
		return mesh.Envelope{}, false
	}
	if p.lit(`,"trace_id":`) && !p.str(&env.TraceID) {
		return mesh.Envelope{}, false
	}
	// The event ends at its last '}'; only padding follows.
	end := len(plain)
	for end > p.i && plain[end-1] == ' ' {
		end--
	}
	if end == p.i || plain[end-1] != '}' {
		return mesh.Envelope{}, false
	}
	if p.lit(`,"body":`) {
		body := plain[p.i : end-1]
		// encoding/json keeps a RawMessage without surrounding whitespace.
		if len(body) == 0 || isJSONSpace(body[0]) || isJSONSpace(body[len(body)-1]) || !json.Valid(body) {
			return mesh.Envelope{}, false
		}
		env.Body = bytes.Clone(body)
		p.i = end - 1
	}
	if p.i != end-1 {
		return mesh.Envelope{}, false
	}
	return env, true
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// jsonCursor reads the plain forms the fast paths accept.
type jsonCursor struct {
	b []byte
	i int
}

// lit consumes s if the input continues with it.
func (p *jsonCursor) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// digits consumes a JSON integer (-?(0|[1-9][0-9]*)) and returns it.
func (p *jsonCursor) digits() ([]byte, bool) {
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	first := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	n := p.i - first
	if n == 0 || (n > 1 && p.b[first] == '0') {
		return nil, false
	}
	return p.b[start:p.i], true
}

func (p *jsonCursor) int64(v *int64) bool {
	d, ok := p.digits()
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(string(d), 10, 64)
	*v = n
	return err == nil
}

func (p *jsonCursor) int(v *int) bool {
	d, ok := p.digits()
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(string(d), 10, strconv.IntSize)
	*v = int(n)
	return err == nil
}

// raw consumes a string of printable ASCII without escapes and returns
// its content.
func (p *jsonCursor) raw(v *[]byte) bool {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			*v, p.i = p.b[start:j], j+1
			return true
		case c < 0x20 || c > 0x7e || c == '\\':
			return false
		}
	}
	return false
}

func (p *jsonCursor) str(v *string) bool {
	var b []byte
	if !p.raw(&b) {
		return false
	}
	*v = string(b)
	return true
}

// openAEADs caches the AES-GCM of each inbox key OpenEvent used, so a
// record costs no key schedule; bounded, it starts over when full.
var openAEADs = struct {
	sync.Mutex
	m map[string]cipher.AEAD
}{m: map[string]cipher.AEAD{}}

const maxOpenAEADs = 64

func openAEAD(key []byte) (cipher.AEAD, error) {
	openAEADs.Lock()
	defer openAEADs.Unlock()
	if a, ok := openAEADs.m[string(key)]; ok {
		return a, nil
	}
	a, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	if len(openAEADs.m) >= maxOpenAEADs {
		clear(openAEADs.m)
	}
	openAEADs.m[string(key)] = a
	return a, nil
}

// openSealed is Open for base64 bytes, with the cached AES-GCM of key.
func openSealed(key, sealed, aad []byte) ([]byte, error) {
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(sealed)))
	n, err := base64.StdEncoding.Decode(raw, sealed)
	if err != nil {
		return nil, fmt.Errorf("seal: not base64: %w", err)
	}
	raw = raw[:n]
	aead, err := openAEAD(key)
	if err != nil {
		return nil, err
	}
	if len(raw) < aead.NonceSize() {
		return nil, errors.New("seal: ciphertext too short")
	}
	pt, err := aead.Open(raw[aead.NonceSize():aead.NonceSize()], raw[:aead.NonceSize()], raw[aead.NonceSize():], aad)
	if err != nil {
		return nil, errors.New("seal: cannot open (wrong key, epoch or tampered)")
	}
	return pt, nil
}
