// Command task-scanner fails tasks idle for the idle timeout (24 h) and tells both parties, on an EventBridge schedule.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/tasks/taskshttp"
)

func main() {
	env := app.MustLoad()
	lambda.Start(env.Scheduled("TaskScannerFunction", taskshttp.Jobs(taskshttp.New(env)).Must("TaskScannerFunction")))
}
