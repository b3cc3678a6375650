// Command list-friends is the GET /v1/friends function: it lists the caller's friends with presence.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identity.Endpoints(env.Identity).Must("ListFriendsFunction")))
}
