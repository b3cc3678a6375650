// Package localstacktest serves the real mesh API in-process for tests:
// the routes of template.yaml, the handlers the Lambda binaries run, a fresh
// migrated database (mysqltest) and freshly generated secrets, optionally
// with a real Kafka topic and the outbox dispatcher. Test code only: no
// function binary may import it (shared/buildcheck).
package localstacktest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/apigwlocal"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/localstack"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

// Options shape the stack; the zero value is the API on a database, without
// Kafka, logging nowhere.
type Options struct {
	// Env sets or overrides configuration variables (MESH_TASK_IDLE_TIMEOUT,
	// KAFKA_BROKERS, ...); an empty value counts as unset.
	Env map[string]string
	// Kafka, when set, gives the stack a fresh topic on the real broker
	// (kafkatest) of Partitions partitions (default 3) and a dispatcher
	// wired to it, which the test runs when it wants the outbox drained.
	Kafka      bool
	Partitions int32
	// Log receives the logs of the handlers, the server and the dispatcher.
	Log *slog.Logger
	// Push announces the stack's own WebSocket API to the handlers:
	// MESH_PUSH_URL and MESH_PUSH_ENDPOINT are set to PushURL and
	// PushEndpoint (unless Env sets them).
	Push bool
	// WebSocket sets the WebSocket API's limits (zero: AWS's); a short
	// MaxConnAge simulates 2 h passing.
	WebSocket apigwlocal.WebSocketOptions
}

// pushStage is the StageName of the template's WebSocket API.
const pushStage = "push"

// Stack is a running in-process mesh API.
type Stack struct {
	// URL is the base URL of the API (an httptest server).
	URL string
	// PushURL is the WebSocket API's URL (ws://host/push) and PushEndpoint
	// its @connections management endpoint (http://host/push), both on
	// the API's port.
	PushURL, PushEndpoint string
	// A2AURL is the base of the A2A gateway's Function URL, served on the
	// API's port too (http://host; an agent's endpoint is
	// {A2AURL}/a2a/agents/{agent_id}). The handlers see it as MESH_A2A_URL,
	// and URL as MESH_PUBLIC_API_URL (unless Options.Env sets them).
	A2AURL string
	// Gateway serves the API; it counts invocations (Invocations) and
	// live WebSocket connections.
	Gateway *apigwlocal.Gateway
	// AdminKey authenticates the /v1/admin routes.
	AdminKey string
	// Config is the configuration the handlers run with.
	Config config.Config
	// Env is the application environment (database pool, identity, log).
	Env *app.Env
	// Registry holds every function's handler and scheduled job.
	Registry apigwlocal.Registry
	// Template is the repository's template.yaml.
	Template *samtemplate.Template
	// Root is the repository's root directory.
	Root string
	// Brokers, Topic and Dispatcher are set with Options.Kafka.
	Brokers    []string
	Topic      string
	Dispatcher *dispatch.Dispatcher
}

