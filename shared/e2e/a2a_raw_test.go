package e2e_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// rawCall is one A2A method over one binding, as raw HTTP.
type rawCall struct {
	name, method, path string // path under the binding's URL (REST) or "" (JSON-RPC)
	body               string
}

// rawCalls is every A2A 1.0 method over binding, on taskID.
func rawCalls(binding a2a.TransportProtocol, taskID string) []rawCall {
	msg := fmt.Sprintf(`{"message":{"messageId":"same-msg","role":"ROLE_USER","parts":[{"text":"hi"}],"taskId":%q}}`, taskID)
	if binding == a2a.TransportProtocolJSONRPC {
		rpc := func(method, params string) rawCall {
			return rawCall{name: method, method: http.MethodPost, body: fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":%q,"params":%s}`, method, params)}
		}
		id := fmt.Sprintf(`{"id":%q}`, taskID)
		return []rawCall{
			rpc("SendMessage", msg), rpc("SendStreamingMessage", msg), rpc("GetTask", id), rpc("ListTasks", `{}`),
			rpc("CancelTask", id), rpc("SubscribeToTask", id),
			rpc("CreateTaskPushNotificationConfig", fmt.Sprintf(`{"taskId":%q,"url":"https://example.com/hook"}`, taskID)),
			rpc("GetTaskPushNotificationConfig", fmt.Sprintf(`{"taskId":%q,"id":"c1"}`, taskID)),
			rpc("ListTaskPushNotificationConfigs", fmt.Sprintf(`{"taskId":%q}`, taskID)),
			rpc("DeleteTaskPushNotificationConfig", fmt.Sprintf(`{"taskId":%q,"id":"c1"}`, taskID)),
			rpc("GetExtendedAgentCard", `{}`),
		}
	}
	return []rawCall{
		{"SendMessage", http.MethodPost, "/message:send", msg},
		{"SendStreamingMessage", http.MethodPost, "/message:stream", msg},
		{"GetTask", http.MethodGet, "/tasks/" + taskID, ""},
		{"ListTasks", http.MethodGet, "/tasks", ""},
		{"CancelTask", http.MethodPost, "/tasks/" + taskID + ":cancel", "{}"},
		{"SubscribeToTask", http.MethodPost, "/tasks/" + taskID + ":subscribe", "{}"},
		{"CreateTaskPushNotificationConfig", http.MethodPost, "/tasks/" + taskID + "/pushNotificationConfigs", `{"url":"https://example.com/hook"}`},
		{"GetTaskPushNotificationConfig", http.MethodGet, "/tasks/" + taskID + "/pushNotificationConfigs/c1", ""},
		{"ListTaskPushNotificationConfigs", http.MethodGet, "/tasks/" + taskID + "/pushNotificationConfigs", ""},
		{"DeleteTaskPushNotificationConfig", http.MethodDelete, "/tasks/" + taskID + "/pushNotificationConfigs/c1", ""},
		{"GetExtendedAgentCard", http.MethodGet, "/extendedAgentCard", ""},
	}
}

// do sends the call to agent's endpoint of binding with token.
func (m *a2aMesh) do(t *testing.T, binding a2a.TransportProtocol, agent, token string, c rawCall) rawAnswer {
	t.Helper()
	ct := ""
	if c.body != "" {
		ct = "application/json"
	}
	return raw(t, c.method, m.interfaceURL(t, agent, binding)+c.path, token, ct, []byte(c.body))
}

// masked is an answer with the ids masked (the agent's, an SSE event's,
// an error's time), and the headers that can
// tell anything (not Date, not request ids).
func masked(a rawAnswer, agent string) string {
	h := map[string]string{}
	for _, k := range []string{"Content-Type", "Www-Authenticate", "Cache-Control", "Etag"} {
		h[k] = a.Header.Get(k)
	}
	hb, _ := json.Marshal(h)
	body := strings.ReplaceAll(a.Body, agent, "{agent}")
	body = sseEventID.ReplaceAllString(body, "id: {event id}")
	body = errorTime.ReplaceAllString(body, `"timestamp":"{time}"`)
	return fmt.Sprintf("%d %s %s", a.Status, hb, body)
}

// What differs between two answers without telling anything: an SSE
// event's own id and the time an error was made.
var (
	sseEventID = regexp.MustCompile(`(?m)^id: .*$`)
	errorTime  = regexp.MustCompile(`"timestamp":"[^"]*"`)
)

// A stranger calling a published agent, a friend calling an agent whose
// card is withdrawn, and a friend calling an agent that does not exist get
// identical answers (status, headers that matter, body apart from the
// agent's id) on every method of both bindings; each is an A2A error of
// the method's binding, never a bare 404 page.
func TestA2AStrangerUnpublishedAndNonexistentAgentGetIdenticalAnswersOnEveryMethod(t *testing.T) {
	m := startA2AMesh(t)
	m.startTarget(t)
	seed := sendTask(t, m.goClient(t, caller, target, a2a.TransportProtocolJSONRPC), textMessage("tck-complete-task-seed", "seed"), false)
	alice, mallory := m.token(t, caller), m.token(t, stranger)
	for _, binding := range a2aBindings {
		if a := m.do(t, binding, target, alice, rawCalls(binding, string(seed.ID))[2]); a.Status != http.StatusOK || !strings.Contains(a.Body, string(seed.ID)) {
			t.Fatalf("alice's own GetTask over %s: %d %s, want her task", binding, a.Status, a.Body)
		}
	}
	before := m.rowCounts(t)
	for _, binding := range a2aBindings {
		for _, c := range rawCalls(binding, string(seed.ID)) {
			t.Run(fmt.Sprintf("%s %s", binding, c.name), func(t *testing.T) {
				cases := map[string]string{
					"a stranger":          masked(m.do(t, binding, target, mallory, c), target),
					"an unpublished card": masked(m.do(t, binding, unpublished, alice, c), unpublished),
					"a nonexistent agent": masked(m.do(t, binding, nonexistent, alice, c), nonexistent),
				}
				want := cases["a stranger"]
				for who, got := range cases {
					if got != want {
						t.Errorf("%s answered\n%s\na stranger\n%s", who, got, want)
					}
				}
				// Equal answers prove nothing if the calls failed for
				// another reason (authentication, a 5xx, a bare 404 page).
				if !strings.Contains(want, `"error"`) || strings.HasPrefix(want, "401") || strings.HasPrefix(want, "5") {
					t.Errorf("the answer is not the A2A error of a method: %s", want)
				}
			})
		}
	}
	t.Run("the cards of an unpublished and a nonexistent agent are the same 404", func(t *testing.T) {
		a := raw(t, http.MethodGet, m.cardURL(unpublished), "", "", nil)
		b := raw(t, http.MethodGet, m.cardURL(nonexistent), "", "", nil)
		if a.Status != http.StatusNotFound || masked(a, unpublished) != masked(b, nonexistent) {
			t.Fatalf("unpublished: %s\nnonexistent: %s", masked(a, unpublished), masked(b, nonexistent))
		}
	})
	if after := m.rowCounts(t); !maps.Equal(before, after) {
		t.Fatalf("the refused calls wrote rows: before %v, after %v", before, after)
	}
}

// A token minted before its key was revoked gets 401 on both bindings, and
// the revoked key gets invalid_client (401) from the OAuth token endpoint.
func TestA2ARevokedKeyGets401(t *testing.T) {
	m := startA2AMesh(t)
	tok := m.token(t, caller)
	revokeKey(t, m, caller, m.keys[caller])
	for _, binding := range a2aBindings {
		t.Run(fmt.Sprintf("the old token on %s gets 401", binding), func(t *testing.T) {
			a := m.do(t, binding, target, tok, rawCalls(binding, "t")[2]) // GetTask
			if a.Status != http.StatusUnauthorized {
				t.Fatalf("GetTask with a revoked key's token: %d %s, want 401", a.Status, a.Body)
			}
		})
	}
	t.Run("the token endpoint refuses the key with invalid_client", func(t *testing.T) {
		card := m.resolveCard(t, target)
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {caller}, "client_secret": {m.keys[caller]}}
		a := raw(t, http.MethodPost, tokenURL(t, card), "", "application/x-www-form-urlencoded", []byte(form.Encode()))
		if a.Status != http.StatusUnauthorized || !strings.Contains(a.Body, `"invalid_client"`) {
			t.Fatalf("POST /v1/oauth/token with a revoked key: %d %s, want 401 invalid_client", a.Status, a.Body)
		}
	})
}

