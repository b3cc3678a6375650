// Command dispatcher drains the outbox into Kafka on an EventBridge schedule.
// Each invocation keeps draining for most of a minute, so delivery is
// near-continuous while the schedule fires once a minute.
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
