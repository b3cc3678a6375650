package pushws_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/push"
	"github.com/agentmesh/agentmesh/shared/push/pushtest"
	"github.com/agentmesh/agentmesh/shared/push/pushws"
)

type fixture struct{ *pushtest.Fixture }

func newFixture(t *testing.T) *fixture { return &fixture{pushtest.NewFixture(t, time.Hour)} }

// sample reads events/<name>.json as a WebSocket API event.
func sample(t *testing.T, name string) events.APIGatewayWebsocketProxyRequest {
	t.Helper()
	b, err := os.ReadFile("../../../events/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayWebsocketProxyRequest
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// withToken replaces the sample's token placeholder in both header maps.
func withToken(ev events.APIGatewayWebsocketProxyRequest, token string) events.APIGatewayWebsocketProxyRequest {
	ev.Headers = maps(ev.Headers)
	ev.MultiValueHeaders = multiMaps(ev.MultiValueHeaders)
	ev.Headers["Authorization"] = "Bearer " + token
	ev.MultiValueHeaders["Authorization"] = []string{"Bearer " + token}
	return ev
}

func maps(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func multiMaps(m map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

// TestSampleEvents: the sample events of the push routes are what API
// Gateway sends each route, and each runs through its handler: the connect
// (with a real token for its placeholder) registers the connection and
// answers the subprotocol, the client frame is accepted, the disconnect
// forgets it; the janitor's sample is a scheduled event of its job.
func TestSampleEvents(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, tok := identitytest.NewAgent(t, f.ID, "planner")
	h := pushws.Handlers(f.Service)
	routes := []struct{ file, function, route, eventType string }{
		{"push-connect", "PushConnectFunction", "$connect", "CONNECT"},
		{"push-default", "PushDefaultFunction", "$default", "MESSAGE"},
		{"push-disconnect", "PushDisconnectFunction", "$disconnect", "DISCONNECT"},
	}
	for _, r := range routes {
		t.Run(r.file+".json is a "+r.route+" event its handler serves", func(t *testing.T) {
			ev := sample(t, r.file)
			rc := ev.RequestContext
			if rc.RouteKey != r.route || rc.EventType != r.eventType || rc.Stage != "push" || rc.ConnectionID == "" ||
				rc.RequestID == "" || rc.DomainName == "" || rc.APIID == "" || rc.ConnectedAt == 0 || rc.Identity.SourceIP == "" {
				t.Fatalf("request context %+v", rc)
			}
			if r.route == "$connect" {
				if a := ev.Headers["Authorization"]; a != "Bearer <agent token>" {
					t.Fatalf("authorization %q is not the agent placeholder", a)
				}
				ev = withToken(ev, tok)
			}
			resp, err := h[r.function](ctx, ev)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("answer %d %s, err %v", resp.StatusCode, resp.Body, err)
			}
			want := map[string]int{"$connect": 1, "$default": 1, "$disconnect": 0}[r.route]
			if n := f.Rows(t); n != want {
				t.Fatalf("%d rows after %s, want %d", n, r.route, want)
			}
			if r.route == "$connect" && resp.Headers["Sec-WebSocket-Protocol"] != pushws.Subprotocol {
				t.Errorf("the client offered %s and was not answered it: %v", pushws.Subprotocol, resp.Headers)
			}
		})
	}
	t.Run("push-janitor.json is a scheduled event of the janitor's job", func(t *testing.T) {
		b, err := os.ReadFile("../../../events/push-janitor.json")
		if err != nil {
			t.Fatal(err)
		}
		var ev events.EventBridgeEvent
		if err := json.Unmarshal(b, &ev); err != nil || ev.DetailType != "Scheduled Event" || !strings.Contains(ev.Resources[0], "PushJanitorFunction") {
			t.Fatalf("event %+v, err %v", ev, err)
		}
		if err := pushws.Jobs(f.Service).Must("PushJanitorFunction")(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("push-relay.json is the relay's request", func(t *testing.T) {
		b, err := os.ReadFile("../../../events/push-relay.json")
		if err != nil {
			t.Fatal(err)
		}
		var req struct {
			Posts []struct {
				ConnectionID string `json:"connection_id"`
				Data         []byte `json:"data"`
			} `json:"posts"`
			Closes []string `json:"closes"`
		}
		if err := json.Unmarshal(b, &req); err != nil || len(req.Posts) == 0 || len(req.Closes) == 0 {
			t.Fatalf("request %+v, err %v", req, err)
		}
		var frame api.PushFrame
		if err := json.Unmarshal(req.Posts[0].Data, &frame); err != nil || frame.V != 2 || !frame.Fetch || frame.Seq == 0 {
			t.Fatalf("posted frame %s is not a nudge: %v", req.Posts[0].Data, err)
		}
	})
}

// TestConnectRefusals: a handshake without a token, with a wrong one, with
// another scheme or with a malformed subprotocol list is refused with its
// status and a problem document, and writes nothing.
func TestConnectRefusals(t *testing.T) {
	f := newFixture(t)
	_, tok := identitytest.NewAgent(t, f.ID, "refused")
	connect := pushws.Connect(f.Service)
	cases := []struct {
		name    string
		headers map[string]string
		status  int
		code    string
	}{
		{"a handshake without a token gets 401", map[string]string{"Sec-WebSocket-Protocol": "mesh.v1"}, 401, "missing_token"},
		{"a wrong token gets 401", map[string]string{"Authorization": "Bearer eyJhbGciOiJFZERTQSJ9.e30.c2ln"}, 401, "invalid_token"},
		{"another scheme gets 401", map[string]string{"Authorization": "Basic " + tok}, 401, "invalid_authorization"},
		{"a wrong token in the subprotocols gets 401", map[string]string{"Sec-WebSocket-Protocol": "mesh.v1, bearer.not-a-token"}, 401, "invalid_token"},
		{"a bearer subprotocol without mesh.v1 gets 400", map[string]string{"Sec-WebSocket-Protocol": "bearer." + tok}, 400, "invalid_subprotocol"},
		{"two bearer subprotocols get 400", map[string]string{"Sec-WebSocket-Protocol": "mesh.v1, bearer." + tok + ", bearer." + tok}, 400, "invalid_subprotocol"},
		{"an empty bearer subprotocol gets 400", map[string]string{"Sec-WebSocket-Protocol": "mesh.v1, bearer."}, 400, "invalid_subprotocol"},
		{"an overlong instance id gets 400", map[string]string{"Authorization": "Bearer " + tok, "X-Mesh-Instance": strings.Repeat("i", 200)}, 400, "invalid_instance_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := sample(t, "push-connect")
			ev.Headers, ev.MultiValueHeaders = c.headers, nil
			resp, err := connect(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			checkProblem(t, resp, c.status, c.code)
			if strings.Contains(resp.Body, tok) {
				t.Errorf("the answer echoes the token")
			}
			if n := f.Rows(t); n != 0 {
				t.Fatalf("%d rows written", n)
			}
		})
	}
	t.Run("a flood of bad handshakes from one address gets 429 with Retry-After", func(t *testing.T) {
		var resp events.APIGatewayProxyResponse
		for i := 0; i < 100 && resp.StatusCode != 429; i++ {
			ev := sample(t, "push-connect")
			ev = withToken(ev, "wrong")
			resp, _ = connect(context.Background(), ev)
		}
		checkProblem(t, resp, 429, "rate_limited")
		if resp.Headers["Retry-After"] == "" {
			t.Errorf("no Retry-After: %v", resp.Headers)
		}
	})
}

func checkProblem(t *testing.T, resp events.APIGatewayProxyResponse, status int, code string) {
	t.Helper()
	if resp.StatusCode != status || resp.Headers["Content-Type"] != "application/problem+json" {
		t.Fatalf("answer %d %v %s, want %d problem+json", resp.StatusCode, resp.Headers, resp.Body, status)
	}
	var p api.Problem
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || p.Code != code || p.Status != status {
		t.Fatalf("problem %s (err %v), want code %s", resp.Body, err, code)
	}
}

// TestTheTokenTravelsInEitherPlace: the token is read from Authorization or
// the subprotocol list, whatever the header names' case and whether API
// Gateway put them into Headers or only MultiValueHeaders; the answer names
// mesh.v1 only when the client offered it.
func TestTheTokenTravelsInEitherPlace(t *testing.T) {
	f := newFixture(t)
	_, tok := identitytest.NewAgent(t, f.ID, "flexible")
	connect := pushws.Connect(f.Service)
	cases := []struct {
		name     string
		headers  map[string]string
		multi    map[string][]string
		protocol string
	}{
		{"Authorization without subprotocols", map[string]string{"Authorization": "Bearer " + tok}, nil, ""},
		{"lower-case authorization", map[string]string{"authorization": "bearer " + tok}, nil, ""},
		{"the subprotocol fallback", map[string]string{"sec-websocket-protocol": "mesh.v1, bearer." + tok}, nil, "mesh.v1"},
		{"the subprotocols on two header lines, only in MultiValueHeaders", nil,
			map[string][]string{"Sec-WebSocket-Protocol": {"mesh.v1", "bearer." + tok}}, "mesh.v1"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := sample(t, "push-connect")
			ev.Headers, ev.MultiValueHeaders = c.headers, c.multi
			ev.RequestContext.ConnectionID = "conn-" + string(rune('a'+i))
			resp, err := connect(context.Background(), ev)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("answer %d %s, err %v", resp.StatusCode, resp.Body, err)
			}
			if got := resp.Headers["Sec-WebSocket-Protocol"]; got != c.protocol {
				t.Errorf("answered subprotocol %q, want %q", got, c.protocol)
			}
		})
	}
}

// TestAFloodOfClientFramesClosesTheConnection: through the $default route,
// frames beyond the budget close the connection with rate_limited.
func TestAFloodOfClientFramesClosesTheConnection(t *testing.T) {
	f := newFixture(t)
	_, tok := identitytest.NewAgent(t, f.ID, "flooder")
	ctx := context.Background()
	conn := withToken(sample(t, "push-connect"), tok)
	if resp, err := pushws.Connect(f.Service)(ctx, conn); err != nil || resp.StatusCode != 200 {
		t.Fatalf("connect %d %s %v", resp.StatusCode, resp.Body, err)
	}
	frame := sample(t, "push-default")
	for range push.ClientFrameBurst + 1 {
		if resp, err := pushws.Default(f.Service)(ctx, frame); err != nil || resp.StatusCode != 200 {
			t.Fatalf("frame %d %s %v", resp.StatusCode, resp.Body, err)
		}
	}
	id := frame.RequestContext.ConnectionID
	if got := f.Relay.PostsTo(id); !slices.Equal(got, []string{string(push.ByeFrame(api.ByeRateLimited))}) {
		t.Fatalf("posts %q", got)
	}
	if !slices.Equal(f.Relay.Closed(), []string{id}) || f.Rows(t) != 0 {
		t.Fatalf("closed %v, %d rows", f.Relay.Closed(), f.Rows(t))
	}
}
