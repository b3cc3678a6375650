// Command account-drain-agent is the POST /v1/account/agents/{id}/drain function: mark one of the account's agents draining.
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
	lambda.Start(env.HTTP(accountshttp.Endpoints(accounts.New(env.Identity, taskshttp.New(env))).Must("AccountDrainAgentFunction")))
}
