package app

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/httpapi"
)

// WithCustomResource serves both the HTTP API and a CloudFormation custom
// resource from one function: a request carrying RequestType and
// ResponseURL is CloudFormation's (answered at its presigned URL), anything
// else is an API Gateway event. The token function publishes its public
// keys this way, so no other function needs its private ones.
func (e *Env) WithCustomResource(h httpapi.LambdaHandler, cr cfn.CustomResourceFunction) func(context.Context, json.RawMessage) (any, error) {
	wrapped := cfn.LambdaWrap(cr)
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var probe struct {
			RequestType string `json:"RequestType"`
			ResponseURL string `json:"ResponseURL"`
		}
		if json.Unmarshal(raw, &probe) == nil && probe.RequestType != "" && probe.ResponseURL != "" {
			var ev cfn.Event
			if err := json.Unmarshal(raw, &ev); err != nil {
				return nil, fmt.Errorf("custom resource request: %w", err)
			}
			e.Log.Info("custom resource", "request", probe.RequestType, "resource", ev.LogicalResourceID)
			return wrapped(ctx, ev)
		}
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, fmt.Errorf("not an API Gateway event: %w", err)
		}
		return h(ctx, ev)
	}
}
