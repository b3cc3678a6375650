// Command admin-rotate-key is the POST /v1/admin/agents/{id}/keys function: it issues a new API key for an agent (admin).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
	"github.com/agentmesh/agentmesh/shared/push/pushws"
)

func main() {
	env := app.MustLoad()
	relay := pushws.MustRelay(env)
	// A revocation closes the revoked keys' push connections.
	pushws.CloseOnRevocation(env, relay)
	lambda.Start(env.HTTP(identityhttp.Endpoints(env.Identity).Must("AdminRotateKeyFunction")))
}