// Start serves the API until the test ends.
func Start(t testing.TB, o Options) *Stack {
	t.Helper()
	ctx := context.Background()
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	_, dsn := mysqltest.New(t)
	vars := map[string]string{"MYSQL_DSN": dsn}
	st := &Stack{}
	// The listener comes first: the configuration names the stack's URLs.
	api := httptest.NewUnstartedServer(nil)
	t.Cleanup(api.Close) // also when Start fails before serving
	st.URL = "http://" + api.Listener.Addr().String()
	st.PushURL = apigwlocal.WebSocketURL(st.URL, pushStage)
	st.PushEndpoint = apigwlocal.ManagementEndpoint(st.URL, pushStage)
	if o.Push {
		vars["MESH_PUSH_URL"], vars["MESH_PUSH_ENDPOINT"] = st.PushURL, st.PushEndpoint
	}
	st.A2AURL = st.URL
	vars["MESH_A2A_URL"], vars["MESH_PUBLIC_API_URL"] = st.A2AURL, st.URL
	if o.Kafka {
		partitions := o.Partitions
		if partitions == 0 {
			partitions = 3
		}
		st.Brokers = kafkatest.Brokers(t)
		st.Topic = kafkatest.Topic(t, st.Brokers, partitions)
		vars["KAFKA_BROKERS"] = strings.Join(st.Brokers, ",")
		vars["KAFKA_TOPIC"] = st.Topic
	}
	for k, v := range o.Env {
		vars[k] = v
	}
	// The same generator as meshlocal's, into a file of this test's own.
	secrets, err := localstack.LoadSecrets(filepath.Join(t.TempDir(), "secrets.json"), func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	vars["MESH_ADMIN_KEY"], vars["MESH_JWT_KEYS"], vars["MESH_INBOX_MASTER_KEY"] = secrets.AdminKey, secrets.JWTKeys, secrets.InboxMasterKey
	st.AdminKey = secrets.AdminKey
	if st.Config, err = config.Load(func(k string) string { return vars[k] }); err != nil {
		t.Fatal(err)
	}
	if st.Env, err = app.New(ctx, st.Config, log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Env.DB.Close() })
	localstack.SizeAPIPool(st.Env.DB)
	if o.Kafka {
		var closeDispatcher func()
		if st.Dispatcher, closeDispatcher, err = localstack.NewDispatcher(ctx, st.Config, log); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeDispatcher)
	}
	if st.Registry, err = localstack.NewRegistry(st.Env, localstack.Deps{Dispatcher: st.Dispatcher}); err != nil {
		t.Fatal(err)
	}
	if st.Root, err = samtemplate.FindRepoRoot("."); err != nil {
		t.Fatal(err)
	}
	if st.Template, err = samtemplate.Load(filepath.Join(st.Root, "template.yaml")); err != nil {
		t.Fatal(err)
	}
	if st.Gateway, err = apigwlocal.NewGateway(st.Template, st.Registry, o.WebSocket, log); err != nil {
		api.Close()
		t.Fatal(err)
	}
	api.Config.Handler = st.Gateway
	api.Start()
	// Registered after the database's cleanup, so it runs before it: every
	// $disconnect has run when the pool closes.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := st.Gateway.Shutdown(ctx); err != nil {
			t.Errorf("localstacktest: %v", err)
		}
		api.Close()
	})
	return st
}

// AdminPOST posts in as JSON to path with the admin key and decodes the
// answer into out (unless nil); anything but a 2xx fails the test.
func (st *Stack) AdminPOST(t testing.TB, path string, in, out any) {
	t.Helper()
	st.Call(t, http.MethodPost, path, st.AdminKey, in, out)
}

// Call sends in (as JSON, unless nil) with method to path, authenticated
// with bearer (the admin key or an agent's token), and decodes the answer
// into out (unless nil); anything but a 2xx fails the test.
func (st *Stack) Call(t testing.TB, method, path, bearer string, in, out any) {
	t.Helper()
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, st.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var p bytes.Buffer
		_, _ = p.ReadFrom(resp.Body)
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, p.String())
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: decoding the answer: %v", method, path, err)
		}
	}
}

// CreateAgent creates agent id (named id) and returns its API key.
func (st *Stack) CreateAgent(t testing.TB, id string) string {
	t.Helper()
	var out struct {
		APIKey string `json:"api_key"`
	}
	st.AdminPOST(t, "/v1/admin/agents", map[string]string{"agent_id": id, "name": id}, &out)
	if out.APIKey == "" {
		t.Fatalf("creating %s returned no api_key", id)
	}
	return out.APIKey
}

// Agents creates each agent and returns their API keys by id.
func (st *Stack) Agents(t testing.TB, ids ...string) map[string]string {
	t.Helper()
	keys := make(map[string]string, len(ids))
	for _, id := range ids {
		keys[id] = st.CreateAgent(t, id)
	}
	return keys
}

// Befriend makes a and b friends.
func (st *Stack) Befriend(t testing.TB, a, b string) {
	t.Helper()
	st.AdminPOST(t, "/v1/admin/friendships", map[string]string{"a": a, "b": b}, nil)
}
