// Command auth-token is the POST /v1/auth/token function: it exchanges an API
// key for a 1-hour JWT and the inbox keys. It alone holds the JWT signing
// keys, and at deploy time it publishes their public halves to CloudFormation
// (Custom::JwtPublicKeys) for the functions that verify tokens.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.WithCustomResource(
		env.HTTP(identityhttp.Endpoints(env.Identity).Must("AuthTokenFunction")),
		identityhttp.PublicKeysResource(env.Config.JWTKeys)))
}
