// Command admin-rotate-key is the POST /v1/admin/agents/{id}/keys function: it issues a new API key for an agent (admin).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
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
	// A revocation closes the revoked keys' push connections.
	pushws.CloseOnRevocation(env, relay)
	lambda.Start(env.HTTP(identityhttp.Endpoints(env.Identity).Must("AdminRotateKeyFunction")))
}
