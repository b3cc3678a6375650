// Command account-create-agent is the POST /v1/account/agents function: create an agent of the account (its API key is shown once).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/accounts/accountshttp"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(accountshttp.Endpoints(accounts.New(env.Identity, taskshttp.New(env))).Must("AccountCreateAgentFunction")))
}
