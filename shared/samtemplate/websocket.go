package samtemplate

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/awslabs/goformation/v7/intrinsics"
)

// WebSocketAPI is one AWS::ApiGatewayV2::Api of ProtocolType WEBSOCKET.
type WebSocketAPI struct {
	LogicalID string
	// Stage is the StageName of its AWS::ApiGatewayV2::Stage: the path the
	// API is served at (wss://host/<stage>, as on AWS).
	Stage string
	// Routes maps each route key ($connect, $disconnect, $default) to the
	// logical ID of the function its AWS_PROXY integration invokes.
	Routes map[string]string
}

// WebSocketRouteKeys are the route keys the local stack emulates. Custom
// keys would need the API's RouteSelectionExpression evaluated on every
// message; the mesh has none.
var WebSocketRouteKeys = []string{"$connect", "$disconnect", "$default"}

// WebSocketFunctions returns the logical IDs of the functions some
// WebSocket route invokes, with the route keys ("PushApi $connect").
func (t *Template) WebSocketFunctions() map[string][]string {
	out := map[string][]string{}
	for _, api := range t.WebSocketAPIs {
		for key, fn := range api.Routes {
			out[fn] = append(out[fn], api.LogicalID+" "+key)
		}
	}
	for _, keys := range out {
		sort.Strings(keys)
	}
	return out
}

// rawResource is a resource as written, intrinsics left unresolved (JSON
// form: !Ref X is {"Ref":"X"}, !Sub is {"Fn::Sub":...}).
type rawResource struct {
	Type       string
	Properties map[string]any
}

// readRaw reads the template's resources with the intrinsic functions as
// written. goformation resolves !GetAtt and the ${X.Arn} of !Sub to
// placeholders, which loses the function an integration invokes.
func readRaw(path string) (map[string]rawResource, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	raw, err := intrinsics.ProcessYAML(data, &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		return nil, fmt.Errorf("samtemplate: parse %s: %w", path, err)
	}
	var doc struct {
		Resources map[string]rawResource
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("samtemplate: parse %s: %w", path, err)
	}
	return doc.Resources, nil
}

// webSocketAPIs resolves every WebSocket API of the raw resources: its
// stage, and for each route Target → Integration → IntegrationUri → the
// function. functions holds the template's function logical IDs; a route
// that names anything else is an error naming it.
func webSocketAPIs(res map[string]rawResource, functions map[string]bool) ([]WebSocketAPI, []error) {
	var errs []error
	apis := map[string]*WebSocketAPI{}
	for id, r := range res {
		if r.Type == "AWS::ApiGatewayV2::Api" && strings.EqualFold(str(r.Properties["ProtocolType"]), "WEBSOCKET") {
			apis[id] = &WebSocketAPI{LogicalID: id, Routes: map[string]string{}}
		}
	}
	ids := make([]string, 0, len(res))
	for id := range res {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := res[id]
		switch r.Type {
		case "AWS::ApiGatewayV2::Stage":
			api := apis[refName(r.Properties["ApiId"])]
			if api == nil {
				continue
			}
			name := str(r.Properties["StageName"])
			switch {
			case name == "" || strings.ContainsAny(name, "/?#% "):
				errs = append(errs, fmt.Errorf("%s: StageName %q is not a plain path segment", id, name))
			case api.Stage != "":
				errs = append(errs, fmt.Errorf("%s has two stages (%s and %s); the local stack serves one", api.LogicalID, api.Stage, name))
			default:
				api.Stage = name
			}
		case "AWS::ApiGatewayV2::Route":
			api := apis[refName(r.Properties["ApiId"])]
			if api == nil {
				continue
			}
			key := str(r.Properties["RouteKey"])
			fn, err := routeFunction(res, id, r, functions)
			switch {
			case err != nil:
				errs = append(errs, err)
			case !isBuiltinRouteKey(key):
				errs = append(errs, fmt.Errorf("%s: route key %q is not emulated by the local stack (%s are)", id, key, strings.Join(WebSocketRouteKeys, ", ")))
			case api.Routes[key] != "":
				errs = append(errs, fmt.Errorf("%s: route %s of %s is declared twice", id, key, api.LogicalID))
			default:
				api.Routes[key] = fn
			}
		}
	}
	var out []WebSocketAPI
	stages := map[string]string{}
	for _, api := range apis {
		if api.Stage == "" {
			errs = append(errs, fmt.Errorf("%s: a WebSocket API needs an AWS::ApiGatewayV2::Stage (its StageName is the path it is served at)", api.LogicalID))
			continue
		}
		if other, ok := stages[api.Stage]; ok {
			errs = append(errs, fmt.Errorf("%s and %s are both served at stage %q", other, api.LogicalID, api.Stage))
			continue
		}
		stages[api.Stage] = api.LogicalID
		out = append(out, *api)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LogicalID < out[j].LogicalID })
	return out, errs
}

