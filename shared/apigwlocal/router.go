// Package apigwlocal emulates, on one machine, the two AWS services that
// invoke the mesh's functions: API Gateway HTTP API, which it plays by
// routing each request to a route of the SAM template and invoking the
// function's handler with the same events.APIGatewayV2HTTPRequest (payload
// 2.0) the Lambda binary receives, and EventBridge, which it plays by
// firing each Schedule at its rate. It knows nothing about the mesh: the
// caller supplies the template and the handler and job of each function.
package apigwlocal

import (
	"net/url"
	"sort"
	"strings"

	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

type compiledRoute struct {
	samtemplate.Route
	function string
	segs     []samtemplate.Segment
}

// Router matches requests to the template's routes the way API Gateway HTTP
// API selects a route: method and path must both match, and among matching
// paths the most specific one wins, segment by segment.
type Router struct {
	routes []compiledRoute
}

// NewRouter builds a router over every route of t.
func NewRouter(t *samtemplate.Template) (*Router, error) {
	r := &Router{}
	for _, f := range t.Functions {
		for _, rt := range f.Routes {
			segs, err := samtemplate.ParsePath(rt.Path)
			if err != nil {
				return nil, err
			}
			r.routes = append(r.routes, compiledRoute{Route: rt, function: f.LogicalID, segs: segs})
		}
	}
	// Most specific first, so the first match wins.
	sort.SliceStable(r.routes, func(i, j int) bool { return moreSpecific(r.routes[i].segs, r.routes[j].segs) })
	return r, nil
}

func moreSpecific(a, b []samtemplate.Segment) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i].Kind != b[i].Kind {
			return a[i].Kind < b[i].Kind
		}
	}
	return len(a) > len(b)
}

// Match is the outcome of routing one request.
type Match struct {
	// Function is the logical ID of the function that serves the request; ""
	// when nothing matched.
	Function string
	Route    samtemplate.Route
	// PathParameters holds the decoded values of the path's variables.
	PathParameters map[string]string
	// Allow lists the methods the path supports when the method did not
	// match (405); empty when the path is unknown (404).
	Allow []string
}

// Match routes method and the request's escaped path (as sent on the wire).
func (r *Router) Match(method, escapedPath string) Match {
	if !strings.HasPrefix(escapedPath, "/") {
		return Match{}
	}
	parts := strings.Split(escapedPath[1:], "/")
	allow := map[string]bool{}
	for _, rt := range r.routes {
		params, ok := matchSegments(rt.segs, parts)
		if !ok {
			continue
		}
		if rt.Method != method && rt.Method != "ANY" {
			allow[rt.Method] = true
			continue
		}
		return Match{Function: rt.function, Route: rt.Route, PathParameters: params}
	}
	m := Match{}
	for k := range allow {
		m.Allow = append(m.Allow, k)
	}
	sort.Strings(m.Allow)
	return m
}

func matchSegments(segs []samtemplate.Segment, parts []string) (map[string]string, bool) {
	var params map[string]string
	set := func(name, raw string) bool {
		v, err := url.PathUnescape(raw)
		if err != nil {
			return false
		}
		if params == nil {
			params = map[string]string{}
		}
		params[name] = v
		return true
	}
	for i, s := range segs {
		if s.Kind == samtemplate.Greedy {
			rest := strings.Join(parts[i:], "/")
			if rest == "" || !set(s.Text, rest) {
				return nil, false
			}
			return params, true
		}
		if i >= len(parts) {
			return nil, false
		}
		switch s.Kind {
		case samtemplate.Literal:
			if parts[i] != s.Text {
				return nil, false
			}
		case samtemplate.Var:
			if parts[i] == "" || !set(s.Text, parts[i]) {
				return nil, false
			}
		}
	}
	if len(parts) != len(segs) {
		return nil, false
	}
	return params, true
}
