// Package localstack wires the mesh for running on one machine: it says
// which handler and which scheduled job of the mesh serves each function of
// template.yaml (NewRegistry), and it keeps the local mesh's generated
// secrets (LoadSecrets). cmd/meshlocal (make run) and localstacktest serve
// that registry through apigwlocal, the API Gateway and EventBridge
// emulator, over the functions samtemplate reads from template.yaml.
package localstack

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/agentmesh/agentmesh/shared/a2agw"
	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/accounts/accountshttp"
	"github.com/agentmesh/agentmesh/shared/apigwlocal"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/cards/cardshttp"
	"github.com/agentmesh/agentmesh/shared/console"
	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/push"
	"github.com/agentmesh/agentmesh/shared/push/pushaws"
	"github.com/agentmesh/agentmesh/shared/push/pushws"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
	"github.com/agentmesh/agentmesh/shared/tracing"
)

// Deps are the long-lived clients the scheduled jobs need beyond app.Env.
type Deps struct {
	// Dispatcher drains the outbox into Kafka (DispatcherFunction).
	Dispatcher *dispatch.Dispatcher
	// Metrics receives the CloudWatch (EMF) lines of the handlers and jobs;
	// nil leaves each at its default (metrics.Default, stdout). The
	// dispatcher's own sink is the caller's to set.
	Metrics *metrics.Sink
}

// Replaced lists the template functions the local stack does not run,
// with what it does instead.
var Replaced = map[string]string{
	"MigrateFunction": "meshlocal applies the embedded migrations itself before serving",
	// On AWS the functions inside the VPC reach the @connections API
	// through PushRelayFunction; locally they reach meshlocal's directly,
	// with the same relay code that function runs.
	"PushRelayFunction": "the local functions call the @connections endpoint of the local WebSocket API directly",
}

// NewRegistry is the one place that says which handler and which job the
// local stack runs for each function of template.yaml. It collects the same
// exported maps the Lambda binaries pick their handler from, so the local
// stack and AWS run identical code; TestRegistryServesExactlyTheTemplatesRoutesAndSchedules keeps it equal
// to the template.
func NewRegistry(env *app.Env, deps Deps) (apigwlocal.Registry, error) {
	reg := apigwlocal.Registry{HTTP: map[string]httpapi.LambdaHandler{}, WebSocket: map[string]apigwlocal.WebSocketHandler{}, URL: map[string]apigwlocal.URLHandler{}, Jobs: app.Jobs{}, Replaced: Replaced}
	var dup []string
	addHTTP := func(eps httpapi.Endpoints) {
		for id, ep := range eps {
			if _, ok := reg.HTTP[id]; ok {
				dup = append(dup, id)
			}
			reg.HTTP[id] = env.HTTP(ep)
		}
	}
	addJob := func(id string, job app.Job) {
		if _, ok := reg.Jobs[id]; ok {
			dup = append(dup, id)
		}
		reg.Jobs[id] = job
	}

	ts := taskshttp.New(env)
	if deps.Metrics != nil {
		// taskshttp.New has already defaulted both sinks.
		ts.Metrics, ts.Inbox.Metrics = deps.Metrics, deps.Metrics
	}
	acc := accounts.New(env.Identity, ts)
	cs := cards.New(env.DB, env.Config.A2AURL)
	acc.Cards = cs
	addHTTP(cardshttp.Endpoints(cs))
	// The A2A gateway streams, so it is a Function URL (RESPONSE_STREAM),
	// not an HTTP API route: functions/a2a runs the same handler.
	reg.URL["A2aFunction"] = lambdaurl.Wrap(a2agw.New(env, ts, cs).Handler())
	addHTTP(env.Endpoints())
	addHTTP(identityhttp.Endpoints(env.Identity))
	addHTTP(taskshttp.Endpoints(ts))
	addHTTP(accountshttp.Endpoints(acc))
	// The console answers HTML, not the JSON of httpapi: functions/console
	// wraps the same handler.
	if _, ok := reg.HTTP["ConsoleFunction"]; ok {
		dup = append(dup, "ConsoleFunction")
	}
	reg.HTTP["ConsoleFunction"] = tracing.HTTP(console.New(acc, env.Log).Handler())
	// The OAuth token endpoint answers RFC 6749's JSON and reads a form:
	// functions/oauth-token wraps the same handler.
	if _, ok := reg.HTTP[identityhttp.OAuthTokenFunction]; ok {
		dup = append(dup, identityhttp.OAuthTokenFunction)
	}
	reg.HTTP[identityhttp.OAuthTokenFunction] = tracing.HTTP(identityhttp.OAuthToken(env.Identity, env.Log))

	addJob("PresenceScannerFunction", env.Identity.ScanPresence)
	for id, job := range taskshttp.Jobs(ts) {
		addJob(id, job)
	}
	if d := deps.Dispatcher; d != nil {
		// functions/dispatcher runs the same call.
		addJob("DispatcherFunction", d.Job)
	}

	// The push channel, wired as functions/push-* and the dispatcher wire
	// it: the relay is the @connections endpoint of MESH_PUSH_ENDPOINT
	// (the local WebSocket API), none when the mesh has no push channel.
	relay, err := pushaws.FromConfig(context.Background(), env.Config)
	if err != nil {
		return apigwlocal.Registry{}, err
	}
	conns := pushws.New(env, relay)
	for id, h := range pushws.Handlers(conns) {
		reg.WebSocket[id] = apigwlocal.WebSocketHandler(h)
	}
	for id, job := range pushws.Jobs(conns) {
		addJob(id, job)
	}
	env.Identity.OnKeysRevoked = conns.OnKeysRevoked
	if d := deps.Dispatcher; d != nil && relay != nil {
		// The dispatcher's push rounds look connections up on the
		// dispatcher's own pool, as functions/dispatcher wires them: not
		// behind the API's requests.
		dconns := *conns
		dconns.DB = d.DB
		d.Pusher = &push.Sender{Directory: &dconns, Relay: relay, Log: env.Log, Metrics: deps.Metrics}
	}

	if len(dup) > 0 {
		return apigwlocal.Registry{}, fmt.Errorf("localstack: functions registered twice: %v", dup)
	}
	return reg, nil
}
