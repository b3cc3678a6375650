package samtemplate

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadReadsFunctionsRoutesSchedulesAndCustomResources(t *testing.T) {
	tpl, err := Load("testdata/templates/ok.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []Function{
		{
			LogicalID: "EchoThingFunction", Dir: "echo-thing", Timeout: 25 * time.Second,
			Routes: []Route{{Method: "GET", Path: "/v1/things/{id}"}, {Method: "POST", Path: "/v1/things"}},
		},
		{
			LogicalID: "SetupFunction", Dir: "setup", Timeout: 25 * time.Second,
			CustomResources: []CustomResource{{LogicalID: "Setup", Type: "Custom::Setup"}},
		},
		{
			LogicalID: "TickFunction", Dir: "tick", Timeout: 70 * time.Second,
			Schedules: []Schedule{{Expr: "rate(5 minutes)", Every: 5 * time.Minute}},
		},
	}
	if !reflect.DeepEqual(tpl.Functions, want) {
		t.Errorf("functions:\n got %+v\nwant %+v", tpl.Functions, want)
	}
	if got := tpl.Routes(); !reflect.DeepEqual(got, map[string]string{
		"GET /v1/things/{id}": "EchoThingFunction", "POST /v1/things": "EchoThingFunction",
	}) {
		t.Errorf("Routes() = %v", got)
	}
}

func TestLoadRejectsWhatTheLocalStackCannotRun(t *testing.T) {
	tests := []struct {
		name, file, wantErr string
	}{
		{"a cron schedule is refused with advice", "cron.yaml", "cron expressions are not supported"},
		{"an SQS event is refused, naming the function", "sqs.yaml", `WorkerFunction event Jobs: event type "SQS" is not emulated`},
		{"a route declared twice is refused", "duplicate-route.yaml", "route GET /v1/things is declared by both OneFunction and TwoFunction"},
		{"an HttpApi event without method and path is refused", "catch-all.yaml", "HttpApi event needs Method and Path"},
		{"a missing file is an error", "does-not-exist.yaml", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("testdata/templates/" + tt.file)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseRate(t *testing.T) {
	tests := []struct {
		expr    string
		want    time.Duration
		wantErr string
	}{
		{"rate(1 minute)", time.Minute, ""},
		{"rate(5 minutes)", 5 * time.Minute, ""},
		{"rate(1 hour)", time.Hour, ""},
		{"rate(12 hours)", 12 * time.Hour, ""},
		{"rate(1 day)", 24 * time.Hour, ""},
		{"rate(7 days)", 7 * 24 * time.Hour, ""},
		{"rate(1 minutes)", 0, "singular unit for 1"},
		{"rate(5 minute)", 0, "singular unit for 1"},
		{"rate(0 minutes)", 0, "positive integer"},
		{"rate(5 seconds)", 0, "want rate(N"},
		{"rate(-1 minutes)", 0, "want rate(N"},
		{"cron(0/5 * * * ? *)", 0, "cron expressions are not supported"},
		{"every 5 minutes", 0, "want rate(N"},
	}
	for _, tt := range tests {
		name := tt.expr + " is " + tt.want.String()
		if tt.wantErr != "" {
			name = tt.expr + " is refused"
		}
		t.Run(name, func(t *testing.T) {
			got, err := ParseRate(tt.expr)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseRate(%q) = %v, %v; want %v", tt.expr, got, err, tt.want)
			}
		})
	}
}

func TestFunctionDirIsTheMakefilesKebabCase(t *testing.T) {
	tests := map[string]string{
		"HealthFunction":                "health",
		"AuthTokenFunction":             "auth-token",
		"AdminCreateFriendshipFunction": "admin-create-friendship",
		"GetMeFunction":                 "get-me",
		"Step2Function":                 "step2",
		"V1ThingFunction":               "v1-thing",
	}
	for id, want := range tests {
		t.Run(id+" lives in functions/"+want, func(t *testing.T) {
			if got := FunctionDir(id); got != want {
				t.Fatalf("FunctionDir(%q) = %q, want %q", id, got, want)
			}
		})
	}
}

func TestLoadResolvesEachWebSocketRouteToItsFunction(t *testing.T) {
	tpl, err := Load("testdata/templates/websocket.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []WebSocketAPI{{
		LogicalID: "PushApi", Stage: "push",
		Routes: map[string]string{
			"$connect":    "PushConnectFunction",
			"$disconnect": "PushDisconnectFunction",
			"$default":    "PushDefaultFunction",
		},
	}}
	if !reflect.DeepEqual(tpl.WebSocketAPIs, want) {
		t.Errorf("WebSocketAPIs:\n got %+v\nwant %+v", tpl.WebSocketAPIs, want)
	}
	if got := tpl.WebSocketFunctions(); !reflect.DeepEqual(got, map[string][]string{
		"PushConnectFunction":    {"PushApi $connect"},
		"PushDisconnectFunction": {"PushApi $disconnect"},
		"PushDefaultFunction":    {"PushApi $default"},
	}) {
		t.Errorf("WebSocketFunctions() = %v", got)
	}
	if _, ok := tpl.Function("PushRelayFunction"); !ok {
		t.Error("a function without events is still a function of the template")
	}
}

func TestLoadRejectsWebSocketAPIsTheLocalStackCannotServe(t *testing.T) {
	tests := []struct {
		name, file, wantErr string
	}{
		{"a route invoking a function the template lacks is refused, naming it", "websocket-unknown-function.yaml",
			"DefaultIntegration: route DefaultRoute invokes GoneFunction, which is not an AWS::Serverless::Function"},
		{"a WebSocket API without a stage is refused", "websocket-no-stage.yaml", "PushApi: a WebSocket API needs an AWS::ApiGatewayV2::Stage"},
		{"a custom route key is refused", "websocket-custom-route.yaml", `DefaultRoute: route key "sendmessage" is not emulated`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("testdata/templates/" + tt.file)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// The repository's own template must load, whatever WebSocket API it has.
func TestTheRepositoryTemplateLoads(t *testing.T) {
	tpl, err := Load("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, api := range tpl.WebSocketAPIs {
		for _, key := range WebSocketRouteKeys {
			if api.Routes[key] == "" {
				t.Errorf("%s has no %s route", api.LogicalID, key)
			}
		}
	}
}
