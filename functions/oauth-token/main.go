// Command oauth-token is the POST /v1/oauth/token function: the OAuth 2.0
// client credentials grant (RFC 6749 §4.4) a stock A2A client uses, with the
// agent id as client_id and an API key as client_secret. Like auth-token it
// holds the JWT signing keys.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
	"github.com/agentmesh/agentmesh/shared/tracing"
)

func main() {
	env := app.MustLoad()
	lambda.Start(tracing.HTTP(identityhttp.OAuthToken(env.Identity, env.Log)))
}
