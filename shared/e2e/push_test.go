package e2e_test

// The push channel's acceptance (issue 16), through the whole local stack:
// the template's WebSocket API on the API's port, the real MariaDB, the
// real Kafka broker, the dispatcher running, and meshd knowing only the
// API's URL and its agent's key. Every case ends with the friend's stream
// checked at the handler: seq 1..N once each, in order, the bodies sent.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/apigwlocal"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/push"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

func TestPushDeliversEveryMessageAcrossALostConnection(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mode     string
		viaProxy bool // meshd reaches the WebSocket API through a TCP proxy
		// disrupt ends meshd's connection; what it returns ends the outage.
		disrupt func(t *testing.T, m *pushMesh, p *testenv.Proxy, conn string) (restore func())
	}{
		{
			name: "a connection the server deletes through @connections is reopened and nothing is missed",
			mode: meshd.ModePush,
			disrupt: func(t *testing.T, m *pushMesh, _ *testenv.Proxy, conn string) func() {
				m.deleteConnection(t, conn)
				return func() {}
			},
		},
		{
			name: "auto mode chooses push, and reopens a deleted connection with nothing missed",
			mode: meshd.ModeAuto,
			disrupt: func(t *testing.T, m *pushMesh, _ *testenv.Proxy, conn string) func() {
				m.deleteConnection(t, conn)
				return func() {}
			},
		},
		{
			name: "a connection cut on the client's side is reopened once the network is back and nothing is missed", mode: meshd.ModePush, viaProxy: true,
			disrupt: func(t *testing.T, m *pushMesh, p *testenv.Proxy, _ string) func() {
				p.Cut()
				// The gateway saw the connection die: its $disconnect ran.
				waitUntil(t, "bob's connection row to go", func() bool { return len(m.connections(t, "bob")) == 0 })
				return p.Restore
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startPushMesh(t, apigwlocal.WebSocketOptions{}, nil)
			var proxy *testenv.Proxy
			if tc.viaProxy {
				proxy = testenv.NewProxy(t, strings.TrimPrefix(m.st.URL, "http://"))
			}
			h := m.startHost(t, "bob", func(c *meshd.Config) {
				c.Mode = tc.mode
				if proxy != nil {
					c.PushURL = "ws://" + proxy.Addr() + "/push"
				}
			})
			first := m.waitConnection(t, "bob", "")
			s := m.stream("alice", "bob")
			s.send(t, 3)
			h.waitHandled(t, 3)

			restore := tc.disrupt(t, m, proxy, first)
			s.send(t, 4) // while meshd has no connection, or is getting one
			restore()
			m.waitConnection(t, "bob", first)
			s.send(t, 3)
			s.check(t, h)
			for _, mode := range h.seenModes() {
				if mode != meshd.ModePush {
					t.Fatalf("meshd delivered in modes %v, want push only", h.seenModes())
				}
			}
		})
	}
}

// The gateway closes connections at their maximum age (2 h on AWS, here
// 1.2 s, with the mesh's MESH_PUSH_MAX_CONN_AGE and meshd's PushMaxAge set
// alike): across several periods meshd replaces its connection before the
// limit, the new one first, and a steady stream loses nothing.
func TestPushReplacesAgeingConnectionsWithoutMissingAnything(t *testing.T) {
	const age = 1200 * time.Millisecond
	m := startPushMesh(t, apigwlocal.WebSocketOptions{MaxConnAge: age}, map[string]string{"MESH_PUSH_MAX_CONN_AGE": age.String()})
	h := m.startHost(t, "bob", func(c *meshd.Config) { c.PushMaxAge = age })
	m.waitConnection(t, "bob", "")
	s := m.stream("alice", "bob")
	// A stream paced by its delivery (at most 3 in flight), until the
	// connection has been replaced three times.
	const maxMessages = 400
	for m.st.Gateway.Invocations()["PushConnectFunction"] < 4 {
		if len(s.texts) >= maxMessages {
			t.Fatalf("%d messages sent and the connection was not replaced three times; log:\n%s", maxMessages, m.logs.String())
		}
		h.waitHandled(t, len(s.texts)-2)
		s.send(t, 1)
	}
	s.send(t, 2)
	s.check(t, h)
	if n := strings.Count(m.logs.String(), "planned push reconnect\""); n < 3 {
		t.Errorf("meshd made %d planned reconnects, want at least 3 (one per period)", n)
	}
}

