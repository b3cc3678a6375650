// Command push-default is the push channel's $default route: a client data frame, within a small per-connection budget.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/push/pushws"
)

func main() {
	env := app.MustLoad()
	relay := pushws.MustRelay(env)
	lambda.Start(pushws.Handlers(pushws.New(env, relay))["PushDefaultFunction"])
}
