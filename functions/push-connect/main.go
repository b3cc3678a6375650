// Command push-connect is the push channel's $connect route: it authenticates the handshake with the agent's token and records the connection (at most 2 per agent, the oldest closed).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/push/pushaws"
	"github.com/agentmesh/agentmesh/shared/push/pushws"
)

func main() {
	env := app.MustLoad()
	relay, err := pushaws.FromConfig(context.Background(), env.Config)
	if err != nil {
		env.Log.Error("push relay init failed", "err", err)
		panic(err)
	}
	lambda.Start(pushws.Handlers(pushws.New(env, relay))["PushConnectFunction"])
}
