// Command console is the GET /console and GET /console/{proxy+} function: the web console's pages and assets.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/console"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
	"github.com/agentmesh/agentmesh/shared/tracing"
)

func main() {
	env := app.MustLoad()
	acc := accounts.New(env.Identity, taskshttp.New(env))
	// The console shows each agent's card URL under MESH_A2A_URL.
	acc.Cards = cards.New(env.DB, env.Config.A2AURL)
	c := console.New(acc, env.Log)
	lambda.Start(tracing.HTTP(c.Handler()))
}
