// Command inbox is the GET /v1/inbox function.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(taskshttp.Endpoints(taskshttp.New(env)).Must("InboxFunction")))
}