// A record whose sealed envelope is above API Gateway's 128 KB message limit
// is pushed as a nudge, and meshd fetches it from GET /v1/inbox; small
// records around it still come whole. The stream ends with a large one, so
// nothing but its nudge can bring it.
func TestPushNudgesRecordsAboveTheMessageLimit(t *testing.T) {
	m := startPushMesh(t, apigwlocal.WebSocketOptions{}, nil)
	h := m.startHost(t, "bob", nil)
	m.waitConnection(t, "bob", "")
	s := m.stream("alice", "bob")
	blob, _ := json.Marshal(map[string]string{"blob": strings.Repeat("x", 140<<10)})
	large := func(i int) {
		s.sendParts(t, "large message "+string(rune('A'+i)), mesh.Part{Kind: "data", Data: blob})
	}
	s.send(t, 1)
	large(0)
	s.send(t, 2)
	large(1)
	large(2)
	s.check(t, h)

	recs := kafkatest.ReadTopic(t, m.st.Brokers, m.st.Topic, len(s.texts), pushWait)
	var over int
	for _, r := range recs {
		if len(r.Value) > push.MaxMessageBytes {
			over++
		}
	}
	if over != 3 {
		t.Fatalf("%d records on the topic exceed %d bytes, want the 3 large ones: the test does not exercise the nudge", over, push.MaxMessageBytes)
	}
	if l := m.logs.String(); strings.Contains(l, "relay call failed") || strings.Contains(l, "PayloadTooLarge") {
		t.Fatalf("a record was posted over the message limit instead of nudged:\n%s", l)
	}
}

// A burst of records for one agent goes out in batch frames, several
// records a WebSocket message instead of a post each (a post per record
// capped a connection at one record per round trip of the relay), and
// meshd delivers every one once, in order. A second connection of the
// agent, read raw, gets the frames meshd gets.
func TestPushSendsABurstInBatchFrames(t *testing.T) {
	m := startPushMesh(t, apigwlocal.WebSocketOptions{}, nil)
	h := m.startHost(t, "bob", nil)
	m.waitConnection(t, "bob", "")
	raw, _, err := m.dial(t, bearer(m.token(t, "bob")))
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "bob's second connection to be recorded", func() bool { return len(m.connections(t, "bob")) == 2 })
	const n = 20
	s := m.stream("alice", "bob")
	m.tap.hold("bob")
	s.send(t, n)
	m.tap.waitHeld(t, "bob", n)
	m.tap.release("bob")
	s.check(t, h)

	ctx, cancel := context.WithTimeout(context.Background(), pushWait)
	defer cancel()
	frames, records, batches := 0, 0, 0
	for records < n {
		_, data, err := raw.Read(ctx)
		if err != nil {
			t.Fatalf("after %d frames carrying %d records: %v", frames, records, err)
		}
		frames++
		var f api.PushFrame
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("frame %d is not JSON: %v", frames, err)
		}
		switch {
		case len(f.Records) > 0:
			batches++
			records += len(f.Records)
		case f.Sealed != nil:
			records++
		default:
			t.Fatalf("frame %d is neither a record nor a batch: %.200s", frames, data)
		}
	}
	if batches == 0 || frames >= n {
		t.Fatalf("%d records came in %d frames, %d of them batches: want the burst batched", records, frames, batches)
	}
}

// A revoked key's connection is closed (bye revoked), it cannot connect
// again (401 at the handshake, even with a fresh token exchange), and Run
// returns the error instead of retrying forever.
func TestPushRevokedKeyClosesTheConnectionAndRunReturnsTheError(t *testing.T) {
	m := startPushMesh(t, apigwlocal.WebSocketOptions{}, nil)
	oldToken := m.token(t, "bob")
	h := m.startHost(t, "bob", nil)
	m.waitConnection(t, "bob", "")
	s := m.stream("alice", "bob")
	s.send(t, 3)
	s.check(t, h)

	keyID := m.keys["bob"][len("amk_") : len("amk_")+12]
	m.st.Call(t, http.MethodDelete, "/v1/admin/agents/bob/keys/"+keyID, m.st.AdminKey, nil, nil)
	select {
	case <-h.ended:
	case <-time.After(pushWait):
		t.Fatalf("meshd still runs %s after its key was revoked; log:\n%s", pushWait, m.logs.String())
	}
	if h.err == nil {
		t.Fatal("Run returned nil after the key was revoked, want the error")
	}
	m.logs.WaitLine(t, pushWait, "the push channel is closing this connection", "reason="+api.ByeRevoked)
	if ids := m.connections(t, "bob"); len(ids) != 0 {
		t.Errorf("bob still has push connections %v", ids)
	}
	_, resp, err := m.dial(t, bearer(oldToken))
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a handshake with the revoked key's token: %v (%v), want 401", err, resp)
	}
	if ids := m.connections(t, "bob"); len(ids) != 0 {
		t.Errorf("the refused handshake wrote connections %v", ids)
	}
}

