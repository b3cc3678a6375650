// Command push-janitor closes and forgets push connections past their age or of revoked keys, on an EventBridge schedule.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/push/pushws"
)

func main() {
	env := app.MustLoad()
	relay := pushws.MustRelay(env)
	lambda.Start(env.Scheduled("PushJanitorFunction", pushws.Jobs(pushws.New(env, relay)).Must("PushJanitorFunction")))
}
