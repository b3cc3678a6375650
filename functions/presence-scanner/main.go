// Command presence-scanner marks agents without a heartbeat for 90 s
// inactive, on an EventBridge schedule (rate(1 minute)).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.Scheduled("PresenceScannerFunction", env.Identity.ScanPresence))
}
