package seal_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// TestOpenEventDecodesAsEncodingJSON checks OpenEvent's one-pass decode
// against encoding/json: every sealed plaintext, whether in the form
// SealEvent writes or any other, opens to what json.Unmarshal makes of it,
// and one that json.Unmarshal refuses is refused.
func TestOpenEventDecodesAsEncodingJSON(t *testing.T) {
	s, err := seal.New([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	routing := s.RoutingID("bob")
	key := s.AgentKey("bob", 3)
	at := time.Date(2026, 5, 1, 12, 30, 0, 123456789, time.UTC).Format(time.RFC3339Nano)
	head := `{"v":2,"event_id":"ev-1","seq":42,"type":"message","to":"bob","from":"alice","task_id":"t-1","context_id":"c-1"`
	tail := `,"message_id":"m-1","occurred_at":"` + at + `","key_epoch":3`
	cases := []struct{ name, plain string }{
		{"the form SealEvent writes opens", head + tail + `,"body":{"parts":[{"kind":"text","text":"hi"}]}}`},
		{"a group and a trace id open", head + `,"group_id":"g-1"` + tail + `,"trace_id":"1-abc","body":{"a":1}}`},
		{"an event without a body opens", head + tail + `}`},
		{"padding after the event is ignored", head + tail + `,"body":[1,2]}` + strings.Repeat(" ", 40)},
		{"an escaped string decodes", strings.Replace(head, `"ev-1"`, `"ev\u002d1\n"`, 1) + tail + `}`},
		{"a non-ASCII string decodes", strings.Replace(head, `"alice"`, `"alïce"`, 1) + tail + `}`},
		{"invalid UTF-8 is replaced as encoding/json does", strings.Replace(head, `"alice"`, "\"al\xffce\"", 1) + tail + `}`},
		{"fields in another order decode", `{"seq":42,` + strings.Replace(head, `"seq":42,`, ``, 1)[1:] + tail + `}`},
		{"an unknown field is ignored", head + tail + `,"delivery":"sent","extra":1}`},
		{"a body with spaces keeps them inside", head + tail + `,"body": { "a" : 1 } }`},
		{"whitespace between fields decodes", strings.ReplaceAll(head+tail, `,"`, ` , "`) + `}`},
		{"a body that is not JSON is refused", head + tail + `,"body":{"a":}}`},
		{"a seq with a leading zero is refused", strings.Replace(head, `42`, `042`, 1) + tail + `}`},
		{"a seq past int64 is refused", strings.Replace(head, `42`, `99999999999999999999`, 1) + tail + `}`},
		{"a fractional seq is refused", strings.Replace(head, `42`, `4.2`, 1) + tail + `}`},
		{"a bad time is refused", strings.Replace(head+tail, at, "2026-05-01 12:30:00", 1) + `}`},
		{"trailing garbage is refused", head + tail + `}x`},
		{"a truncated event is refused", head + tail},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var want mesh.Envelope
			wantErr := json.Unmarshal([]byte(c.plain), &want)
			sealed, err := seal.SealWithKey(key, []byte(c.plain), []byte(fmt.Sprintf("agentmesh record v%d|%s|%d", seal.RecordVersion, routing, 3)))
			if err != nil {
				t.Fatal(err)
			}
			value, _ := json.Marshal(seal.Record{V: seal.RecordVersion, KeyEpoch: 3, Sealed: sealed})
			got, err := seal.OpenEvent(map[int][]byte{3: key}, routing, value)
			if wantErr != nil {
				if err == nil {
					t.Fatalf("opened %+v, want the error encoding/json gives (%v)", got, wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("opened\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// TestOpenEventRecordForms checks the record's one-pass decode against
// encoding/json's: the record SealEvent writes and its other spellings
// open alike; what the strict decoder refuses is refused.
func TestOpenEventRecordForms(t *testing.T) {
	s, err := seal.New([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	env := mesh.Envelope{V: mesh.EnvelopeVersion, EventID: "ev-1", Seq: 7, Type: mesh.EventMessage, To: "bob", From: "alice",
		OccurredAt: time.Now().UTC(), KeyEpoch: 2, Body: json.RawMessage(`{"a":1}`)}
	routing, value, err := s.SealEvent(env)
	if err != nil {
		t.Fatal(err)
	}
	var rec seal.Record
	if err := json.Unmarshal(value, &rec); err != nil {
		t.Fatal(err)
	}
	escaped := strings.Replace(rec.Sealed, "/", `\/`, -1)
	keys := map[int][]byte{2: s.AgentKey("bob", 2)}
	cases := []struct {
		name, value string
		opens       bool
	}{
		{"the record SealEvent writes opens", string(value), true},
		{"fields in another order open", fmt.Sprintf(`{"sealed":%q,"key_epoch":2,"v":%d}`, rec.Sealed, seal.RecordVersion), true},
		{"whitespace opens", fmt.Sprintf(`{ "v" : %d , "key_epoch" : 2 , "sealed" : %q }`, seal.RecordVersion, rec.Sealed), true},
		{"an escaped base64 string opens", fmt.Sprintf(`{"v":%d,"key_epoch":2,"sealed":"%s"}`, seal.RecordVersion, escaped), true},
		{"an unknown field is refused", fmt.Sprintf(`{"v":%d,"key_epoch":2,"sealed":%q,"x":1}`, seal.RecordVersion, rec.Sealed), false},
		{"another version is refused", fmt.Sprintf(`{"v":1,"key_epoch":2,"sealed":%q}`, rec.Sealed), false},
		{"an epoch without a key is refused", fmt.Sprintf(`{"v":%d,"key_epoch":9,"sealed":%q}`, seal.RecordVersion, rec.Sealed), false},
		{"bad base64 is refused", fmt.Sprintf(`{"v":%d,"key_epoch":2,"sealed":"%s"}`, seal.RecordVersion, "!"+rec.Sealed[1:]), false},
		{"a short ciphertext is refused", fmt.Sprintf(`{"v":%d,"key_epoch":2,"sealed":%q}`, seal.RecordVersion, base64.StdEncoding.EncodeToString([]byte("short"))), false},
		{"a tampered ciphertext is refused", fmt.Sprintf(`{"v":%d,"key_epoch":2,"sealed":%q}`, seal.RecordVersion, flipBase64(rec.Sealed)), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := seal.OpenEvent(keys, string(routing), []byte(c.value))
			if !c.opens {
				if err == nil {
					t.Fatalf("opened %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.EventID != env.EventID || got.Seq != env.Seq || !got.OccurredAt.Equal(env.OccurredAt) || string(got.Body) != string(env.Body) {
				t.Fatalf("opened %+v, want %+v", got, env)
			}
		})
	}
}

// flipBase64 changes one byte of the ciphertext inside the base64 text.
func flipBase64(s string) string {
	raw, _ := base64.StdEncoding.DecodeString(s)
	raw[len(raw)/2] ^= 1
	return base64.StdEncoding.EncodeToString(raw)
}
