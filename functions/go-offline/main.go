// Command go-offline is the DELETE /v1/agents/me/online function: it marks the caller draining when its meshd stops.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/identity/identityhttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(identityhttp.Endpoints(env.Identity).Must("GoOfflineFunction")))
}
