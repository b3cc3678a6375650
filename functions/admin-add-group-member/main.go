// Command admin-add-group-member is the POST /v1/admin/groups/{id}/members function: it adds an agent to a group (admin).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identityhttp.Endpoints(env.Identity).Must("AdminAddGroupMemberFunction")))
}
