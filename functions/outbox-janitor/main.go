// Command outbox-janitor deletes settled outbox rows older than the retention (7 days), on an EventBridge schedule.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.Scheduled("OutboxJanitorFunction", tasks.Jobs(tasks.New(env)).Must("OutboxJanitorFunction")))
}
