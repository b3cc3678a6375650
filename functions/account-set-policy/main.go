// Command account-set-policy is the PUT /v1/account/agents/{id}/policy function: how friend requests to one of the account's agents are decided.
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
	lambda.Start(env.HTTP(accountshttp.Endpoints(accounts.New(env.Identity, taskshttp.New(env))).Must("AccountSetPolicyFunction")))
}
