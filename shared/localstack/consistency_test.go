package localstack

// Consistency between template.yaml (the single source of truth) and what
// lives beside it: function directories, sample events, the local registry.
// The OpenAPI document has its own test (openapi_test.go).

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/events"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/agentmesh/agentmesh/shared/apigwlocal"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
	"github.com/agentmesh/agentmesh/shared/push/pushaws"
	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

// repoTemplate loads the repository's template.yaml.
func repoTemplate(t *testing.T) (*samtemplate.Template, string) {
	t.Helper()
	root, err := samtemplate.FindRepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := samtemplate.Load(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return tpl, root
}

func TestEveryTemplateFunctionHasItsDirectoryAndSampleEventAndNothingElseDoes(t *testing.T) {
	tpl, root := repoTemplate(t)
	dirs := map[string]string{}
	for _, f := range tpl.Functions {
		dirs[f.Dir] = f.LogicalID
		t.Run(f.LogicalID+" has functions/"+f.Dir+"/main.go and events/"+f.Dir+".json", func(t *testing.T) {
			for _, p := range []string{filepath.Join("functions", f.Dir, "main.go"), filepath.Join("events", f.Dir+".json")} {
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s: %v", p, err)
				}
			}
		})
	}
	t.Run("every directory under functions/ belongs to a template function", func(t *testing.T) {
		entries, err := os.ReadDir(filepath.Join(root, "functions"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() && dirs[e.Name()] == "" {
				t.Errorf("functions/%s has no function in template.yaml", e.Name())
			}
		}
	})
	t.Run("every file under events/ is the sample event of a template function", func(t *testing.T) {
		entries, err := os.ReadDir(filepath.Join(root, "events"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			name, ok := strings.CutSuffix(e.Name(), ".json")
			if !ok || e.IsDir() || dirs[name] == "" {
				t.Errorf("events/%s is not the sample event of a template function", e.Name())
			}
		}
	})
}

// decodeStrict decodes b into v, refusing unknown fields (a misspelt field
// in a sample event would otherwise be silently dropped).
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func TestSampleEventsAreRealEventsOfTheirFunction(t *testing.T) {
	tpl, root := repoTemplate(t)
	router, err := apigwlocal.NewRouter(tpl)
	if err != nil {
		t.Fatal(err)
	}
	wsRoutes := tpl.WebSocketFunctions()
	for _, f := range tpl.Functions {
		path := filepath.Join(root, "events", f.Dir+".json")
		raw, err := os.ReadFile(path)
		if err != nil {
			continue // reported by the directory test
		}
		switch {
		case len(wsRoutes[f.LogicalID]) > 0:
			t.Run("events/"+f.Dir+".json is a WebSocket API event of a route of "+f.LogicalID, func(t *testing.T) {
				var ev events.APIGatewayWebsocketProxyRequest
				if err := decodeStrict(raw, &ev); err != nil {
					t.Fatalf("not an APIGatewayWebsocketProxyRequest: %v", err)
				}
				rc := ev.RequestContext
				want := map[string]string{"$connect": "CONNECT", "$disconnect": "DISCONNECT", "$default": "MESSAGE"}[rc.RouteKey]
				found := false
				for _, api := range tpl.WebSocketAPIs {
					found = found || (api.Routes[rc.RouteKey] == f.LogicalID && api.Stage == rc.Stage)
				}
				if !found || want == "" || rc.EventType != want || rc.ConnectionID == "" || rc.RequestID == "" {
					t.Errorf("requestContext does not describe a route of %s in template.yaml (%v): %+v", f.LogicalID, wsRoutes[f.LogicalID], rc)
				}
			})
		case f.URL != nil:
			t.Run("events/"+f.Dir+".json is a Function URL event under "+f.URL.LocalPath, func(t *testing.T) {
				var ev events.LambdaFunctionURLRequest
				if err := decodeStrict(raw, &ev); err != nil {
					t.Fatalf("not a LambdaFunctionURLRequest: %v", err)
				}
				rc := ev.RequestContext
				if ev.Version != "2.0" || !strings.HasPrefix(ev.RawPath, f.URL.LocalPath) || rc.HTTP.Path != ev.RawPath || rc.HTTP.Method == "" || rc.RequestID == "" || rc.TimeEpoch == 0 || rc.DomainName == "" {
					t.Errorf("not a Function URL request under %s: %+v", f.URL.LocalPath, ev)
				}
			})
		case f.LogicalID == "PushRelayFunction":
			t.Run("events/"+f.Dir+".json is a request the relay function takes", func(t *testing.T) {
				var req pushaws.RelayRequest
				if err := decodeStrict(raw, &req); err != nil {
					t.Fatalf("not a relay request: %v", err)
				}
				if err := req.Validate(); err != nil || len(req.Posts) == 0 {
					t.Errorf("not a valid relay request with posts: %v", err)
				}
			})
		case len(f.Routes) > 0:
			t.Run("events/"+f.Dir+".json is an HTTP API event that routes to "+f.LogicalID, func(t *testing.T) {
				var ev events.APIGatewayV2HTTPRequest
				if err := decodeStrict(raw, &ev); err != nil {
					t.Fatalf("not an APIGatewayV2HTTPRequest: %v", err)
				}
				checkHTTPEvent(t, f, router, ev)
			})
		case len(f.Schedules) > 0:
			t.Run("events/"+f.Dir+".json is an EventBridge scheduled event", func(t *testing.T) {
				var ev events.EventBridgeEvent
				if err := decodeStrict(raw, &ev); err != nil {
					t.Fatalf("not an EventBridgeEvent: %v", err)
				}
				if ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" || ev.Version != "0" || ev.ID == "" || ev.Time.IsZero() || len(ev.Resources) == 0 {
					t.Errorf("not a scheduled event: %+v", ev)
				}
			})
		case len(f.CustomResources) > 0:
			t.Run("events/"+f.Dir+".json is a CloudFormation request of its custom resource", func(t *testing.T) {
				var ev struct {
					cfn.Event
					// Real requests also carry the ServiceToken at the top level.
					ServiceToken string `json:"ServiceToken"`
				}
				if err := decodeStrict(raw, &ev); err != nil {
					t.Fatalf("not a CloudFormation custom resource request: %v", err)
				}
				switch ev.RequestType {
				case cfn.RequestCreate, cfn.RequestUpdate, cfn.RequestDelete:
				default:
					t.Errorf("RequestType %q", ev.RequestType)
				}
				found := false
				for _, cr := range f.CustomResources {
					found = found || (cr.LogicalID == ev.LogicalResourceID && cr.Type == ev.ResourceType)
				}
				if !found {
					t.Errorf("LogicalResourceId %q / ResourceType %q is not a custom resource of %s in template.yaml (%v)", ev.LogicalResourceID, ev.ResourceType, f.LogicalID, f.CustomResources)
				}
				if ev.ResourceProperties["ServiceToken"] == nil || ev.RequestID == "" || ev.ResponseURL == "" || ev.StackID == "" {
					t.Errorf("incomplete request: %+v", ev)
				}
			})
		default:
			t.Errorf("%s has no route, schedule or custom resource: nothing can invoke it", f.LogicalID)
		}
	}
}

func checkHTTPEvent(t *testing.T, f samtemplate.Function, router *apigwlocal.Router, ev events.APIGatewayV2HTTPRequest) {
	t.Helper()
	var route *samtemplate.Route
	for i := range f.Routes {
		if f.Routes[i].Key() == ev.RouteKey {
			route = &f.Routes[i]
		}
	}
	if route == nil {
		t.Fatalf("routeKey %q is not a route of %s in template.yaml", ev.RouteKey, f.LogicalID)
	}
	if ev.Version != "2.0" {
		t.Errorf("version %q, want 2.0", ev.Version)
	}
	rc := ev.RequestContext
	if rc.RouteKey != ev.RouteKey || rc.HTTP.Method != route.Method || rc.HTTP.Path != ev.RawPath || rc.Stage != "$default" || rc.RequestID == "" || rc.TimeEpoch == 0 {
		t.Errorf("requestContext does not describe %s on %s: %+v", ev.RouteKey, ev.RawPath, rc)
	}
	m := router.Match(rc.HTTP.Method, ev.RawPath)
	if m.Function != f.LogicalID || m.Route.Key() != ev.RouteKey {
		t.Errorf("%s %s routes to %q (%s), want %s (%s)", rc.HTTP.Method, ev.RawPath, m.Function, m.Route.Key(), f.LogicalID, ev.RouteKey)
	}
	if len(m.PathParameters)+len(ev.PathParameters) > 0 && !reflect.DeepEqual(m.PathParameters, ev.PathParameters) {
		t.Errorf("pathParameters %v, but rawPath gives %v", ev.PathParameters, m.PathParameters)
	}
	for name := range ev.Headers {
		if name != strings.ToLower(name) {
			t.Errorf("header %q is not lower-case as API Gateway sends it", name)
		}
	}
	if ev.IsBase64Encoded {
		if _, err := base64.StdEncoding.DecodeString(ev.Body); err != nil {
			t.Errorf("isBase64Encoded but the body is not base64: %v", err)
		}
	} else if strings.HasPrefix(ev.Headers["content-type"], "application/x-www-form-urlencoded") {
		// The OAuth token endpoint takes a form (RFC 6749 §4.4.2).
		if _, err := url.ParseQuery(ev.Body); err != nil {
			t.Errorf("body is not a form: %v", err)
		}
	} else if ev.Body != "" && !json.Valid([]byte(ev.Body)) {
		t.Errorf("body is not JSON: %s", ev.Body)
	}
}

// newRegistryEnv builds what NewRegistry needs on a fresh real database and
// an in-process Kafka broker.
func newRegistryEnv(t *testing.T) (*app.Env, Deps) {
	t.Helper()
	_, dsn := mysqltest.New(t)
	cluster, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(2, "inbox.events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	secrets, err := LoadSecrets(filepath.Join(t.TempDir(), "secrets.json"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"MYSQL_DSN": dsn, "MESH_ADMIN_KEY": secrets.AdminKey, "MESH_JWT_KEYS": secrets.JWTKeys,
		"MESH_INBOX_MASTER_KEY": secrets.InboxMasterKey, "KAFKA_BROKERS": strings.Join(cluster.ListenAddrs(), ","),
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.DB.Close() })
	d, err := dispatch.NewKafkaDispatcher(ctx, e.DB, cfg, e.Log)
	if err != nil {
		t.Fatal(err)
	}
	if kp, ok := d.Publisher.(dispatch.KafkaPublisher); ok {
		t.Cleanup(kp.Client.Close)
	}
	return e, Deps{Dispatcher: d}
}