// Dedup across a reconnect: frames pushed on a connection that is then
// lost are still queued when the reconnect's catch-up has delivered the
// same events from the inbox; each event reaches the handler once.
func TestPushDeliversEachEventOnceAcrossAReconnect(t *testing.T) {
	m := startPushMesh(t, apigwlocal.WebSocketOptions{}, nil)
	h := m.startHost(t, "bob", nil)
	first := m.waitConnection(t, "bob", "")
	s := m.stream("alice", "bob")
	release := h.gate(3)
	defer release()
	s.send(t, 3)
	select {
	case <-h.held:
	case <-time.After(pushWait):
		t.Fatal("the handler never got seq 3")
	}
	// Ten more reach meshd while its handler is busy: they wait in its
	// queue. Then the server ends the connection.
	s.send(t, 10)
	m.tap.waitPosted(t, "bob", 13)
	m.deleteConnection(t, first)
	waitUntil(t, "the deleted connection's row to go", func() bool { return len(m.connections(t, "bob")) == 0 })
	release()
	m.waitConnection(t, "bob", first)
	// The last one comes after whatever was queued: a duplicate has been
	// handled by the time it is.
	s.send(t, 1)
	s.check(t, h)
}

// A gap in the pushed stream is filled from GET /v1/inbox: a push lost on
// the way (the next record shows the gap), or pushes meshd dropped because
// its queue was full while the handler was busy.
func TestPushFillsAGapLeftByALostPush(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue int
		lose  func(t *testing.T, m *pushMesh, h *host, s *stream)
	}{
		{
			name: "a push lost between the dispatcher and the gateway is fetched when the next one arrives",
			lose: func(t *testing.T, m *pushMesh, h *host, s *stream) {
				m.tap.dropPush("bob", 3)
				s.send(t, 3)
			},
		},
		{
			name: "pushes dropped by meshd's full queue while the handler is busy are fetched, and the queued one is not handled twice", queue: 1,
			lose: func(t *testing.T, m *pushMesh, h *host, s *stream) {
				release := h.gate(2)
				defer release()
				s.send(t, 2)
				select {
				case <-h.held:
				case <-time.After(pushWait):
					t.Fatal("the handler never got seq 2")
				}
				s.send(t, 4)
				m.tap.waitPosted(t, "bob", 6)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startPushMesh(t, apigwlocal.WebSocketOptions{}, nil)
			h := m.startHost(t, "bob", func(c *meshd.Config) { c.PushQueue = tc.queue })
			m.waitConnection(t, "bob", "")
			s := m.stream("alice", "bob")
			s.send(t, 1)
			h.waitHandled(t, 1)
			tc.lose(t, m, h, s)
			s.send(t, 1)
			s.check(t, h)
		})
	}
}

// Handshakes without a valid token are refused at $connect with 401 and a
// problem document, and leave nothing behind: no row, no function beyond
// $connect.
func TestPushRefusesHandshakesWithoutAValidToken(t *testing.T) {
	m := startPushMesh(t, apigwlocal.WebSocketOptions{}, nil)
	for _, tc := range []struct {
		name     string
		header   http.Header
		protos   []string
		wantCode string
	}{
		{name: "a handshake without a token is refused", wantCode: "missing_token"},
		{name: "a handshake with a wrong token is refused", header: bearer("eyJhbGciOiJFZERTQSJ9.e30.c2ln"), wantCode: "invalid_token"},
		{name: "a handshake with a Basic Authorization header is refused", header: http.Header{"Authorization": {"Basic Ym9iOmJvYg=="}}, wantCode: "invalid_authorization"},
		{name: "a handshake with a wrong token in the subprotocols is refused", protos: []string{"mesh.v1", "bearer.not-a-token"}, wantCode: "invalid_token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := m.st.Gateway.Invocations()
			_, resp, err := m.dial(t, tc.header, tc.protos...)
			if err == nil {
				t.Fatal("the handshake was accepted")
			}
			if resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("handshake: %v (%v), want 401", err, resp)
			}
			body, _ := io.ReadAll(resp.Body)
			var p api.Problem
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(body, &p) != nil || p.Code != tc.wantCode {
				t.Fatalf("refusal %s %s, want a problem document with code %s", ct, body, tc.wantCode)
			}
			after := m.st.Gateway.Invocations()
			for fn, want := range map[string]int64{"PushConnectFunction": 1, "PushDisconnectFunction": 0, "PushDefaultFunction": 0} {
				if n := after[fn] - before[fn]; n != want {
					t.Errorf("%s ran %d times, want %d", fn, n, want)
				}
			}
			if n := m.allConnections(t); n != 0 {
				t.Errorf("push_connections holds %d rows after a refused handshake", n)
			}
		})
	}
}

