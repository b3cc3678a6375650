// Command admin-create-friendship is the POST /v1/admin/friendships function: it makes two agents friends (admin).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identity.Endpoints(env.Identity).Must("AdminCreateFriendshipFunction")))
}
