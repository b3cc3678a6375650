package pushaws_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/push"
	"github.com/agentmesh/agentmesh/shared/push/pushaws"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// connectionsAPI is an httptest server speaking the @connections management
// API under /push: POST delivers, DELETE closes; gone connections answer
// 410 GoneException, broken ones 500.
type connectionsAPI struct {
	*httptest.Server
	mu       sync.Mutex
	got      map[string][]string // connection -> bodies, in arrival order
	closed   []string
	gone     map[string]bool
	broken   map[string]bool
	requests int
	bad      []string // requests that did not look like the SDK's
}

func newConnectionsAPI(t *testing.T, gone []string, broken ...string) *connectionsAPI {
	t.Helper()
	a := &connectionsAPI{got: map[string][]string{}, gone: map[string]bool{}, broken: map[string]bool{}}
	for _, g := range gone {
		a.gone[g] = true
	}
	for _, b := range broken {
		a.broken[b] = true
	}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.Close)
	return a
}

func (a *connectionsAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests++
	id, ok := strings.CutPrefix(r.URL.EscapedPath(), "/push/@connections/")
	if ok {
		id, _ = url.PathUnescape(id)
	}
	if auth := r.Header.Get("Authorization"); !ok || id == "" || !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || !strings.Contains(auth, "/execute-api/aws4_request") {
		a.bad = append(a.bad, fmt.Sprintf("%s %s (Authorization %q)", r.Method, r.URL.EscapedPath(), r.Header.Get("Authorization")))
		http.Error(w, "not an @connections call", http.StatusBadRequest)
		return
	}
	switch {
	case a.gone[id]:
		w.Header().Set("X-Amzn-ErrorType", "GoneException")
		w.WriteHeader(http.StatusGone)
		_, _ = w.Write([]byte(`{"message":"Gone"}`))
	case a.broken[id]:
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"message":"Internal server error"}`))
	case r.Method == http.MethodPost:
		a.got[id] = append(a.got[id], string(body))
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodDelete:
		a.closed = append(a.closed, id)
		w.WriteHeader(http.StatusNoContent)
	default:
		a.bad = append(a.bad, r.Method+" "+r.URL.Path)
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (a *connectionsAPI) received(id string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got[id])
}

func (a *connectionsAPI) check(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.bad) > 0 {
		t.Fatalf("requests unlike the SDK's @connections calls: %v", a.bad)
	}
}

func managementRelay(t *testing.T, api *connectionsAPI, log *testenv.Buffer) *pushaws.ManagementRelay {
	t.Helper()
	r, err := pushaws.NewManagementRelay(context.Background(), api.URL+"/push", testLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func msgs(conn string, from, to int) []push.Message {
	var out []push.Message
	for i := from; i <= to; i++ {
		out = append(out, push.Message{ConnectionID: conn, Data: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	return out
}

func bodies(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf(`{"n":%d}`, i))
	}
	return out
}

// interleave merges the messages of several connections, round robin, as a
// sender's batch mixes them.
func interleave(lists ...[]push.Message) []push.Message {
	var out []push.Message
	for i := 0; ; i++ {
		added := false
		for _, l := range lists {
			if i < len(l) {
				out, added = append(out, l[i]), true
			}
		}
		if !added {
			return out
		}
	}
}

func TestManagementRelay(t *testing.T) {
	t.Run("posts each connection its messages in order, at the stage's @connections path, signed for execute-api", func(t *testing.T) {
		api := newConnectionsAPI(t, nil)
		r := managementRelay(t, api, &testenv.Buffer{})
		gone, err := r.Post(context.Background(), interleave(msgs("conn-A=", 1, 20), msgs("conn/B+", 1, 20)))
		if err != nil || len(gone) != 0 {
			t.Fatalf("Post: gone %v, err %v", gone, err)
		}
		api.check(t)
		for _, c := range []string{"conn-A=", "conn/B+"} {
			if got := api.received(c); !slices.Equal(got, bodies(1, 20)) {
				t.Fatalf("%s received %v, want bodies 1..20 in order", c, got)
			}
		}
	})

	t.Run("a connection answering 410 is reported gone and gets nothing more, the others are served", func(t *testing.T) {
		api := newConnectionsAPI(t, []string{"old"})
		r := managementRelay(t, api, &testenv.Buffer{})
		gone, err := r.Post(context.Background(), interleave(msgs("old", 1, 5), msgs("new", 1, 5)))
		if err != nil || !slices.Equal(gone, []string{"old"}) {
			t.Fatalf("Post: gone %v, err %v; want gone [old]", gone, err)
		}
		if got := api.received("new"); !slices.Equal(got, bodies(1, 5)) {
			t.Fatalf("new received %v", got)
		}
		api.mu.Lock()
		calls := api.requests
		api.mu.Unlock()
		if calls != 6 {
			t.Fatalf("%d calls, want 6: one 410 for old, then nothing more to it; 5 for new", calls)
		}
	})

	t.Run("any other failure is logged and dropped, not retried, and not reported gone", func(t *testing.T) {
		api := newConnectionsAPI(t, nil, "flaky")
		var log testenv.Buffer
		r := managementRelay(t, api, &log)
		gone, err := r.Post(context.Background(), msgs("flaky", 1, 3))
		if err != nil || len(gone) != 0 {
			t.Fatalf("Post: gone %v, err %v; want neither", gone, err)
		}
		api.mu.Lock()
		calls := api.requests
		api.mu.Unlock()
		if calls != 3 {
			t.Fatalf("%d calls for 3 messages, want 3 (no retries)", calls)
		}
		if !strings.Contains(log.String(), "flaky") || strings.Contains(log.String(), `{\"n\":1}`) {
			t.Fatalf("the failure must be logged with its connection and without the data: %s", log.String())
		}
	})

	t.Run("Close deletes each connection once and ignores ones already gone", func(t *testing.T) {
		api := newConnectionsAPI(t, []string{"gone"})
		r := managementRelay(t, api, &testenv.Buffer{})
		if err := r.Close(context.Background(), []string{"a", "gone", "b", "a"}); err != nil {
			t.Fatal(err)
		}
		api.check(t)
		api.mu.Lock()
		closed := slices.Sorted(slices.Values(api.closed))
		api.mu.Unlock()
		if !slices.Equal(closed, []string{"a", "b"}) {
			t.Fatalf("closed %v, want [a b]", closed)
		}
	})
}

