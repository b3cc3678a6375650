// Command dispatcher drains the outbox into Kafka on an EventBridge schedule.
// Each invocation drains for 62 s and the schedule fires every minute, so
// invocations overlap and delivery never pauses; each ends before its
// function timeout (see dispatch.Dispatcher.Run).
//
// When the push channel is configured (MESH_PUSH_RELAY_FUNCTION on AWS,
// where the VPC has no route to the @connections API; MESH_PUSH_ENDPOINT
// otherwise), every committed batch is also copied to the recipients' live
// WebSocket connections by a push.Sender.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/push"
	"github.com/agentmesh/agentmesh/shared/push/pushaws"
)

func main() {
	env := app.MustLoad()
	ctx := context.Background()
	d, err := dispatch.NewKafkaDispatcher(ctx, env.DB, env.Config, env.Log)
	if err != nil {
		env.Log.Error("dispatcher init failed", "err", err)
		panic(err)
	}
	relay, err := pushaws.FromConfig(ctx, env.Config)
	if err != nil {
		env.Log.Error("dispatcher init failed", "err", err)
		panic(err)
	}
	if relay != nil {
		conns := &push.Service{DB: env.DB, Identity: env.Identity, Relay: relay, MaxConnAge: env.Config.PushMaxConnAge, Log: env.Log}
		d.Pusher = &push.Sender{Directory: conns, Relay: relay, Log: env.Log}
	}
	lambda.Start(env.Scheduled("DispatcherFunction", d.Job))
}
