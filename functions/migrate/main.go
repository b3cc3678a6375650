// Command migrate is the deploy-time function behind the CloudFormation
// custom resource SchemaMigration: it applies the embedded schema migrations
// and creates the inbox topic, then reports to CloudFormation.
package main

import (
	"os"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/deploy"
)

func main() {
	lambda.Start(cfn.LambdaWrap(deploy.Handler(os.Getenv, app.NewLogger())))
}