// Bad input gets a clear error in the binding's own form and writes
// nothing.
func TestA2ABadInputGetsAClearErrorAndWritesNothing(t *testing.T) {
	m := startA2AMesh(t)
	alice := m.token(t, caller)
	rpcURL := m.interfaceURL(t, target, a2a.TransportProtocolJSONRPC)
	restURL := m.interfaceURL(t, target, a2a.TransportProtocolHTTPJSON)
	deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)
	nested := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"deep-1","role":"ROLE_USER","parts":[{"data":%s}]}}}`, deep)
	huge := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"huge-1","role":"ROLE_USER","parts":[{"text":%q}]}}}`, strings.Repeat("x", 2<<20))
	send := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"ct-1","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`
	cases := []struct {
		name, url, contentType, body string
		// wantRPC is the JSON-RPC error code wanted (0: none); wantStatus
		// the HTTP status class wanted (4 for any 4xx; 0: 200 with a
		// JSON-RPC error).
		wantRPC    int
		wantStatus int
	}{
		{"malformed JSON-RPC is a parse error", rpcURL, "application/json", `{"jsonrpc":"2.0","id":1,"method":`, -32700, 0},
		{"a batch is an invalid request", rpcURL, "application/json", `[` + send + `]`, -32600, 0},
		{"a wrong method is method not found", rpcURL, "application/json", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}`, -32601, 0},
		{"an oversized body is refused", rpcURL, "application/json", huge, 0, 4},
		{"parts nested too deep are refused", rpcURL, "application/json", nested, 0, 4},
		{"a non-JSON content type is refused, never as a parse error", rpcURL, "text/plain", send, 0, 4},
		{"malformed JSON over HTTP+JSON is a 400", restURL + "/message:send", "application/json", `{"message":`, 0, 4},
		{"an oversized HTTP+JSON body is refused", restURL + "/message:send", "application/json", huge[strings.Index(huge, `"params":`)+9 : len(huge)-1], 0, 4},
		{"parts nested too deep over HTTP+JSON are refused", restURL + "/message:send", "application/json", nested[strings.Index(nested, `"params":`)+9 : len(nested)-1], 0, 4},
		{"a non-JSON content type over HTTP+JSON is refused", restURL + "/message:send", "text/plain", `{"message":{"messageId":"ct-2","role":"ROLE_USER","parts":[{"text":"hi"}]}}`, 0, 4},
	}
	before := m.rowCounts(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := raw(t, http.MethodPost, c.url, alice, c.contentType, []byte(c.body))
			t.Logf("%d %.200s", a.Status, a.Body)
			if a.Status >= 500 {
				t.Fatalf("bad input answered %d: %s", a.Status, a.Body)
			}
			var rpc struct {
				Error *struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			_ = json.Unmarshal([]byte(a.Body), &rpc)
			code := 0
			if rpc.Error != nil {
				code = rpc.Error.Code
			}
			if code == -32700 && c.wantRPC != -32700 {
				t.Fatalf("answered a parse error (-32700) for input that parses: %d %s", a.Status, a.Body)
			}
			switch {
			case c.wantRPC != 0:
				if code != c.wantRPC {
					t.Fatalf("answered %d %s, want JSON-RPC error %d", a.Status, a.Body, c.wantRPC)
				}
			case c.wantStatus == 4:
				// A 4xx, or for JSON-RPC a 200 carrying an error other than
				// a parse error (-32005 for the content type, -32600/-32602
				// for the size and depth).
				if a.Status/100 != 4 && (rpc.Error == nil || a.Status != http.StatusOK) {
					t.Fatalf("answered %d %s, want a 4xx or a JSON-RPC error", a.Status, a.Body)
				}
			}
			// Both bindings' errors are {"error":{"code":…,"message":…}}.
			if rpc.Error == nil || rpc.Error.Message == "" {
				t.Fatalf("the answer is no error of the binding, or says nothing: %d %q", a.Status, a.Body)
			}
		})
	}
	if after := m.rowCounts(t); !maps.Equal(before, after) {
		t.Fatalf("bad input wrote rows: before %v, after %v", before, after)
	}
}
