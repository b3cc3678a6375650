// Command a2a is the A2aFunction: the A2A 1.0 gateway (shared/a2agw),
// served through a Lambda Function URL with InvokeMode RESPONSE_STREAM so
// SSE streams reach the client as they are written. Its directory is what
// the Makefile's build rule (and samtemplate.FunctionDir) derive from the
// logical ID A2aFunction.
package main

import (
	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/agentmesh/agentmesh/shared/a2agw"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

func main() {
	env := app.MustLoad()
	lambdaurl.Start(a2agw.New(env, taskshttp.New(env), cards.New(env.DB, env.Config.A2AURL)).Handler())
}
