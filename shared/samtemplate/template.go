// Package samtemplate is the model of template.yaml, the single source of
// truth for the mesh's functions: it reads the SAM template with goformation
// and returns each AWS::Serverless::Function with its HttpApi routes, its
// EventBridge Schedule rates, its Function URL (and the Metadata
// MeshLocalPath it is served under locally), its timeout and the custom
// resources it backs.
// Event types it cannot model are errors, so a template change cannot
// silently drop a function from the local mesh.
package samtemplate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation/serverless"
	"github.com/awslabs/goformation/v7/intrinsics"
)

// Template is the part of template.yaml the local stack needs.
type Template struct {
	// Functions are sorted by logical ID.
	Functions []Function
	// WebSocketAPIs are sorted by logical ID.
	WebSocketAPIs []WebSocketAPI
}

// Function is one AWS::Serverless::Function.
type Function struct {
	LogicalID string
	// Dir is the function's directory under functions/ (and the base name of
	// its sample event under events/): the logical ID without "Function", in
	// kebab case.
	Dir       string
	Routes    []Route
	Schedules []Schedule
	// Timeout is the function's timeout (its own or the Globals one).
	Timeout time.Duration
	// CustomResources are the CloudFormation custom resources whose
	// ServiceToken is this function (it runs at deploy time).
	CustomResources []CustomResource
	// URL is the function's Function URL (FunctionUrlConfig), nil if none.
	URL *FunctionURL
}

// FunctionURL is a function's FunctionUrlConfig, with where the local stack
// serves it.
type FunctionURL struct {
	AuthType   string // NONE or AWS_IAM
	InvokeMode string // BUFFERED or RESPONSE_STREAM
	// LocalPath is the path prefix under which the local stack serves the
	// function on the HTTP API's port (the function's Metadata
	// MeshLocalPath, e.g. /a2a/): a Function URL has a host of its own on
	// AWS, and the function sees the whole path either way.
	LocalPath string
}

// CustomResource is a Custom::* resource of the template.
type CustomResource struct {
	LogicalID string
	Type      string
}

// Route is one HttpApi event.
type Route struct {
	Method string
	// Path is the HTTP API path template, e.g. /v1/tasks/{id}/messages.
	Path string
}

// Key is the API Gateway route key, e.g. "POST /v1/tasks/{id}/messages".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Schedule is one Schedule event.
type Schedule struct {
	// Expr is the expression as written, e.g. rate(5 minutes).
	Expr  string
	Every time.Duration
}

// defaultTimeout is Lambda's default when neither the function nor Globals set one.
const defaultTimeout = 3 * time.Second