// maxAsyncPayload is Lambda's limit on an asynchronous invocation's
// request.
const maxAsyncPayload = 256 << 10

// lambdaAPI is an httptest Lambda Invoke endpoint that runs the relay
// handler for function name, as Lambda would.
type lambdaAPI struct {
	*httptest.Server
	mu       sync.Mutex
	payloads []int    // sizes of the requests, in order
	types    []string // their invocation types, in order
	bad      []string
}

func newLambdaAPI(t *testing.T, name string, handler func(context.Context, pushaws.RelayRequest) (pushaws.RelayResponse, error)) *lambdaAPI {
	t.Helper()
	l := &lambdaAPI{}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		l.mu.Lock()
		l.payloads = append(l.payloads, len(body))
		typ := r.Header.Get("X-Amz-Invocation-Type")
		l.types = append(l.types, typ)
		if r.Method != http.MethodPost || r.URL.Path != "/2015-03-31/functions/"+name+"/invocations" ||
			(typ != "RequestResponse" || len(body) > pushaws.MaxInvokePayload) && (typ != "Event" || len(body) > maxAsyncPayload) {
			l.bad = append(l.bad, fmt.Sprintf("%s %s type %q, %d bytes", r.Method, r.URL.Path, r.Header.Get("X-Amz-Invocation-Type"), len(body)))
			l.mu.Unlock()
			http.Error(w, `{"message":"bad invoke"}`, http.StatusBadRequest)
			return
		}
		l.mu.Unlock()
		var req pushaws.RelayRequest
		var out any
		if typ == "Event" {
			// Lambda accepts the event at once and runs it later; here,
			// before answering, so the test can look at the result.
			if err := json.Unmarshal(body, &req); err == nil {
				_, _ = handler(context.WithoutCancel(r.Context()), req)
			}
			w.WriteHeader(http.StatusAccepted)
			return
		}
		if err := json.Unmarshal(body, &req); err != nil {
			w.Header().Set("X-Amz-Function-Error", "Unhandled")
			out = map[string]string{"errorMessage": err.Error()}
		} else if resp, err := handler(r.Context(), req); err != nil {
			w.Header().Set("X-Amz-Function-Error", "Unhandled")
			out = map[string]string{"errorMessage": err.Error(), "errorType": "errorString"}
		} else {
			out = resp
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(l.Close)
	return l
}

func (l *lambdaAPI) relay(name string) *pushaws.LambdaRelay {
	cl := lambda.New(lambda.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(l.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		Retryer:      aws.NopRetryer{},
	})
	return &pushaws.LambdaRelay{Client: cl, Function: name}
}

func TestLambdaRelay(t *testing.T) {
	t.Run("posts and closes reach the connections through the relay function and its management relay", func(t *testing.T) {
		api := newConnectionsAPI(t, []string{"old"})
		fn := newLambdaAPI(t, "PushRelay", pushaws.RelayHandler(managementRelay(t, api, &testenv.Buffer{})))
		r := fn.relay("PushRelay")
		gone, err := r.Post(context.Background(), interleave(msgs("a", 1, 10), msgs("old", 1, 10)))
		if err != nil || !slices.Equal(gone, []string{"old"}) {
			t.Fatalf("Post: gone %v, err %v; want gone [old]", gone, err)
		}
		if got := api.received("a"); !slices.Equal(got, bodies(1, 10)) {
			t.Fatalf("a received %v", got)
		}
		if err := r.Close(context.Background(), []string{"a"}); err != nil {
			t.Fatal(err)
		}
		api.check(t)
		if len(fn.bad) > 0 {
			t.Fatalf("invocations unlike Lambda Invoke: %v", fn.bad)
		}
		api.mu.Lock()
		defer api.mu.Unlock()
		if !slices.Equal(api.closed, []string{"a"}) {
			t.Fatalf("closed %v, want [a]", api.closed)
		}
	})

	t.Run("a batch over Lambda's payload limit is split into invocations under it, keeping each connection's order", func(t *testing.T) {
		api := newConnectionsAPI(t, nil)
		fn := newLambdaAPI(t, "PushRelay", pushaws.RelayHandler(managementRelay(t, api, &testenv.Buffer{})))
		big := func(conn string, n int) []push.Message {
			var out []push.Message
			for i := 1; i <= n; i++ {
				d := bytes.Repeat([]byte{'x'}, push.MaxMessageBytes)
				copy(d, fmt.Sprintf("%04d", i))
				out = append(out, push.Message{ConnectionID: conn, Data: d})
			}
			return out
		}
		// 2 × 40 × 128 KB = 10 MB of data, 13.3 MB as base64: at least 3 parts.
		if _, err := fn.relay("PushRelay").Post(context.Background(), interleave(big("a", 40), big("b", 40))); err != nil {
			t.Fatal(err)
		}
		if len(fn.bad) > 0 {
			t.Fatalf("invocations unlike Lambda Invoke or over its limit: %v", fn.bad)
		}
		if len(fn.payloads) < 3 {
			t.Fatalf("%d invocations (%v bytes), want the 13 MB split in at least 3", len(fn.payloads), fn.payloads)
		}
		for _, c := range []string{"a", "b"} {
			got := api.received(c)
			if len(got) != 40 {
				t.Fatalf("%s received %d messages, want 40", c, len(got))
			}
			for i, m := range got {
				if m[:4] != fmt.Sprintf("%04d", i+1) {
					t.Fatalf("%s: message %d is %q..., want them in order", c, i, m[:4])
				}
			}
		}
	})

	t.Run("ByeAndClose hands byes and closes to the relay function asynchronously, each connection told bye before it is closed", func(t *testing.T) {
		api := newConnectionsAPI(t, []string{"gone-already"})
		fn := newLambdaAPI(t, "PushRelay", pushaws.RelayHandler(managementRelay(t, api, &testenv.Buffer{})))
		var ids []string
		for i := range pushaws.MaxAsyncCloses*2 + 1 {
			// The longest ids there are, for the largest requests.
			ids = append(ids, fmt.Sprintf("%0*d", push.MaxIDLength, i))
		}
		ids = append(ids, "gone-already")
		bye := push.ByeFrame("revoked")
		if err := fn.relay("PushRelay").ByeAndClose(context.Background(), ids, bye); err != nil {
			t.Fatal(err)
		}
		fn.mu.Lock()
		types, bad := slices.Clone(fn.types), slices.Clone(fn.bad)
		fn.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("invocations unlike Lambda's or over its asynchronous limit: %v", bad)
		}
		if !slices.Equal(types, []string{"Event", "Event", "Event"}) {
			t.Fatalf("invocation types %v, want 3 asynchronous ones (Event) of at most %d connections", types, pushaws.MaxAsyncCloses)
		}
		api.check(t)
		for _, id := range ids[:len(ids)-1] {
			if got := api.received(id); !slices.Equal(got, []string{string(bye)}) {
				t.Fatalf("connection %s received %q, want the bye", id, got)
			}
		}
		api.mu.Lock()
		defer api.mu.Unlock()
		if len(api.closed) != len(ids)-1 {
			t.Fatalf("%d connections closed, want %d", len(api.closed), len(ids)-1)
		}
	})

	t.Run("a failing relay function is an error of the call, not a gone connection", func(t *testing.T) {
		fn := newLambdaAPI(t, "PushRelay", func(context.Context, pushaws.RelayRequest) (pushaws.RelayResponse, error) {
			return pushaws.RelayResponse{}, fmt.Errorf("injected relay failure")
		})
		gone, err := fn.relay("PushRelay").Post(context.Background(), msgs("a", 1, 1))
		if err == nil || !strings.Contains(err.Error(), "injected relay failure") || len(gone) != 0 {
			t.Fatalf("Post: gone %v, err %v; want the function's error", gone, err)
		}
	})
}

