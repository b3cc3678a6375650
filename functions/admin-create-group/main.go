// Command admin-create-group is the POST /v1/admin/groups function: it creates a group with an owner and members (admin).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identityhttp.Endpoints(env.Identity).Must("AdminCreateGroupFunction")))
}
