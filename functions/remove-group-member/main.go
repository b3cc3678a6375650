// Command remove-group-member is the DELETE /v1/groups/{id}/members/{agent} function: it removes a group member, or leaves.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identityhttp.Endpoints(env.Identity).Must("RemoveGroupMemberFunction")))
}
