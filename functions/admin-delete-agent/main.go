// Command admin-delete-agent is the DELETE /v1/admin/agents/{id} function: delete an agent (admin).
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
	lambda.Start(env.HTTP(accountshttp.Endpoints(accounts.New(env.Identity, taskshttp.New(env))).Must("AdminDeleteAgentFunction")))
}
