// Command heartbeat is the POST /v1/agents/me/heartbeat function: it records a presence heartbeat from meshd.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identity.Endpoints(env.Identity).Must("HeartbeatFunction")))
}
