// Command list-task-messages is the GET /v1/tasks/{id}/messages function.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(taskshttp.Endpoints(taskshttp.New(env)).Must("ListTaskMessagesFunction")))
}
