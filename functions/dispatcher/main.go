// Command dispatcher drains the outbox into Kafka on an EventBridge schedule.
// Each invocation drains for 62 s and the schedule fires every minute, so
// invocations overlap and delivery never pauses; each ends before its
// function timeout (see dispatch.Dispatcher.Run).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/dispatch"
)

func main() {
	env := app.MustLoad()
	d, err := dispatch.NewKafkaDispatcher(context.Background(), env.DB, env.Config, env.Log)
	if err != nil {
		env.Log.Error("dispatcher init failed", "err", err)
		panic(err)
	}
	lambda.Start(env.Scheduled("DispatcherFunction", d.Job))
}
