package apigwlocal

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
)

// URLHandler is the handler of a function invoked through its Function URL
// with InvokeMode RESPONSE_STREAM: the signature lambdaurl.Wrap returns.
type URLHandler func(context.Context, *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error)
