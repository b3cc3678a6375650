// Command admin-create-agent is the POST /v1/admin/agents function: it creates an agent and its first API key (admin).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identityhttp.Endpoints(env.Identity).Must("AdminCreateAgentFunction")))
}
