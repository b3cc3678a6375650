package tasks_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
	"github.com/agentmesh/agentmesh/shared/tasks/taskstest"
)

// kebab turns a logical ID into its function directory and event name.
func kebab(logicalID string) string {
	n := strings.TrimSuffix(logicalID, "Function")
	return strings.ToLower(regexp.MustCompile(`([a-z0-9])([A-Z])`).ReplaceAllString(n, "$1-$2"))
}

// The sample events under events/ are real inputs: each one, with a real
// caller instead of its token placeholder, runs through its handler against
// a database that holds the agents, group and task it names, and succeeds.
func TestSampleEventsRunThroughTheirHandlers(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ops-agent", "translator-bot", "researcher")
	f.friends(t, "ops-agent", "translator-bot")
	f.group(t, "research-team", "ctx-research", "ops-agent", "researcher", "translator-bot")
	f.taskIn(t, "0b8f1c52-3d7e-4a9b-8c1d-2e5f6a7b8c9d", "ops-agent", "translator-bot", mesh.TaskWorking, t0)
	template, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}

	// In an order that makes every one valid: the task is working when the
	// reply and the status move (to input-required) arrive.
	httpCases := []struct {
		fn     string
		caller string
		status int
	}{
		{"SendMessageFunction", "ops-agent", 202},
		{"SendGroupMessageFunction", "ops-agent", 202},
		{"ListTasksFunction", "translator-bot", 200},
		{"ReplyFunction", "translator-bot", 202},
		{"UpdateTaskStatusFunction", "translator-bot", 200},
		{"AddArtifactFunction", "translator-bot", 201},
		{"GetTaskFunction", "ops-agent", 200},
		{"ListTaskMessagesFunction", "ops-agent", 200},
		{"InboxFunction", "ops-agent", 200},
	}
	if len(httpCases) != len(f.eps) {
		t.Fatalf("%d endpoints, %d sample events tested", len(f.eps), len(httpCases))
	}
	for _, c := range httpCases {
		name := kebab(c.fn)
		t.Run("events/"+name+".json runs as "+c.caller, func(t *testing.T) {
			if !strings.Contains(string(template), "\n  "+c.fn+":\n") {
				t.Errorf("template.yaml has no %s", c.fn)
			}
			if _, err := os.Stat("../../functions/" + name + "/main.go"); err != nil {
				t.Error(err)
			}
			b, err := os.ReadFile("../../events/" + name + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var ev events.APIGatewayV2HTTPRequest
			if err := json.Unmarshal(b, &ev); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(ev.Headers["authorization"], "Bearer <agent") || ev.Version != "2.0" || ev.RouteKey != ev.RequestContext.RouteKey {
				t.Fatalf("not an HTTP API v2 event with the agent token placeholder: %+v", ev)
			}
			ev.Headers["authorization"] = "Bearer " + c.caller
			// The inbox sample long-polls up to 20 s; a Lambda-like deadline
			// bounds it should nothing be waiting.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			out, err := httpapi.Lambda(taskstest.TokenAuth{}, quiet, f.eps.Must(c.fn))(ctx, ev)
			if err != nil || out.StatusCode != c.status {
				t.Fatalf("got %d %s (%v), want %d", out.StatusCode, out.Body, err, c.status)
			}
		})
	}

	env := &app.Env{DB: f.db, Log: quiet}
	for fn, job := range taskshttp.Jobs(f.svc) {
		name := kebab(fn)
		t.Run("events/"+name+".json runs the scheduled job", func(t *testing.T) {
			if !strings.Contains(string(template), "\n  "+fn+":\n") {
				t.Errorf("template.yaml has no %s", fn)
			}
			b, err := os.ReadFile("../../events/" + name + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var ev events.EventBridgeEvent
			if err := json.Unmarshal(b, &ev); err != nil || ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" {
				t.Fatalf("not a scheduled event: %+v %v", ev, err)
			}
			if err := env.Scheduled(fn, job)(context.Background(), ev); err != nil {
				t.Fatal(err)
			}
		})
	}
}
