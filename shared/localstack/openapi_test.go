package localstack

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The OpenAPI document, decoded into the parts the checks read.
type oaDoc struct {
	OpenAPI    string                          `yaml:"openapi"`
	Security   []map[string][]string           `yaml:"security"`
	Paths      map[string]map[string]yaml.Node `yaml:"paths"`
	Components struct {
		Schemas         map[string]any         `yaml:"schemas"`
		Responses       map[string]oaResponse  `yaml:"responses"`
		Parameters      map[string]oaParameter `yaml:"parameters"`
		SecuritySchemes map[string]struct {
			Type         string `yaml:"type"`
			Scheme       string `yaml:"scheme"`
			BearerFormat string `yaml:"bearerFormat"`
		} `yaml:"securitySchemes"`
	} `yaml:"components"`
}

type oaOperation struct {
	OperationID string                 `yaml:"operationId"`
	Security    *[]map[string][]string `yaml:"security"`
	Parameters  []oaParameter          `yaml:"parameters"`
	RequestBody map[string]any         `yaml:"requestBody"`
	Responses   map[string]oaResponse  `yaml:"responses"`
}

type oaParameter struct {
	Ref      string `yaml:"$ref"`
	Name     string `yaml:"name"`
	In       string `yaml:"in"`
	Required bool   `yaml:"required"`
}

type oaResponse struct {
	Ref     string         `yaml:"$ref"`
	Headers map[string]any `yaml:"headers"`
	Content map[string]struct {
		Schema struct {
			Ref string `yaml:"$ref"`
		} `yaml:"schema"`
	} `yaml:"content"`
}

var httpMethods = map[string]bool{"get": true, "put": true, "post": true, "delete": true, "patch": true, "head": true, "options": true, "trace": true}

// publicRoutes take no credentials (ARCHITECTURE.md §4).
// Signing in and the console's pages (which send a signed-out visitor to
// the sign-in page) take none either.
var publicRoutes = map[string]bool{"POST /v1/auth/token": true, "POST /v1/oauth/token": true, "GET /v1/health": true,
	"POST /v1/account/session": true, "GET /console": true, "GET /console/{proxy+}": true}

// isConsole reports whether a path is the console's: HTML pages, not JSON.
func isConsole(path string) bool { return path == "/console" || strings.HasPrefix(path, "/console/") }

// isOAuth reports whether a path is the OAuth token endpoint's, whose
// errors are RFC 6749's JSON (§5.2), not problem documents.
func isOAuth(path string) bool { return path == "/v1/oauth/token" }

func loadOpenAPI(t *testing.T, root string) (oaDoc, any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc oaDoc
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	var tree any
	if err := yaml.Unmarshal(raw, &tree); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	return doc, tree
}

