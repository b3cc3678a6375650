// Command console is the GET /console and GET /console/{proxy+} function: the web console's pages and assets.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/console"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
	"github.com/agentmesh/agentmesh/shared/tracing"
)

func main() {
	env := app.MustLoad()
	c := console.New(accounts.New(env.Identity, taskshttp.New(env)), env.Log)
	lambda.Start(tracing.HTTP(c.Handler()))
}
