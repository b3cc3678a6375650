package taskshttp

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

// Strict input on the write routes, through the real middleware: what a
// lenient decoder would have read one way and a reviewer another is
// refused whole, and nothing is written.
func TestWritesRefuseAmbiguousOrMislabelledBodies(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob", "nobody")
	f.friends(t, "ann", "bob")
	f.friends(t, "ann", "nobody")
	f.group(t, "g", "ctx-g", "ann", "bob")
	sent := f.call(t, req{Fn: "SendMessageFunction", Caller: "ann", Method: "POST", Path: "/v1/messages", Body: `{"to":"bob","parts":` + hi + `}`})
	var res tasks.SendResult
	if err := json.Unmarshal(sent.Body, &res); err != nil || sent.Status != 202 {
		t.Fatalf("send: %d %s", sent.Status, sent.Body)
	}
	taskParams := map[string]string{"id": res.TaskID}
	send := req{Fn: "SendMessageFunction", Caller: "ann", Method: "POST", Path: "/v1/messages"}
	for _, c := range []struct {
		name string
		r    req
		body string
		hdr  map[string]string
		want int
		code string
	}{
		{"a recipient given twice does not reach the second", send, `{"to":"nobody","to":"bob","parts":[{"kind":"text","text":"x"}]}`, nil, 400, "duplicate_key"},
		{"a recipient given again in capitals does not reach the second", send, `{"to":"nobody","TO":"bob","parts":[{"kind":"text","text":"x"}]}`, nil, 400, "invalid_json"},
		{"a key given twice inside a data part is refused", send, `{"to":"bob","parts":[{"kind":"data","data":{"amount":1,"amount":1000}}]}`, nil, 400, "duplicate_key"},
		{"a part's kind given twice is refused", req{Fn: "ReplyFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/x/messages", Params: taskParams},
			`{"parts":[{"kind":"text","text":"a","kind":"url"}]}`, nil, 400, "duplicate_key"},
		{"a status given twice is refused", req{Fn: "UpdateTaskStatusFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/x/status", Params: taskParams},
			`{"status":"working","status":"completed"}`, nil, 400, "duplicate_key"},
		{"a group send with repeated keys is refused", req{Fn: "SendGroupMessageFunction", Caller: "ann", Method: "POST", Path: "/v1/groups/g/messages", Params: map[string]string{"id": "g"}},
			`{"parts":[{"kind":"text","text":"x"}],"parts":[]}`, nil, 400, "duplicate_key"},
		{"a send without Content-Type is refused", send, `{"to":"bob","parts":[{"kind":"text","text":"x"}]}`, map[string]string{"content-type": ""}, 415, "unsupported_media_type"},
		{"a send as text/plain is refused", send, `{"to":"bob","parts":[{"kind":"text","text":"x"}]}`, map[string]string{"content-type": "text/plain"}, 415, "unsupported_media_type"},
		{"a send as application/problem+json is refused", send, `{"to":"bob","parts":[{"kind":"text","text":"x"}]}`, map[string]string{"content-type": "application/problem+json"}, 415, "unsupported_media_type"},
		{"an artifact named with NUL is refused", req{Fn: "AddArtifactFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/x/artifacts", Params: taskParams},
			`{"name":"re\u0000port","parts":[{"kind":"text","text":"x"}]}`, nil, 400, "invalid_name"},
		{"an artifact named with an escape sequence is refused", req{Fn: "AddArtifactFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/x/artifacts", Params: taskParams},
			`{"name":"\u001b[2Jreport","parts":[{"kind":"text","text":"x"}]}`, nil, 400, "invalid_name"},
		{"an artifact named with BEL is refused", req{Fn: "AddArtifactFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/x/artifacts", Params: taskParams},
			`{"name":"report\u0007","parts":[{"kind":"text","text":"x"}]}`, nil, 400, "invalid_name"},
		{"an artifact named with a right-to-left override is refused", req{Fn: "AddArtifactFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/x/artifacts", Params: taskParams},
			`{"name":"report\u202egnp.exe","parts":[{"kind":"text","text":"x"}]}`, nil, 400, "invalid_name"},
		{"an artifact with a printable Unicode name is stored", req{Fn: "AddArtifactFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/x/artifacts", Params: taskParams},
			`{"name":"Bericht – März ☃.txt","parts":[{"kind":"text","text":"x"}]}`, nil, 201, ""},
		{"an artifact name of 200 multi-byte characters is stored", req{Fn: "AddArtifactFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/x/artifacts", Params: taskParams},
			`{"name":"` + strings.Repeat("ä", 200) + `","parts":[{"kind":"text","text":"x"}]}`, nil, 201, ""},
		{"an artifact name of 201 characters is refused", req{Fn: "AddArtifactFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/x/artifacts", Params: taskParams},
			`{"name":"` + strings.Repeat("a", 201) + `","parts":[{"kind":"text","text":"x"}]}`, nil, 400, "invalid_name"},
		{"a send as application/json; charset=utf-8 is taken", send, `{"to":"bob","parts":[{"kind":"text","text":"x"}]}`, map[string]string{"content-type": "application/json; charset=utf-8"}, 202, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.state(t)
			r := c.r
			r.Body, r.Headers = c.body, c.hdr
			got := f.call(t, r)
			if got.Status != c.want || got.code() != c.code {
				t.Fatalf("got %d %s, want %d %s", got.Status, got.Body, c.want, c.code)
			}
			if c.want >= 400 {
				if after := f.state(t); after != before {
					t.Fatalf("a refused request changed the database: %+v -> %+v", before, after)
				}
			}
		})
	}
	if n := f.count(t, "SELECT COUNT(*) FROM outbox_events WHERE recipient = 'nobody'"); n != 0 {
		t.Fatalf("nobody got %d events", n)
	}
}