func TestOpenAPIDescribesExactlyTheTemplatesRoutes(t *testing.T) {
	tpl, root := repoTemplate(t)
	doc, tree := loadOpenAPI(t, root)
	routes := tpl.Routes()

	t.Run("the document is OpenAPI 3.1", func(t *testing.T) {
		if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
			t.Fatalf("openapi: %q, want 3.1.x", doc.OpenAPI)
		}
	})

	ops := map[string]oaOperation{}
	pathParams := map[string][]oaParameter{}
	for path, item := range doc.Paths {
		for key, node := range item {
			switch {
			case key == "parameters":
				var params []oaParameter
				if err := node.Decode(&params); err != nil {
					t.Errorf("%s parameters: %v", path, err)
				}
				pathParams[path] = params
			case httpMethods[key]:
				var op oaOperation
				if err := node.Decode(&op); err != nil {
					t.Errorf("%s %s: %v", key, path, err)
					continue
				}
				ops[strings.ToUpper(key)+" "+path] = op
			}
		}
	}

	t.Run("paths and methods equal the template's HttpApi routes", func(t *testing.T) {
		var missing, extra []string
		for k := range routes {
			if _, ok := ops[k]; !ok {
				missing = append(missing, k)
			}
		}
		for k := range ops {
			if _, ok := routes[k]; !ok {
				extra = append(extra, k)
			}
		}
		sort.Strings(missing)
		sort.Strings(extra)
		if len(missing) > 0 {
			t.Errorf("routes of template.yaml missing from openapi.yaml: %v", missing)
		}
		if len(extra) > 0 {
			t.Errorf("operations in openapi.yaml that template.yaml does not route: %v", extra)
		}
	})

	t.Run("the components the API speaks in are defined", func(t *testing.T) {
		for _, name := range []string{"Problem", "Envelope", "Part", "Task", "TaskState", "Message", "Artifact", "Agent", "TokenResponse", "InboxPage", "SendResult"} {
			if doc.Components.Schemas[name] == nil {
				t.Errorf("components.schemas.%s is missing", name)
			}
		}
		jwt, admin := doc.Components.SecuritySchemes["agentJWT"], doc.Components.SecuritySchemes["adminKey"]
		if jwt.Type != "http" || jwt.Scheme != "bearer" || jwt.BearerFormat != "JWT" {
			t.Errorf("securitySchemes.agentJWT = %+v, want http bearer JWT", jwt)
		}
		if admin.Type != "http" || admin.Scheme != "bearer" {
			t.Errorf("securitySchemes.adminKey = %+v, want http bearer", admin)
		}
	})

	routesOf := map[string]int{} // function → how many routes it serves
	for _, fn := range routes {
		routesOf[fn]++
	}
	keys := make([]string, 0, len(ops))
	for k := range ops {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	seenIDs := map[string]string{}
	for _, key := range keys {
		op := ops[key]
		_, path, _ := strings.Cut(key, " ")
		t.Run(key+" is documented completely", func(t *testing.T) {
			if fn, ok := routes[key]; ok {
				// A function of several routes (the console) names each
				// operation after itself: Console, ConsolePages.
				want := strings.TrimSuffix(fn, "Function")
				if op.OperationID != want && !(routesOf[fn] > 1 && strings.HasPrefix(op.OperationID, want)) {
					t.Errorf("operationId %q, want %q (the template function %s)", op.OperationID, want, fn)
				}
			}
			if other, dup := seenIDs[op.OperationID]; dup {
				t.Errorf("operationId %q is also used by %s", op.OperationID, other)
			}
			seenIDs[op.OperationID] = key

			security := doc.Security
			if op.Security != nil {
				security = *op.Security
			}
			want := "agentJWT"
			switch {
			case publicRoutes[key]:
				want = ""
			case strings.HasPrefix(path, "/v1/admin/"):
				want = "adminKey"
			case strings.HasPrefix(path, "/v1/account/"), path == "/v1/account":
				want = "accountSession"
			}
			if got := schemeNames(security); got != want {
				t.Errorf("security %q, want %q", got, want)
			}

			problems := 0
			for code, resp := range op.Responses {
				if resp.Ref != "" {
					name := strings.TrimPrefix(resp.Ref, "#/components/responses/")
					r, ok := doc.Components.Responses[name]
					if !ok {
						t.Errorf("response %s: %s does not resolve", code, resp.Ref)
						continue
					}
					resp = r
				}
				if code[0] == '4' || code[0] == '5' {
					problems++
					if isConsole(path) {
						if _, ok := resp.Content["text/html"]; !ok {
							t.Errorf("response %s of a console page is not text/html", code)
						}
						continue
					}
					if isOAuth(path) {
						if resp.Content["application/json"].Schema.Ref != "#/components/schemas/OAuthError" {
							t.Errorf("response %s of the OAuth token endpoint is not an application/json OAuthError", code)
						}
						continue
					}
					if resp.Content["application/problem+json"].Schema.Ref != "#/components/schemas/Problem" {
						t.Errorf("response %s is not an application/problem+json Problem", code)
					}
				}
				if code == "429" && resp.Headers["Retry-After"] == nil {
					t.Errorf("429 does not document Retry-After")
				}
			}
			if problems == 0 {
				t.Errorf("lists no problem responses")
			}
			need := []string{}
			if want != "" {
				need = append(need, "401")
			}
			if want == "agentJWT" || want == "accountSession" {
				need = append(need, "429")
			}
			if op.RequestBody != nil && op.RequestBody["required"] == true {
				need = append(need, "400")
			}
			for _, code := range need {
				if _, ok := op.Responses[code]; !ok {
					t.Errorf("does not list its %s problem response", code)
				}
			}

			// Every {var} of the path is a required path parameter.
			declared := map[string]bool{}
			for _, p := range append(append([]oaParameter{}, pathParams[path]...), op.Parameters...) {
				if p.Ref != "" {
					p = doc.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
				}
				if p.In == "path" && p.Required {
					declared[p.Name] = true
				}
			}
			for _, m := range regexp.MustCompile(`\{([^}]+)\}`).FindAllStringSubmatch(path, -1) {
				if !declared[m[1]] {
					t.Errorf("path variable {%s} is not a required path parameter", m[1])
				}
			}
		})
	}

	t.Run("every $ref resolves", func(t *testing.T) {
		walkRefs(tree, func(ref string) {
			if _, err := resolvePointer(tree, ref); err != nil {
				t.Errorf("$ref %s: %v", ref, err)
			}
		})
	})
}

func schemeNames(reqs []map[string][]string) string {
	var names []string
	for _, r := range reqs {
		for k := range r {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func walkRefs(n any, fn func(string)) {
	switch v := n.(type) {
	case map[string]any:
		for k, c := range v {
			if s, ok := c.(string); ok && k == "$ref" {
				fn(s)
				continue
			}
			walkRefs(c, fn)
		}
	case []any:
		for _, c := range v {
			walkRefs(c, fn)
		}
	}
}

// resolvePointer follows a local JSON pointer ("#/components/schemas/X").
func resolvePointer(tree any, ref string) (any, error) {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("not a local reference")
	}
	cur := tree
	for _, seg := range strings.Split(p, "/") {
		seg = strings.NewReplacer("~1", "/", "~0", "~").Replace(seg)
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%q is not inside an object", seg)
		}
		if cur, ok = m[seg]; !ok {
			return nil, fmt.Errorf("no %q", seg)
		}
	}
	return cur, nil
}
