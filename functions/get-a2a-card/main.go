// Command get-a2a-card is the GET /v1/agents/me/a2a-card function: the calling agent's A2A card settings, published or not.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/cards/cardshttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.HTTP(cardshttp.Endpoints(cards.New(env.DB, env.Config.A2AURL)).Must("GetA2aCardFunction")))
}