// The per-agent cap: a third connection of an agent closes its oldest,
// which is told why (bye replaced) first; the agent keeps two rows, the
// newest. The subprotocol form of the token works like the header.
func TestPushAThirdConnectionOfAnAgentClosesItsOldest(t *testing.T) {
	m := startPushMesh(t, apigwlocal.WebSocketOptions{}, nil)
	tok := m.token(t, "bob")
	c1, _, err := m.dial(t, bearer(tok))
	if err != nil {
		t.Fatal(err)
	}
	ids1 := m.connections(t, "bob")
	c2, _, err := m.dial(t, nil, "mesh.v1", "bearer."+tok)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Subprotocol() != "mesh.v1" {
		t.Errorf("the subprotocol handshake negotiated %q, want mesh.v1", c2.Subprotocol())
	}
	ids2 := m.connections(t, "bob")
	if len(ids1) != 1 || len(ids2) != 2 {
		t.Fatalf("rows after one and two connections: %v, %v", ids1, ids2)
	}
	if _, _, err := m.dial(t, bearer(tok)); err != nil {
		t.Fatal(err)
	}
	msgs, code, _ := readUntilClosed(t, c1)
	var f api.PushFrame
	if len(msgs) != 1 || json.Unmarshal([]byte(msgs[0]), &f) != nil || f.Bye != api.ByeReplaced {
		t.Fatalf("the oldest connection got %q before closing, want one bye %q", msgs, api.ByeReplaced)
	}
	if code != websocket.StatusNormalClosure {
		t.Errorf("the oldest connection closed with %d, want %d", code, websocket.StatusNormalClosure)
	}
	ids3 := m.connections(t, "bob")
	if len(ids3) != 2 || ids3[0] != ids2[1] || ids3[1] == ids1[0] {
		t.Fatalf("rows after a third connection: %v, want the second (%s) and the third", ids3, ids2[1])
	}
	waitUntil(t, "the gateway to hold two connections", func() bool { return m.st.Gateway.Connections() == 2 })
}

// Client frames are bounded per connection: a frame over API Gateway's
// 32 KB is closed with 1009 before any function sees it; a frame over the
// mesh's 4 KB, or a flood, costs the connection (bye rate_limited, then
// close). Either way the row goes.
func TestPushClosesConnectionsThatSendTooMuch(t *testing.T) {
	m := startPushMesh(t, apigwlocal.WebSocketOptions{}, nil)
	for _, tc := range []struct {
		name     string
		frames   [][]byte
		wantCode websocket.StatusCode
		wantBye  string
		// maxDefault bounds the $default runs the frames may cost.
		maxDefault int64
	}{
		{name: "a frame over 32 KB is closed with 1009 and reaches no function", frames: [][]byte{make([]byte, 40<<10)}, wantCode: websocket.StatusMessageTooBig},
		{name: "a frame over 4 KB is answered with bye rate_limited and closed", frames: [][]byte{make([]byte, 5<<10)}, wantCode: websocket.StatusNormalClosure, wantBye: api.ByeRateLimited, maxDefault: 1},
		{name: "a flood of small frames is answered with bye rate_limited and closed", frames: repeat([]byte("hi"), push.ClientFrameBurst+5), wantCode: websocket.StatusNormalClosure, wantBye: api.ByeRateLimited, maxDefault: push.ClientFrameBurst + 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := m.st.Gateway.Invocations()
			c, _, err := m.dial(t, bearer(m.token(t, "bob")))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), pushWait)
			defer cancel()
			go func() {
				for _, f := range tc.frames {
					if c.Write(ctx, websocket.MessageText, f) != nil {
						return // closed by the gateway: the rest is not sent
					}
				}
			}()
			msgs, code, _ := readUntilClosed(t, c)
			if code != tc.wantCode {
				t.Errorf("closed with %d, want %d", code, tc.wantCode)
			}
			var byes []string
			for _, msg := range msgs {
				var f api.PushFrame
				if json.Unmarshal([]byte(msg), &f) == nil && f.Bye != "" {
					byes = append(byes, f.Bye)
				}
			}
			if tc.wantBye == "" && len(msgs) != 0 || tc.wantBye != "" && (len(byes) != 1 || byes[0] != tc.wantBye) {
				t.Errorf("got %q before the close, want bye %q", msgs, tc.wantBye)
			}
			waitUntil(t, "the connection's row to go", func() bool { return len(m.connections(t, "bob")) == 0 })
			if n := m.st.Gateway.Invocations()["PushDefaultFunction"] - before["PushDefaultFunction"]; n > tc.maxDefault {
				t.Errorf("$default ran %d times, want at most %d", n, tc.maxDefault)
			}
		})
	}
}

func repeat(b []byte, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}
