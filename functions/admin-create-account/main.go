// Command admin-create-account is the POST /v1/admin/accounts function: create an account (a person who signs in to the console).
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
	lambda.Start(env.HTTP(accountshttp.Endpoints(accounts.New(env.Identity, taskshttp.New(env))).Must("AdminCreateAccountFunction")))
}