// Load parses a SAM template with goformation (which resolves the intrinsic
// functions) and returns its functions with their HttpApi and Schedule
// events. Event types the local stack cannot emulate are errors, so a
// template change cannot silently drop a function from the local mesh.
func Load(path string) (*Template, error) {
	// CloudFormation's Ref of a Number parameter yields a string; goformation
	// returns the YAML number, which then fails to decode into string fields
	// such as Environment.Variables. Stringify numbers as CloudFormation does.
	ref := func(name string, input, tpl any) any {
		v := intrinsics.Ref(name, input, tpl)
		if f, ok := v.(float64); ok {
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
		return v
	}
	cf, err := goformation.OpenWithOptions(path, &intrinsics.ProcessorOptions{
		IntrinsicHandlerOverrides: map[string]intrinsics.IntrinsicHandler{"Ref": ref},
	})
	if err != nil {
		return nil, fmt.Errorf("samtemplate: parse %s: %w", path, err)
	}
	timeout := defaultTimeout
	if g, err := cf.GetServerlessGlobalFunction(); err == nil && g.Timeout != nil {
		timeout = time.Duration(*g.Timeout) * time.Second
	}
	res, err := readRaw(path)
	if err != nil {
		return nil, err
	}
	custom := customResources(res)
	t := &Template{}
	var errs []error
	functions := map[string]bool{}
	for id := range cf.GetAllServerlessFunctionResources() {
		functions[id] = true
	}
	apis, wsErrs := webSocketAPIs(res, functions)
	t.WebSocketAPIs = apis
	errs = append(errs, wsErrs...)
	for id, fn := range cf.GetAllServerlessFunctionResources() {
		f := Function{LogicalID: id, Dir: FunctionDir(id), Timeout: timeout, CustomResources: custom[id]}
		if fn.Timeout != nil {
			f.Timeout = time.Duration(*fn.Timeout) * time.Second
		}
		names := make([]string, 0, len(fn.Events))
		for name := range fn.Events {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			ev := fn.Events[name]
			switch ev.Type {
			case "HttpApi":
				var h *serverless.Function_HttpApiEvent
				if ev.Properties != nil {
					h = ev.Properties.HttpApiEvent
				}
				if h == nil || h.Method == nil || h.Path == nil {
					errs = append(errs, fmt.Errorf("%s event %s: HttpApi event needs Method and Path (the local stack serves no catch-all route)", id, name))
					continue
				}
				r := Route{Method: strings.ToUpper(*h.Method), Path: *h.Path}
				if _, err := ParsePath(r.Path); err != nil {
					errs = append(errs, fmt.Errorf("%s event %s: %w", id, name, err))
					continue
				}
				f.Routes = append(f.Routes, r)
			case "Schedule":
				if ev.Properties == nil || ev.Properties.ScheduleEvent == nil {
					errs = append(errs, fmt.Errorf("%s event %s: Schedule event needs a Schedule expression", id, name))
					continue
				}
				expr := ev.Properties.ScheduleEvent.Schedule
				every, err := ParseRate(expr)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s event %s: %w", id, name, err))
					continue
				}
				f.Schedules = append(f.Schedules, Schedule{Expr: expr, Every: every})
			default:
				errs = append(errs, fmt.Errorf("%s event %s: event type %q is not emulated by the local stack (HttpApi and Schedule are)", id, name, ev.Type))
			}
		}
		u, urlErrs := functionURL(fn)
		for _, err := range urlErrs {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
		f.URL = u
		t.Functions = append(t.Functions, f)
	}
	sort.Slice(t.Functions, func(i, j int) bool { return t.Functions[i].LogicalID < t.Functions[j].LogicalID })
	if err := t.checkUniqueRoutes(); err != nil {
		errs = append(errs, err)
	}
	if err := t.CheckLocalPaths(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		return nil, fmt.Errorf("samtemplate: %s: %w", path, errors.Join(errs...))
	}
	return t, nil
}

// customResources maps a function's logical ID to the Custom::* resources
// whose ServiceToken is !GetAtt <function>.Arn, read from the resources as
// written (goformation resolves GetAtt to a placeholder).
func customResources(res map[string]rawResource) map[string][]CustomResource {
	out := map[string][]CustomResource{}
	for id, r := range res {
		if !strings.HasPrefix(r.Type, "Custom::") && r.Type != "AWS::CloudFormation::CustomResource" {
			continue
		}
		if target := getAttArn(r.Properties["ServiceToken"]); target != "" {
			out[target] = append(out[target], CustomResource{LogicalID: id, Type: r.Type})
		}
	}
	for _, list := range out {
		sort.Slice(list, func(i, j int) bool { return list[i].LogicalID < list[j].LogicalID })
	}
	return out
}

func (t *Template) checkUniqueRoutes() error {
	seen := map[string]string{}
	for _, f := range t.Functions {
		for _, r := range f.Routes {
			if other, ok := seen[r.Key()]; ok {
				return fmt.Errorf("route %s is declared by both %s and %s", r.Key(), other, f.LogicalID)
			}
			seen[r.Key()] = f.LogicalID
		}
	}
	return nil
}

// Function returns the function with the given logical ID.
func (t *Template) Function(logicalID string) (Function, bool) {
	for _, f := range t.Functions {
		if f.LogicalID == logicalID {
			return f, true
		}
	}
	return Function{}, false
}

// Routes returns every route key ("GET /v1/health") mapped to its function.
func (t *Template) Routes() map[string]string {
	out := map[string]string{}
	for _, f := range t.Functions {
		for _, r := range f.Routes {
			out[r.Key()] = f.LogicalID
		}
	}
	return out
}

var camelBoundary = regexp.MustCompile(`([a-z0-9])([A-Z])`)

// FunctionDir maps a logical ID to its directory name: AuthTokenFunction →
// auth-token. It is exactly the Makefile's build-% rule (sed), so `sam build`
// and the local stack agree on where a function lives.
func FunctionDir(logicalID string) string {
	s := strings.TrimSuffix(logicalID, "Function")
	s = camelBoundary.ReplaceAllString(s, "$1-$2")
	return strings.ToLower(s)
}

var rateExpr = regexp.MustCompile(`^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$`)

// ParseRate parses an EventBridge rate expression: rate(1 minute),
// rate(5 minutes), rate(1 hour), rate(2 days). Like EventBridge it requires the
// singular unit for 1 and the plural otherwise. cron() is not supported.
func ParseRate(expr string) (time.Duration, error) {
	if strings.HasPrefix(strings.TrimSpace(expr), "cron(") {
		return 0, fmt.Errorf("schedule %q: cron expressions are not supported by the local stack; use rate(N minutes|hours|days)", expr)
	}
	m := rateExpr.FindStringSubmatch(strings.TrimSpace(expr))
	if m == nil {
		return 0, fmt.Errorf("schedule %q: want rate(N minute|minutes|hour|hours|day|days)", expr)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("schedule %q: the rate must be a positive integer", expr)
	}
	unit := m[2]
	if plural := strings.HasSuffix(unit, "s"); plural != (n != 1) {
		return 0, fmt.Errorf("schedule %q: use the singular unit for 1 and the plural otherwise, as EventBridge requires", expr)
	}
	var d time.Duration
	switch strings.TrimSuffix(unit, "s") {
	case "minute":
		d = time.Minute
	case "hour":
		d = time.Hour
	case "day":
		d = 24 * time.Hour
	}
	return time.Duration(n) * d, nil
}

// FindRepoRoot walks up from dir to the directory holding go.mod.
func FindRepoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod in this directory or any parent: run meshlocal inside the agent-mesh repository")
		}
		dir = parent
	}
}
