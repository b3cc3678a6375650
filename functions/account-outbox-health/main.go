// Command account-outbox-health is the GET /v1/account/outbox function: outbox health and dead letters.
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
	lambda.Start(env.HTTP(accountshttp.Endpoints(accounts.New(env.Identity, taskshttp.New(env))).Must("AccountOutboxHealthFunction")))
}
