package samtemplate

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/awslabs/goformation/v7/cloudformation/serverless"
)

// The Function URL settings the local stack serves.
const (
	// URLAuthNone is the only AuthType served: AWS_IAM would need SigV4
	// verification, which the local stack does not emulate.
	URLAuthNone = "NONE"
	// URLResponseStream is the only InvokeMode served: the handlers are
	// what lambdaurl.Wrap returns, which streams.
	URLResponseStream = "RESPONSE_STREAM"
)

// localPathPattern is what MeshLocalPath may be: one or more literal
// segments between slashes, e.g. /a2a/ (never /, which would shadow the
// whole HTTP API).
var localPathPattern = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)+/$`)

// functionURL reads fn's FunctionUrlConfig and its Metadata MeshLocalPath,
// refusing (one error for each) what the local stack cannot serve.
func functionURL(fn *serverless.Function) (*FunctionURL, []error) {
	raw, hasLocal := fn.AWSCloudFormationMetadata["MeshLocalPath"]
	cfg := fn.FunctionUrlConfig
	if cfg == nil {
		if hasLocal {
			return nil, []error{errors.New("Metadata MeshLocalPath is set but the function has no FunctionUrlConfig")}
		}
		return nil, nil
	}
	u := &FunctionURL{AuthType: cfg.AuthType, InvokeMode: "BUFFERED"}
	if cfg.InvokeMode != nil {
		u.InvokeMode = *cfg.InvokeMode
	}
	var errs []error
	if u.InvokeMode != URLResponseStream {
		errs = append(errs, fmt.Errorf("FunctionUrlConfig InvokeMode %s is not emulated by the local stack (%s is)", u.InvokeMode, URLResponseStream))
	}
	if u.AuthType != URLAuthNone {
		errs = append(errs, fmt.Errorf("FunctionUrlConfig AuthType %q is not emulated by the local stack (%s is: the function authenticates its callers)", u.AuthType, URLAuthNone))
	}
	if cfg.Cors != nil {
		errs = append(errs, errors.New("FunctionUrlConfig Cors is not emulated by the local stack"))
	}
	local, ok := raw.(string)
	switch {
	case !hasLocal:
		errs = append(errs, errors.New("a Function URL needs Metadata MeshLocalPath (e.g. /a2a/): the path prefix under which the local stack serves it on the HTTP API's port"))
	case !ok || !localPathPattern.MatchString(local):
		errs = append(errs, fmt.Errorf("Metadata MeshLocalPath %v must be literal path segments between slashes, e.g. /a2a/", raw))
	default:
		u.LocalPath = local
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return u, nil
}

// URLFunctions returns the functions with a Function URL, longest
// LocalPath first (the order to match a request path in).
func (t *Template) URLFunctions() []Function {
	var out []Function
	for _, f := range t.Functions {
		if f.URL != nil {
			out = append(out, f)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].URL.LocalPath) > len(out[j].URL.LocalPath) })
	return out
}

// CheckLocalPaths reports, naming the functions concerned, every Function
// URL whose LocalPath is not a well-formed prefix or shares paths with an
// HTTP API route, a WebSocket API's stage or another Function URL: on the
// one local port each request must have exactly one owner.
func (t *Template) CheckLocalPaths() error {
	var errs []error
	urls := t.URLFunctions()
	for i, u := range urls {
		local := u.URL.LocalPath
		if !localPathPattern.MatchString(local) {
			errs = append(errs, fmt.Errorf("%s: Function URL path %q must be literal path segments between slashes, e.g. /a2a/", u.LogicalID, local))
			continue
		}
		for _, f := range t.Functions {
			for _, r := range f.Routes {
				if routeReachesUnder(r.Path, local) {
					errs = append(errs, fmt.Errorf("%s: route %s of %s matches paths under %s, where the local stack serves %s's Function URL", u.LogicalID, r.Key(), f.LogicalID, local, u.LogicalID))
				}
			}
		}
		for _, api := range t.WebSocketAPIs {
			if strings.HasPrefix(local, "/"+api.Stage+"/") {
				errs = append(errs, fmt.Errorf("%s: Function URL path %s is under /%s, where the WebSocket API %s is served", u.LogicalID, local, api.Stage, api.LogicalID))
			}
		}
		for _, o := range urls[i+1:] {
			// Sorted longest first: o's path can only be a prefix of u's.
			if strings.HasPrefix(local, o.URL.LocalPath) {
				errs = append(errs, fmt.Errorf("%s: Function URL path %s is under %s, the path of %s's Function URL", u.LogicalID, local, o.URL.LocalPath, o.LogicalID))
			}
		}
	}
	return errors.Join(errs...)
}

// routeReachesUnder reports whether the HttpApi route template path could
// match a request path that starts with prefix (literal segments ending in
// /): then the two would claim the same requests.
func routeReachesUnder(path, prefix string) bool {
	segs, err := ParsePath(path)
	if err != nil {
		return false // Load reports it
	}
	want := strings.Split(strings.Trim(prefix, "/"), "/")
	for i, w := range want {
		if i >= len(segs) {
			return false
		}
		switch s := segs[i]; {
		case s.Kind == Greedy:
			return true
		case s.Kind == Literal && s.Text != w:
			return false
		}
	}
	// Every prefix segment matched; the route reaches under the prefix
	// only if it has more segments to match what follows it.
	return len(segs) > len(want)
}
