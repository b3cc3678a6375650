package identityhttp

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
)

// kebab turns a logical ID into its function directory and event name:
// AdminCreateAgentFunction -> admin-create-agent.
func kebab(logicalID string) string {
	n := strings.TrimSuffix(logicalID, "Function")
	return strings.ToLower(regexp.MustCompile(`([a-z0-9])([A-Z])`).ReplaceAllString(n, "$1-$2"))
}

// TestSampleEvents checks every sample event of identity's functions is the
// API Gateway payload of its template route, and that each one, given real
// credentials instead of its placeholder, runs through its handler without a
// server error.
func TestSampleEvents(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	ctx := context.Background()
	routes := templateRoutes(t)
	_, planner := identitytest.NewAgent(t, s, "planner")

	var names []string
	for name := range Endpoints(s) {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(kebab(name)+".json is a real "+routes[name]+" event", func(t *testing.T) {
			if _, err := os.Stat("../../../functions/" + kebab(name) + "/main.go"); err != nil {
				t.Errorf("function directory: %v", err)
			}
			b, err := os.ReadFile("../../../events/" + kebab(name) + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var ev events.APIGatewayV2HTTPRequest
			if err := json.Unmarshal(b, &ev); err != nil {
				t.Fatal(err)
			}
			method, tmpl, _ := strings.Cut(routes[name], " ")
			path := tmpl
			for k, v := range ev.PathParameters {
				path = strings.ReplaceAll(path, "{"+k+"}", v)
			}
			if ev.Version != "2.0" || ev.RouteKey != routes[name] || ev.RequestContext.RouteKey != routes[name] ||
				ev.RequestContext.HTTP.Method != method || ev.RawPath != path || ev.RequestContext.HTTP.Path != path ||
				strings.Contains(path, "{") || ev.RequestContext.RequestID == "" {
				t.Fatalf("event does not match route %q: %+v", routes[name], ev)
			}
			if ev.Body != "" && !json.Valid([]byte(ev.Body)) {
				t.Fatalf("body is not JSON: %s", ev.Body)
			}
			auth := ev.Headers["authorization"]
			switch {
			case name == "AuthTokenFunction":
				if auth != "" {
					t.Errorf("the token route needs no authorization header")
				}
			case strings.HasPrefix(name, "Admin"):
				if !strings.HasPrefix(auth, "Bearer <admin") {
					t.Errorf("authorization %q is not the admin placeholder", auth)
				}
				ev.Headers["authorization"] = bearer(identitytest.AdminKey)
			default:
				if !strings.HasPrefix(auth, "Bearer <agent") {
					t.Errorf("authorization %q is not the agent placeholder", auth)
				}
				ev.Headers["authorization"] = bearer(planner)
			}
			resp, err := invokerFor(s, name)(ctx, ev)
			if err != nil || resp.StatusCode >= 500 {
				t.Fatalf("%v %d %s", err, resp.StatusCode, resp.Body)
			}
			if resp.StatusCode >= 400 {
				problemCode(t, resp)
			}
		})
	}

	t.Run("presence-scanner.json is an EventBridge scheduled event", func(t *testing.T) {
		b, err := os.ReadFile("../../../events/presence-scanner.json")
		if err != nil {
			t.Fatal(err)
		}
		var ev events.EventBridgeEvent
		if err := json.Unmarshal(b, &ev); err != nil || ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" {
			t.Fatalf("%+v %v", ev, err)
		}
		if _, err := os.Stat("../../../functions/presence-scanner/main.go"); err != nil {
			t.Fatal(err)
		}
	})
}