func isBuiltinRouteKey(key string) bool {
	for _, k := range WebSocketRouteKeys {
		if k == key {
			return true
		}
	}
	return false
}

// routeFunction follows a route's Target ("integrations/<id>") to its
// integration and the function its IntegrationUri invokes.
func routeFunction(res map[string]rawResource, routeID string, route rawResource, functions map[string]bool) (string, error) {
	integID := integrationID(route.Properties["Target"])
	if integID == "" {
		return "", fmt.Errorf("%s: Target must be integrations/<integration> (!Sub \"integrations/${X}\" or !Join)", routeID)
	}
	integ, ok := res[integID]
	if !ok || integ.Type != "AWS::ApiGatewayV2::Integration" {
		return "", fmt.Errorf("%s: Target names %s, which is not an AWS::ApiGatewayV2::Integration of the template", routeID, integID)
	}
	if t := str(integ.Properties["IntegrationType"]); t != "AWS_PROXY" {
		return "", fmt.Errorf("%s: IntegrationType %q is not emulated by the local stack (AWS_PROXY is)", integID, t)
	}
	fn := uriFunction(integ.Properties["IntegrationUri"])
	if fn == "" {
		return "", fmt.Errorf("%s: IntegrationUri must name a function with ${<Function>.Arn} in a !Sub", integID)
	}
	if !functions[fn] {
		return "", fmt.Errorf("%s: route %s invokes %s, which is not an AWS::Serverless::Function of the template", integID, routeID, fn)
	}
	return fn, nil
}

var (
	subIntegration = regexp.MustCompile(`^integrations/\$\{([A-Za-z0-9]+)\}$`)
	subFunctionArn = regexp.MustCompile(`\$\{([A-Za-z0-9]+)\.Arn\}`)
	subVariable    = regexp.MustCompile(`\$\{([A-Za-z0-9]+)\}`)
)

// integrationID reads the integration's logical ID out of a route Target:
// !Sub "integrations/${X}" or !Join ["/", ["integrations", !Ref X]].
func integrationID(target any) string {
	m, ok := target.(map[string]any)
	if !ok {
		return ""
	}
	if s, ok := m["Fn::Sub"].(string); ok {
		if sm := subIntegration.FindStringSubmatch(s); sm != nil {
			return sm[1]
		}
		return ""
	}
	if j, ok := m["Fn::Join"].([]any); ok && len(j) == 2 {
		parts, _ := j[1].([]any)
		if str(j[0]) == "/" && len(parts) == 2 && str(parts[0]) == "integrations" {
			return refName(parts[1])
		}
	}
	return ""
}

// uriFunction reads the function out of an IntegrationUri: the ${X.Arn} of
// a !Sub string, or a ${Var} of a !Sub [string, {Var: !GetAtt X.Arn}].
func uriFunction(uri any) string {
	m, ok := uri.(map[string]any)
	if !ok {
		return ""
	}
	switch sub := m["Fn::Sub"].(type) {
	case string:
		if sm := subFunctionArn.FindStringSubmatch(sub); sm != nil {
			return sm[1]
		}
	case []any:
		if len(sub) != 2 {
			return ""
		}
		s, _ := sub[0].(string)
		vars, _ := sub[1].(map[string]any)
		if sm := subFunctionArn.FindStringSubmatch(s); sm != nil {
			return sm[1]
		}
		for _, v := range subVariable.FindAllStringSubmatch(s, -1) {
			if fn := getAttArn(vars[v[1]]); fn != "" {
				return fn
			}
		}
	}
	return ""
}

// getAttArn returns X for !GetAtt X.Arn in either of its JSON forms.
func getAttArn(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	switch ga := m["Fn::GetAtt"].(type) {
	case []any:
		if len(ga) == 2 && ga[1] == "Arn" {
			s, _ := ga[0].(string)
			return s
		}
	case string:
		if fn, ok := strings.CutSuffix(ga, ".Arn"); ok {
			return fn
		}
	}
	return ""
}

// refName returns X for {"Ref": "X"}.
func refName(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	return str(m["Ref"])
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
