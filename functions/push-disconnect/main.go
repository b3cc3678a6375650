// Command push-disconnect is the push channel's $disconnect route: it forgets the connection.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/push/pushws"
)

func main() {
	env := app.MustLoad()
	// Forgetting a row needs no relay: the connection is already closed.
	lambda.Start(pushws.Handlers(pushws.New(env, nil))["PushDisconnectFunction"])
}
