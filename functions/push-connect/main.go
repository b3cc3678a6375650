// Command push-connect is the push channel's $connect route: it authenticates the handshake with the agent's token and records the connection (at most 2 per agent, the oldest closed).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/push/pushws"
)

func main() {
	env := app.MustLoad()
	relay := pushws.MustRelay(env)
	lambda.Start(pushws.Handlers(pushws.New(env, relay))["PushConnectFunction"])
}
