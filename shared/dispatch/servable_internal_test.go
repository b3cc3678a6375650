package dispatch

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// The dispatcher applies jsonlimit.Unservable, the rule of the inbox and of
// task reads, to every body, including ones no database hands it today
// (invalid UTF-8 cannot be stored in a utf8mb4 column under strict mode).
func TestTheDispatcherJudgesBodiesByTheSharedRule(t *testing.T) {
	s, err := seal.New(make([]byte, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	d := &Dispatcher{Sealer: s, Topic: "events", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, c := range []struct {
		name string
		body string
		want string
	}{
		{"a plain body goes out whole", `{"text":"hi"}`, ""},
		{"a body with invalid UTF-8 in a string goes out as unencodable", "{\"text\":\"\xff\xfe\"}", jsonlimit.Unencodable},
		{"a body cut inside a multi-byte character goes out as unencodable", "{\"text\":\"\xc3\"}", jsonlimit.Unencodable},
		{"a body 100 levels deep goes out as too deep", strings.Repeat("[", 100) + strings.Repeat("]", 100), jsonlimit.TooDeep},
		{"a body that is not JSON goes out as unencodable", `{"text":`, jsonlimit.Unencodable},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := jsonlimit.Unservable([]byte(c.body)); got != c.want {
				t.Fatalf("jsonlimit.Unservable = %q, want %q", got, c.want)
			}
			r := row{env: mesh.Envelope{V: mesh.EnvelopeVersion, To: "bob", Seq: 1, EventID: "e1", Type: mesh.EventMessage}, body: []byte(c.body)}
			_, placeholder, err := d.buildRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			if placeholder != (c.want != "") {
				t.Fatalf("placeholder = %v, want %v", placeholder, c.want != "")
			}
			if !placeholder {
				return
			}
			// The code the placeholder carries is the shared rule's.
			var logged strings.Builder
			d.Log = slog.New(slog.NewJSONHandler(&logged, nil))
			defer func() { d.Log = slog.New(slog.NewTextHandler(io.Discard, nil)) }()
			if _, _, err := d.buildRecord(r); err != nil {
				t.Fatal(err)
			}
			var line struct{ Code string }
			if err := json.Unmarshal([]byte(logged.String()), &line); err != nil || line.Code != c.want {
				t.Fatalf("placeholder logged with code %q (%v), want %q: %s", line.Code, err, c.want, logged.String())
			}
		})
	}
}
