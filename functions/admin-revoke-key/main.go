// Command admin-revoke-key is the DELETE /v1/admin/agents/{id}/keys/{key_id} function: it revokes an API key (admin).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identityhttp.Endpoints(env.Identity).Must("AdminRevokeKeyFunction")))
}
