// Command account-put-a2a-card is the PUT /v1/account/agents/{id}/a2a-card function: publishes, edits or withdraws the A2A card of one of the account's agents.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/accounts"
	"github.com/agentmesh/agentmesh/shared/accounts/accountshttp"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

func main() {
	env := app.MustLoad()
	acc := accounts.New(env.Identity, taskshttp.New(env))
	acc.Cards = cards.New(env.DB, env.Config.A2AURL)
	lambda.Start(env.HTTP(accountshttp.Endpoints(acc).Must("AccountPutA2aCardFunction")))
}
