// Command send-friend-request is the POST /v1/friends/requests function: it asks another agent to be friends.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identity.Endpoints(env.Identity).Must("SendFriendRequestFunction")))
}
