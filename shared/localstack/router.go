package localstack

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// segment kinds, ordered by how specific they are: API Gateway prefers a
// literal segment to a {var}, and a {var} to a greedy {var+}.
const (
	segLiteral = iota
	segVar
	segGreedy
)

type segment struct {
	kind int
	text string // the literal, or the variable's name
}

type compiledRoute struct {
	Route
	function string
	segs     []segment
}

func compilePath(path string) ([]segment, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("path %q must start with /", path)
	}
	parts := strings.Split(path[1:], "/")
	segs := make([]segment, len(parts))
	for i, p := range parts {
		switch {
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "+}"):
			if i != len(parts)-1 {
				return nil, fmt.Errorf("path %q: a greedy variable must be the last segment", path)
			}
			segs[i] = segment{segGreedy, p[1 : len(p)-2]}
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}"):
			segs[i] = segment{segVar, p[1 : len(p)-1]}
		case strings.ContainsAny(p, "{}"):
			return nil, fmt.Errorf("path %q: a variable must be a whole segment", path)
		default:
			segs[i] = segment{segLiteral, p}
		}
		if segs[i].kind != segLiteral && segs[i].text == "" {
			return nil, fmt.Errorf("path %q: empty variable name", path)
		}
	}
	return segs, nil
}

// Router matches requests to the template's routes the way API Gateway HTTP
// API selects a route: method and path must both match, and among matching
// paths the most specific one wins, segment by segment.
type Router struct {
	routes []compiledRoute
}

// NewRouter builds a router over every route of t.
func NewRouter(t *Template) (*Router, error) {
	r := &Router{}
	for _, f := range t.Functions {
		for _, rt := range f.Routes {
			segs, err := compilePath(rt.Path)
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

func moreSpecific(a, b []segment) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i].kind != b[i].kind {
			return a[i].kind < b[i].kind
		}
	}
	return len(a) > len(b)
}

// Match is the outcome of routing one request.
type Match struct {
	// Function is the logical ID of the function that serves the request; ""
	// when nothing matched.
	Function string
	Route    Route
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

func matchSegments(segs []segment, parts []string) (map[string]string, bool) {
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
		if s.kind == segGreedy {
			rest := strings.Join(parts[i:], "/")
			if rest == "" || !set(s.text, rest) {
				return nil, false
			}
			return params, true
		}
		if i >= len(parts) {
			return nil, false
		}
		switch s.kind {
		case segLiteral:
			if parts[i] != s.text {
				return nil, false
			}
		case segVar:
			if parts[i] == "" || !set(s.text, parts[i]) {
				return nil, false
			}
		}
	}
	if len(parts) != len(segs) {
		return nil, false
	}
	return params, true
}
