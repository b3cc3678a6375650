package taskshttp

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

const hi = `[{"kind":"text","text":"hi"}]`

// Each route answers its typed result with its own status: 202 where the
// message is delivered later, 201 for the stored artifact, 200 otherwise.
func TestEachRouteAnswersWithItsStatus(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob")
	f.friends(t, "ann", "bob")
	f.group(t, "g", "ctx-g", "ann", "bob")
	post := func(fn, caller, path string, params map[string]string, body string) response {
		return f.call(t, req{Fn: fn, Caller: caller, Method: "POST", Path: path, Params: params, Body: body})
	}
	sent := post("SendMessageFunction", "ann", "/v1/messages", nil, `{"to":"bob","message_id":"m-1","parts":`+hi+`}`)
	if sent.Status != 202 || !bytes.Contains(sent.Body, []byte(`"message_id":"m-1"`)) {
		t.Fatalf("send: %d %s", sent.Status, sent.Body)
	}
	// A retry answers the stored result, byte for byte, with the same status.
	again := post("SendMessageFunction", "ann", "/v1/messages", nil, `{"to":"bob","message_id":"m-1","parts":`+hi+`}`)
	if again.Status != 202 || !bytes.Equal(again.Body, sent.Body) {
		t.Fatalf("retry: %d %s, first %s", again.Status, again.Body, sent.Body)
	}
	task := string(sent.Body[bytes.Index(sent.Body, []byte(`"task_id":"`))+len(`"task_id":"`):])
	task = task[:strings.IndexByte(task, '"')]
	id := map[string]string{"id": task}
	for _, c := range []struct {
		name string
		r    req
		want int
	}{
		{"reply", req{Fn: "ReplyFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/" + task + "/messages", Params: id, Body: `{"parts":` + hi + `}`}, 202},
		{"status", req{Fn: "UpdateTaskStatusFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/" + task + "/status", Params: id, Body: `{"status":"working"}`}, 200},
		{"artifact", req{Fn: "AddArtifactFunction", Caller: "bob", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Params: id, Body: `{"name":"a.txt","parts":` + hi + `}`}, 201},
		{"group send", req{Fn: "SendGroupMessageFunction", Caller: "ann", Method: "POST", Path: "/v1/groups/g/messages", Params: map[string]string{"id": "g"}, Body: `{"parts":` + hi + `}`}, 202},
		{"get task", req{Fn: "GetTaskFunction", Caller: "ann", Method: "GET", Path: "/v1/tasks/" + task, Params: id}, 200},
		{"list messages", req{Fn: "ListTaskMessagesFunction", Caller: "ann", Method: "GET", Path: "/v1/tasks/" + task + "/messages", Params: id}, 200},
		{"list tasks", req{Fn: "ListTasksFunction", Caller: "ann", Method: "GET", Path: "/v1/tasks"}, 200},
		{"inbox", req{Fn: "InboxFunction", Caller: "bob", Method: "GET", Path: "/v1/inbox"}, 200},
		{"a domain error keeps its status and code", req{Fn: "GetTaskFunction", Caller: "ann", Method: "GET", Path: "/v1/tasks/nope", Params: map[string]string{"id": "nope"}}, 404},
	} {
		if r := f.call(t, c.r); r.Status != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, r.Status, r.Body, c.want)
		}
	}
	// The stored parts are served as they were sent.
	r := f.call(t, req{Fn: "ListTaskMessagesFunction", Caller: "ann", Method: "GET", Path: "/v1/tasks/" + task + "/messages", Params: id})
	if !bytes.Contains(r.Body, []byte(`"parts":`+hi)) {
		t.Fatalf("messages: %s", r.Body)
	}
}

// Query parameters are read by the adapter: a bad one is a 400
// invalid_query before the domain is asked.
func TestQueryParameters(t *testing.T) {
	get := func(q map[string]string) func(string) string { return func(k string) string { return q[k] } }
	q, err := parseInboxQuery(get(nil))
	if err != nil || q != (tasks.InboxQuery{Limit: 100}) {
		t.Fatalf("defaults: %+v %v", q, err)
	}
	q, err = parseInboxQuery(get(map[string]string{"after": "7", "limit": "500", "wait": "20"}))
	if err != nil || q != (tasks.InboxQuery{After: 7, Limit: 500, Wait: 20 * time.Second}) {
		t.Fatalf("all set: %+v %v", q, err)
	}
	for _, bad := range []map[string]string{
		{"after": "-1"}, {"after": "x"}, {"limit": "0"}, {"limit": "501"}, {"limit": "1.5"},
		{"wait": "21"}, {"wait": "-1"}, {"wait": "9223372036854775807"},
	} {
		if _, err := parseInboxQuery(get(bad)); mesh.AsError(err) == nil || mesh.AsError(err).Code != "invalid_query" {
			t.Errorf("inbox query %v: %v, want invalid_query", bad, err)
		}
	}
	for _, c := range []struct {
		v         string
		def, most int
		want      int
		ok        bool
	}{
		{"", 50, 200, 50, true}, {"1", 50, 200, 1, true}, {"200", 50, 200, 200, true},
		{"0", 50, 200, 0, false}, {"201", 50, 200, 0, false}, {"ten", 50, 200, 0, false},
	} {
		n, err := parseLimit(c.v, c.def, c.most)
		if (err == nil) != c.ok || n != c.want {
			t.Errorf("limit %q: %d %v", c.v, n, err)
		}
	}
}