func TestRegistryServesExactlyTheTemplatesRoutesAndSchedules(t *testing.T) {
	tpl, _ := repoTemplate(t)
	env, deps := newRegistryEnv(t)
	reg, err := NewRegistry(env, deps)
	if err != nil {
		t.Fatal(err)
	}
	// Route, schedule and Function URL sets on both sides, so a failure
	// names the route.
	var wantRoutes, gotRoutes, wantSchedules, gotSchedules, wantURLs, gotURLs []string
	for _, f := range tpl.Functions {
		if f.URL != nil {
			wantURLs = append(wantURLs, "Function URL "+f.URL.LocalPath+" → "+f.LogicalID)
			if reg.URL[f.LogicalID] != nil {
				gotURLs = append(gotURLs, "Function URL "+f.URL.LocalPath+" → "+f.LogicalID)
			}
		}
		for _, r := range f.Routes {
			wantRoutes = append(wantRoutes, r.Key()+" → "+f.LogicalID)
			if reg.HTTP[f.LogicalID] != nil {
				gotRoutes = append(gotRoutes, r.Key()+" → "+f.LogicalID)
			}
		}
		for _, s := range f.Schedules {
			wantSchedules = append(wantSchedules, s.Expr+" → "+f.LogicalID)
			if reg.Jobs[f.LogicalID] != nil {
				gotSchedules = append(gotSchedules, s.Expr+" → "+f.LogicalID)
			}
		}
	}
	for id := range reg.HTTP {
		if f, ok := tpl.Function(id); !ok || len(f.Routes) == 0 {
			gotRoutes = append(gotRoutes, "(no route in template.yaml) → "+id)
		}
	}
	for id := range reg.Jobs {
		if f, ok := tpl.Function(id); !ok || len(f.Schedules) == 0 {
			gotSchedules = append(gotSchedules, "(no schedule in template.yaml) → "+id)
		}
	}
	for id := range reg.URL {
		if f, ok := tpl.Function(id); !ok || f.URL == nil {
			gotURLs = append(gotURLs, "(no FunctionUrlConfig in template.yaml) → "+id)
		}
	}
	sort.Strings(gotURLs)
	sort.Strings(wantURLs)
	sort.Strings(gotRoutes)
	sort.Strings(wantRoutes)
	sort.Strings(gotSchedules)
	sort.Strings(wantSchedules)
	t.Run("the routes are the template's", func(t *testing.T) { diffSets(t, "route", gotRoutes, wantRoutes) })
	t.Run("the schedules are the template's", func(t *testing.T) { diffSets(t, "schedule", gotSchedules, wantSchedules) })
	t.Run("the Function URLs are the template's", func(t *testing.T) { diffSets(t, "Function URL", gotURLs, wantURLs) })
	t.Run("Check agrees", func(t *testing.T) {
		if err := reg.Check(tpl); err != nil {
			t.Error(err)
		}
	})
}

func diffSets(t *testing.T, what string, got, want []string) {
	t.Helper()
	in := func(s []string, x string) bool {
		i := sort.SearchStrings(s, x)
		return i < len(s) && s[i] == x
	}
	for _, w := range want {
		if !in(got, w) {
			t.Errorf("%s in template.yaml but not served locally: %s", what, w)
		}
	}
	for _, g := range got {
		if !in(want, g) {
			t.Errorf("%s served locally but not in template.yaml: %s", what, g)
		}
	}
}
