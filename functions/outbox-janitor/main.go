// Command outbox-janitor deletes settled outbox rows older than the retention (7 days), on an EventBridge schedule.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.Scheduled("OutboxJanitorFunction", taskshttp.Jobs(taskshttp.New(env)).Must("OutboxJanitorFunction")))
}
