// Command health is the GET /v1/health function.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(env.Endpoints().Must("HealthFunction")))
}
