// Command reject-friend-request is the POST /v1/friends/requests/{id}/reject function: it rejects (recipient) or withdraws (sender) a friend request.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identityhttp.Endpoints(env.Identity).Must("RejectFriendRequestFunction")))
}
