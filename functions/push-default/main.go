// Command push-default is the push channel's $default route: a client data frame, within a small per-connection budget.
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
	lambda.Start(pushws.Handlers(pushws.New(env, relay))["PushDefaultFunction"])
}
