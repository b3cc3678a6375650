// Package tracing is the only place that knows the tracing backend (AWS X-Ray
// today). Its upstream support ends in February 2027; moving to OpenTelemetry
// means rewriting this one package, not its callers.
package tracing

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-xray-sdk-go/strategy/ctxmissing"
	"github.com/aws/aws-xray-sdk-go/xray"
)

func init() {
	// Outside Lambda (local stack, tests) there is no segment: ignore quietly
	// instead of logging an error per call.
	if err := xray.Configure(xray.Config{ContextMissingStrategy: ctxmissing.NewDefaultIgnoreErrorStrategy()}); err != nil {
		log.Printf("tracing: %v", err)
	}
}

// Span runs fn in a named subsegment of the current trace, if there is one.
func Span(ctx context.Context, name string, fn func(context.Context) error) error {
	return xray.Capture(ctx, name, fn)
}

// TraceID returns the current trace id, or "" outside a traced invocation.
func TraceID(ctx context.Context) string { return xray.TraceID(ctx) }

// HTTP wraps an HTTP API handler in a subsegment named after its route.
func HTTP(h func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, err error) {
		_ = Span(ctx, ev.RouteKey, func(ctx context.Context) error {
			resp, err = h(ctx, ev)
			return err
		})
		return resp, err
	}
}
