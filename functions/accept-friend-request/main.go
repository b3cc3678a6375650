// Command accept-friend-request is the POST /v1/friends/requests/{id}/accept function: it accepts a friend request.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identity.Endpoints(env.Identity).Must("AcceptFriendRequestFunction")))
}