// countingRelay counts the calls RelayHandler makes.
type countingRelay struct{ posts, closes int }

func (c *countingRelay) Post(_ context.Context, m []push.Message) ([]string, error) {
	c.posts += len(m)
	return nil, nil
}

func (c *countingRelay) Close(_ context.Context, ids []string) error {
	c.closes += len(ids)
	return nil
}

func TestRelayHandlerRefusesRequestsOutOfBoundsUntouched(t *testing.T) {
	post := func(id string, size int) pushaws.RelayPost {
		return pushaws.RelayPost{ConnectionID: id, Data: bytes.Repeat([]byte{'x'}, size)}
	}
	many := func(n int) []pushaws.RelayPost {
		out := make([]pushaws.RelayPost, n)
		for i := range out {
			out[i] = post(fmt.Sprintf("c%d", i), 10)
		}
		return out
	}
	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("c%d", i)
		}
		return out
	}
	tests := []struct {
		name    string
		req     pushaws.RelayRequest
		wantErr string // "" for accepted
	}{
		{"a request within every bound is relayed", pushaws.RelayRequest{Posts: append(many(pushaws.MaxRelayPosts-1), post("big", push.MaxMessageBytes)), Closes: ids(pushaws.MaxRelayCloses)}, ""},
		{"more posts than MaxRelayPosts are refused", pushaws.RelayRequest{Posts: many(pushaws.MaxRelayPosts + 1)}, "posts in one request"},
		{"more closes than MaxRelayCloses are refused", pushaws.RelayRequest{Closes: ids(pushaws.MaxRelayCloses + 1)}, "closes in one request"},
		{"a message over MaxMessageBytes is refused", pushaws.RelayRequest{Posts: []pushaws.RelayPost{post("a", 1), post("b", push.MaxMessageBytes+1)}}, "posts[1]: data"},
		{"an empty message is refused", pushaws.RelayRequest{Posts: []pushaws.RelayPost{post("a", 0)}}, "posts[0]: data"},
		{"a post without a connection id is refused", pushaws.RelayRequest{Posts: []pushaws.RelayPost{post("", 1)}}, "posts[0]: connection_id"},
		{"a connection id with a space is refused", pushaws.RelayRequest{Closes: []string{"a b"}}, "closes[0]: connection_id"},
		{"a connection id over MaxIDLength is refused", pushaws.RelayRequest{Closes: []string{strings.Repeat("c", push.MaxIDLength+1)}}, "closes[0]: connection_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			relay := &countingRelay{}
			resp, err := pushaws.RelayHandler(relay)(context.Background(), tc.req)
			if tc.wantErr == "" {
				if err != nil || relay.posts != len(tc.req.Posts) || relay.closes != len(tc.req.Closes) || resp.Gone == nil {
					t.Fatalf("err %v, relayed %d posts and %d closes, gone %v; want all relayed and gone []", err, relay.posts, relay.closes, resp.Gone)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
			}
			if relay.posts != 0 || relay.closes != 0 {
				t.Fatalf("a refused request relayed %d posts and %d closes", relay.posts, relay.closes)
			}
		})
	}
}

func TestFromConfigPicksTheRelayOfTheDeployment(t *testing.T) {
	tests := []struct {
		name    string
		cfg     config.Config
		want    string // type name, "" for nil
		wantErr bool
	}{
		{"a function in the VPC invokes the relay function", config.Config{PushRelayFunction: "agent-mesh-PushRelayFunction", PushEndpoint: "http://127.0.0.1:1/push"}, "*pushaws.LambdaRelay", false},
		{"a function with a management endpoint posts to it directly", config.Config{PushEndpoint: "http://127.0.0.1:1/push"}, "*pushaws.ManagementRelay", false},
		{"without either there is no relay and no error", config.Config{}, "", false},
		{"an endpoint that is not an http(s) URL is an error", config.Config{PushEndpoint: "ftp://x/push"}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := pushaws.FromConfig(context.Background(), tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			got := ""
			if r != nil {
				got = fmt.Sprintf("%T", r)
			}
			if got != tc.want {
				t.Fatalf("relay %s, want %q", got, tc.want)
			}
		})
	}
}

func testLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }
