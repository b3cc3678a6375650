// Command account-delete-agent is the DELETE /v1/account/agents/{id} function: delete one of the account's agents.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/accounts/accountshttp"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/push/pushws"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

func main() {
	env := app.MustLoad()
	relay := pushws.MustRelay(env)
	// A deletion closes the deleted agent's push connections.
	pushws.CloseOnRevocation(env, relay)
	lambda.Start(env.HTTP(accountshttp.Endpoints(accounts.New(env.Identity, taskshttp.New(env))).Must("AccountDeleteAgentFunction")))
}
