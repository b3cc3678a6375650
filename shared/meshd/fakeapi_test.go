package meshd_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/seal"
)

// fakeAPI is a small fake of the mesh HTTP API (not of the database) for
// one agent: the routes meshd uses, backed by an in-memory list of that
// agent's committed events with their bodies in clear, as GET /v1/inbox
// serves them.
type fakeAPI struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every append (long-poll wake-up)
	agent    string
	sealer   *seal.Sealer
	epoch    int
	brokers  []string
	topic    string
	events   []mesh.Envelope
	oldest   int64 // oldest retained seq (0 = all)
	served   map[int64]int
	inbox    int
	tokens   int      // token exchanges
	beats    []string // instance ids, in order
	offline  int
	lastBeat time.Time
	// lastStats are the stats of the latest heartbeat.
	lastStats map[string]any
	offAt     time.Time
	// statuses are the POST /v1/tasks/{id}/status calls, in order.
	statuses []statusCall
	// terminal tasks answer a status move with 409 task_terminal.
	terminal map[string]bool
	// pushURL is announced as the token's push_url.
	pushURL string
	// revoked makes the token exchange refuse the key (401).
	revoked bool
}

// statusCall is one POST /v1/tasks/{id}/status the fake received.
type statusCall struct {
	TaskID string
	Req    meshclient.StatusRequest
}

func (f *fakeAPI) statusCalls() []statusCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]statusCall(nil), f.statuses...)
}

func newFakeAPI(t testing.TB, agent string, sealer *seal.Sealer, brokers []string, topic string) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{changed: make(chan struct{}), agent: agent, sealer: sealer, epoch: 1, brokers: brokers, topic: topic, served: map[int64]int{}, terminal: map[string]bool{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// add commits the next event for the agent and returns it (body in clear).
// The agent is the recipient of the event's task.
func (f *fakeAPI) add(typ, from, text string) mesh.Envelope {
	return f.addBody(typ, from, map[string]any{"parts": []mesh.Part{{Kind: "text", Text: text}},
		"task": map[string]string{"initiator": from, "recipient": f.agent}})
}

// addBody commits the next event with the given body.
func (f *fakeAPI) addBody(typ, from string, b any) mesh.Envelope {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := int64(len(f.events) + 1)
	body, _ := json.Marshal(b)
	env := mesh.Envelope{
		V: mesh.EnvelopeVersion, EventID: "ev-" + f.agent + "-" + strconv.FormatInt(seq, 10), Seq: seq, Type: typ,
		To: f.agent, From: from, TaskID: "task-" + strconv.FormatInt(seq, 10), ContextID: "ctx-1", MessageID: "msg-" + strconv.FormatInt(seq, 10),
		OccurredAt: time.Now().UTC().Truncate(time.Millisecond), KeyEpoch: f.epoch, Body: body,
	}
	f.events = append(f.events, env)
	close(f.changed)
	f.changed = make(chan struct{})
	return env
}

func (f *fakeAPI) servedCount(seq int64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served[seq]
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if task, ok := strings.CutPrefix(r.URL.Path, "/v1/tasks/"); ok && r.Method == http.MethodPost && strings.HasSuffix(task, "/status") {
		task = strings.TrimSuffix(task, "/status")
		var req meshclient.StatusRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.statuses = append(f.statuses, statusCall{TaskID: task, Req: req})
		terminal := f.terminal[task]
		f.terminal[task] = req.Status == mesh.TaskFailed || terminal
		f.mu.Unlock()
		if terminal {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(409)
			_, _ = w.Write([]byte(`{"code":"task_terminal","status":409}`))
			return
		}
		writeJSON(w, 200, meshclient.StatusResult{TaskID: task, Status: req.Status, MessageID: req.MessageID})
		return
	}
	switch r.Method + " " + r.URL.Path {
	case "POST /v1/auth/token":
		var req struct {
			APIKey string `json:"api_key"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		revoked := f.revoked
		f.mu.Unlock()
		if req.APIKey == "amk_revoked" || revoked {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(401)
			_, _ = w.Write([]byte(`{"code":"invalid_api_key","status":401,"detail":"the API key is unknown, revoked or malformed"}`))
			return
		}
		f.mu.Lock()
		epoch, pushURL := f.epoch, f.pushURL
		f.tokens++
		f.mu.Unlock()
		// Like the mesh: the keys of every epoch from the oldest retained
		// event's to the current one.
		keys := []meshclient.InboxKey{}
		for e := 1; e <= epoch; e++ {
			keys = append(keys, meshclient.InboxKey{KeyEpoch: e, Key: base64.StdEncoding.EncodeToString(f.sealer.AgentKey(f.agent, e))})
		}
		writeJSON(w, 200, meshclient.Token{
			Token: "tok", ExpiresIn: 3600, AgentID: f.agent, RoutingID: f.sealer.RoutingID(f.agent), InboxKeys: keys,
			Kafka: meshclient.KafkaInfo{Brokers: f.brokers, Topic: f.topic, Auth: "none"}, PushURL: pushURL,
		})
	case "GET /v1/inbox":
		after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		if limit <= 0 {
			limit = 100
		}
		wait, _ := strconv.Atoi(r.URL.Query().Get("wait"))
		deadline := time.After(time.Duration(wait) * time.Second)
		for {
			f.mu.Lock()
			var out []mesh.Envelope
			for _, e := range f.events {
				if e.Seq > after && e.Seq >= f.oldest && len(out) < limit {
					e.Delivery = "sent"
					out = append(out, e)
					f.served[e.Seq]++
				}
			}
			f.inbox++
			changed, oldest := f.changed, f.oldest
			f.mu.Unlock()
			if len(out) > 0 || wait == 0 {
				next := after
				if len(out) > 0 {
					next = out[len(out)-1].Seq
				}
				if out == nil {
					out = []mesh.Envelope{}
				}
				writeJSON(w, 200, map[string]any{"events": out, "next_after": next, "oldest_seq": max(oldest, 1)})
				return
			}
			select {
			case <-changed:
			case <-deadline:
				wait = 0
			case <-r.Context().Done():
				return
			}
		}
	case "POST /v1/agents/me/heartbeat":
		var req struct {
			InstanceID string         `json:"instance_id"`
			Stats      map[string]any `json:"stats"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.beats = append(f.beats, req.InstanceID)
		f.lastStats = req.Stats
		f.lastBeat = time.Now()
		last, epoch := int64(len(f.events)), f.epoch
		f.mu.Unlock()
		writeJSON(w, 200, meshclient.HeartbeatResult{Status: "active", LastSeq: last, KeyEpoch: epoch})
	case "DELETE /v1/agents/me/online":
		f.mu.Lock()
		f.offline++
		f.offAt = time.Now()
		f.mu.Unlock()
		writeJSON(w, 200, map[string]string{"status": "draining"})
	default:
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(404)
		_, _ = w.Write([]byte(`{"code":"not_found","status":404}`))
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
