// Command list-friend-requests is the GET /v1/friends/requests function: it lists pending incoming and outgoing friend requests.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identityhttp.Endpoints(env.Identity).Must("ListFriendRequestsFunction")))
}
