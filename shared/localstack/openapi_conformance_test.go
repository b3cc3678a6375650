package localstack_test

// The OpenAPI document against the code: the real handlers of every route,
// served from template.yaml on a real database, driven through a scripted
// scenario; every request and every response is validated against
// openapi.yaml with kin-openapi (JSON Schema 2020-12 for a 3.1 document).
// A field, type, status, header or error code the document does not declare
// fails the test, naming the route and the mismatch.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/agentmesh/agentmesh/shared/apigwlocal"
	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// apiDoc is openapi.yaml loaded and validated, with a router over its paths.
type apiDoc struct {
	doc    *openapi3.T
	router routers.Router
}

func loadAPIDoc(t *testing.T, root string) apiDoc {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join(root, "openapi.yaml"))
	if err != nil {
		t.Fatalf("openapi.yaml does not load: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi.yaml is OpenAPI %s; the validation below assumes 3.1 (JSON Schema 2020-12)", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	// Match on paths alone: the test server's address is none of the
	// document's servers.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("routing openapi.yaml: %v", err)
	}
	return apiDoc{doc: doc, router: router}
}

// requireBearer stands in for the security schemes: the document can only
// say that a bearer credential (or, for account routes, the session cookie)
// is sent; whether it is valid is the code's business (and a 401 the
// document must describe).
func requireBearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecuritySchemeName == "accountSession" {
		if _, err := in.RequestValidationInput.Request.Cookie("mesh_session"); err != nil {
			return errors.New("no mesh_session cookie")
		}
		return nil
	}
	scheme, cred, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(cred) == "" {
		return errors.New("no Authorization: Bearer credential")
	}
	return nil
}

// errorCodes reads an operation's x-error-codes: status → problem codes.
func errorCodes(op *openapi3.Operation) (map[string][]string, error) {
	raw, ok := op.Extensions["x-error-codes"]
	if !ok {
		return nil, errors.New("no x-error-codes")
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var codes map[string][]string
	if err := json.Unmarshal(b, &codes); err != nil {
		return nil, fmt.Errorf("x-error-codes is not a map of status to code lists: %v", err)
	}
	return codes, nil
}

// validateRequest checks a request against the document and returns its
// route key ("POST /v1/messages").
func (d apiDoc) validateRequest(req *http.Request, body []byte) (key string, route *routers.Route, params map[string]string, err error) {
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err = d.router.FindRoute(vreq)
	if err != nil {
		return "", nil, nil, fmt.Errorf("no operation of openapi.yaml matches %s %s: %v", req.Method, req.URL.Path, err)
	}
	key = req.Method + " " + route.Path
	err = openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: requireBearer, MultiError: true},
	})
	return key, route, params, err
}

// validateResponse lists every way a response departs from the document:
// an undeclared status, header or content type, a body that breaks its
// schema, a non-empty 204, a problem whose status or code the operation does
// not declare.
func (d apiDoc) validateResponse(req *http.Request, route *routers.Route, params map[string]string, status int, header http.Header, body []byte) []string {
	var out []string
	err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	})
	if err != nil {
		out = append(out, err.Error())
	}
	ct := header.Get("Content-Type")
	switch {
	case strings.HasPrefix(route.Path, "/console"):
		// The console answers HTML pages, redirects and HTML error pages:
		// the document's statuses and content types (checked above) are all.
	case route.Path == oauthTokenPath && status >= 400:
		out = append(out, oauthErrorProblems(route.Operation, status, header, body)...)
	case status == http.StatusNoContent:
		if len(body) > 0 {
			out = append(out, fmt.Sprintf("204 with a body: %s", body))
		}
	case status >= 400:
		if ct != "application/problem+json" {
			out = append(out, fmt.Sprintf("%d with Content-Type %q, want application/problem+json", status, ct))
		}
		var p httpapi.Problem
		if err := json.Unmarshal(body, &p); err != nil {
			out = append(out, fmt.Sprintf("%d body is not a problem document: %v", status, err))
			break
		}
		if p.Status != status {
			out = append(out, fmt.Sprintf("problem status %d in a %d answer", p.Status, status))
		}
		codes, err := errorCodes(route.Operation)
		if err != nil {
			out = append(out, err.Error())
		} else if !slices.Contains(codes[strconv.Itoa(status)], p.Code) {
			out = append(out, fmt.Sprintf("problem code %q is not among x-error-codes[%d] %v", p.Code, status, codes[strconv.Itoa(status)]))
		}
		if status == http.StatusTooManyRequests {
			if n, err := strconv.Atoi(header.Get("Retry-After")); err != nil || n < 1 {
				out = append(out, fmt.Sprintf("429 with Retry-After %q, want whole seconds >= 1", header.Get("Retry-After")))
			}
		}
	default:
		if ct != "application/json" {
			out = append(out, fmt.Sprintf("%d with Content-Type %q, want application/json", status, ct))
		}
	}
	return out
}

// call is one step of the scenario.
type call struct {
	// Who says what the step does, as a sentence.
	Who    string
	Method string
	Path   string // with the query, already escaped
	// Cookie is the session token (mesh_session); empty sends none.
	Cookie string
	// CSRF is the X-CSRF-Token header; empty sends none.
	CSRF string
	// Auth is the whole Authorization header; empty sends none.
	Auth string
	// Body is marshalled as JSON; a string or []byte is sent as is.
	Body any
	Want int
	// Code is the problem code the step expects (error answers).
	Code string
	// OffSpec marks a request that breaks the document on purpose: the
	// document must reject it too, so its request schemas are no looser
	// than they claim.
	OffSpec bool
	// Drain resends the request up to this many times until it answers
	// Want; only that answer is validated (draining a rate budget).
	Drain int
	// ContentType replaces application/json on a request with a body.
	ContentType string
	// DupKey repeats the first key of the body's object (with its value),
	// which no JSON Schema can tell from the body without the repeat.
	DupKey bool
}

// answer is what a step got back.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// field returns a top-level string or number field of a JSON answer.
func (a answer) field(name string) string {
	var m map[string]any
	if json.Unmarshal(a.Body, &m) != nil {
		return ""
	}
	switch v := m[name].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// conformance drives one API and records what each route answered.
type conformance struct {
	t    *testing.T
	doc  apiDoc
	base string
	// seen[route key][status]; codes[route key] = "status code" pairs.
	seen  map[string]map[int]bool
	codes map[string]map[string]bool
	// samples["GET /v1/agents/me 200"] is the last such exchange.
	samples map[string]sample
	// bodies[route key] is the first step with a body that route accepted.
	bodies map[string]call
}

// sample is one validated exchange, kept to show that the checks bite.
type sample struct {
	req    *http.Request
	route  *routers.Route
	params map[string]string
	answer
}

func (c *conformance) send(k call) (*http.Request, []byte, answer, error) {
	var body []byte
	switch b := k.Body.(type) {
	case nil:
	case string:
		body = []byte(b)
	case []byte:
		body = b
	default:
		var err error
		if body, err = json.Marshal(b); err != nil {
			return nil, nil, answer{}, err
		}
	}
	if k.DupKey {
		body = repeatFirstKey(body)
	}
	req, err := http.NewRequest(k.Method, c.base+k.Path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", cmp.Or(k.ContentType, "application/json"))
	}
	if k.Auth != "" {
		req.Header.Set("Authorization", k.Auth)
	}
	if k.Cookie != "" {
		req.AddCookie(&http.Cookie{Name: "mesh_session", Value: k.Cookie})
	}
	if k.CSRF != "" {
		req.Header.Set("X-CSRF-Token", k.CSRF)
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		return nil, nil, answer{}, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return req, body, answer{Status: resp.StatusCode, Header: resp.Header, Body: got}, err
}

// noRedirects answers a redirect (the console's 303) as it is.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// do runs one step as a subtest and returns its answer.
func (c *conformance) do(k call) answer {
	var got answer
	name := fmt.Sprintf("%s %s: %s (%d", k.Method, strings.SplitN(k.Path, "?", 2)[0], k.Who, k.Want)
	if k.Code != "" {
		name += " " + k.Code
	}
	name += ")"
	c.t.Run(name, func(t *testing.T) {
		if k.Drain > 0 {
			// Spend the budget from several clients at once: one client on
			// a loaded machine may send no faster than the budget refills.
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range k.Drain / 8 {
						if _, _, a, err := c.send(k); err != nil || a.Status == k.Want {
							return
						}
					}
				})
			}
			wg.Wait()
		}
		for attempt, drained := 0, 0; ; attempt++ {
			req, body, a, err := c.send(k)
			if err != nil {
				t.Fatal(err)
			}
			got = a
			if a.Status != k.Want && drained < k.Drain {
				drained++
				continue
			}
			key, route, params, reqErr := c.doc.validateRequest(req, body)
			if route == nil {
				t.Fatal(reqErr)
			}
			switch {
			case !k.OffSpec && reqErr != nil:
				t.Errorf("%s: the request breaks openapi.yaml: %v", key, reqErr)
			case k.OffSpec && reqErr == nil:
				t.Errorf("%s: the request is meant to break openapi.yaml, but the document accepts it", key)
			}
			vreq := req.Clone(context.Background())
			for _, p := range c.doc.validateResponse(vreq, route, params, a.Status, a.Header, a.Body) {
				t.Errorf("%s → %d: the response breaks openapi.yaml: %s", key, a.Status, p)
			}
			if c.seen[key] == nil {
				c.seen[key], c.codes[key] = map[int]bool{}, map[string]bool{}
			}
			c.seen[key][a.Status] = true
			if c.samples != nil {
				c.samples[fmt.Sprintf("%s %d", key, a.Status)] = sample{req: vreq, route: route, params: params, answer: a}
			}
			if a.Status < 300 && k.Body != nil && c.bodies != nil {
				if _, ok := c.bodies[key]; !ok {
					c.bodies[key] = k
				}
			}
			code := ""
			if a.Status >= 400 {
				code = a.field("code")
				if route.Path == oauthTokenPath {
					code = a.field("error")
				}
				c.codes[key][strconv.Itoa(a.Status)+" "+code] = true
			}
			// A 429 the step did not ask for comes from the pace of the
			// scenario, not from the route: wait as told and retry, as
			// any client would (the 429 itself was validated above).
			if a.Status == http.StatusTooManyRequests && k.Want != http.StatusTooManyRequests && attempt < 3 {
				secs, _ := strconv.Atoi(a.Header.Get("Retry-After"))
				time.Sleep(time.Duration(max(secs, 1)) * time.Second)
				continue
			}
			if a.Status != k.Want || (k.Code != "" && code != k.Code) {
				t.Errorf("%s: got %d %s, want %d %s", key, a.Status, a.Body, k.Want, k.Code)
			}
			return
		}
	})
	return got
}

func TestOpenAPIDescribesTheRealRequestsAndResponses(t *testing.T) {
	start := time.Now()
	// The real handlers of every route, as the local stack serves them, on a
	// fresh database. No dispatcher: the events stay in the outbox, which is
	// all GET /v1/inbox reads.
	stack := localstacktest.Start(t, localstacktest.Options{Env: map[string]string{
		// Told to meshd in the token answer; nothing here dials it.
		"KAFKA_BROKERS": "127.0.0.1:9092",
		// Short, so the task scanner's idle-timeout events can be read at
		// the end; the scanner runs only when the scenario calls it.
		"MESH_TASK_IDLE_TIMEOUT": "1s",
	}})
	tpl, reg, cfg, adminKey := stack.Template, stack.Registry, stack.Config, stack.AdminKey
	doc := loadAPIDoc(t, stack.Root)

	t.Run("every operation lists the codes of each problem status it declares", func(t *testing.T) {
		for path, item := range doc.doc.Paths.Map() {
			for method, op := range item.Operations() {
				codes, err := errorCodes(op)
				if err != nil {
					t.Errorf("%s %s: %v", method, path, err)
					continue
				}
				for status := range op.Responses.Map() {
					if status[0] != '4' && status[0] != '5' {
						continue
					}
					if len(codes[status]) == 0 {
						t.Errorf("%s %s: response %s has no x-error-codes", method, path, status)
					}
				}
				for status := range codes {
					if op.Responses.Value(status) == nil {
						t.Errorf("%s %s: x-error-codes lists %s, which is not one of its responses", method, path, status)
					}
				}
			}
		}
	})

	c := &conformance{t: t, doc: doc, base: stack.URL, seen: map[string]map[int]bool{}, codes: map[string]map[string]bool{}, samples: map[string]sample{}, bodies: map[string]call{}}
	runScenario(t, c, reg, cfg, adminKey, stack.Env.DB)
	runAccountScenario(t, c, adminKey, stack.Env.DB)
	runCardScenario(t, c, adminKey, stack.Env.DB)
	strictBodies(t, c)

	// The health route's error answer needs a database that does not
	// answer: the same function on a pool that is closed.
	down, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	down.DB.Close()
	downSrv, err := apigwlocal.NewServer(tpl, map[string]httpapi.LambdaHandler{"HealthFunction": down.HTTP(down.Endpoints().Must("HealthFunction"))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	downAPI := httptest.NewServer(downSrv)
	defer downAPI.Close()
	(&conformance{t: t, doc: doc, base: downAPI.URL, seen: c.seen, codes: c.codes}).do(call{
		Who: "a function whose database is down", Method: "GET", Path: "/v1/health", Want: 503, Code: "database_unavailable"})

	t.Run("the checks reject answers that drift from the document", func(t *testing.T) {
		checkDriftIsCaught(t, doc, c.samples)
	})

	t.Run("every route of template.yaml answered a success and an error", func(t *testing.T) {
		keys := make([]string, 0)
		for k := range tpl.Routes() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ok, bad := false, false
			for st := range c.seen[k] {
				ok = ok || st < 300
				bad = bad || st >= 400
			}
			if !ok || !bad {
				t.Errorf("%s: answered %v; want at least one 2xx and one 4xx/5xx", k, sortedStatuses(c.seen[k]))
			}
		}
	})

	// What the scenario did not provoke is listed, not failed: some codes
	// need conditions a test cannot honestly create (a fan-out over 64 MiB,
	// a long poll cancelled mid-query). The codes the shared middleware and
	// rate limit answer on every route count once, wherever they were seen.
	shared := map[string]bool{"401 missing_token": true, "401 invalid_token": true, "401 key_revoked": true,
		"401 invalid_admin_key": true, "413 body_too_large": true, "429 rate_limited": true}
	seenAnywhere := map[string]bool{}
	for _, codes := range c.codes {
		for sc := range codes {
			seenAnywhere[sc] = true
		}
	}
	var untried []string
	for path, item := range doc.doc.Paths.Map() {
		for method, op := range item.Operations() {
			key := method + " " + path
			codes, _ := errorCodes(op)
			for status, list := range codes {
				for _, code := range list {
					sc := status + " " + code
					if !c.codes[key][sc] && !(shared[sc] && seenAnywhere[sc]) {
						untried = append(untried, key+" "+sc)
					}
				}
			}
		}
	}
	sort.Strings(untried)
	t.Logf("documented error codes the scenario did not provoke (%d): %s", len(untried), strings.Join(untried, "; "))
	t.Logf("conformance scenario took %v", time.Since(start).Round(time.Millisecond))
}

func sortedStatuses(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Ints(out)
	return out
}

// runScenario hits every route with successes and errors.
func runScenario(t *testing.T, c *conformance, reg apigwlocal.Registry, cfg config.Config, adminKey string, db *mysql.DB) {
	admin := "Bearer " + adminKey
	text := func(s string) []map[string]any { return []map[string]any{{"kind": "text", "text": s}} }

	// ---- health ----
	c.do(call{Who: "anyone", Method: "GET", Path: "/v1/health", Want: 200})

	// ---- admin: agents ----
	apiKeys, keyIDs := map[string]string{}, map[string]string{}
	for _, id := range []string{"alice", "bob", "carol", "dave", "erin", "rita"} {
		a := c.do(call{Who: "the admin creates " + id, Method: "POST", Path: "/v1/admin/agents", Auth: admin,
			Body: map[string]string{"agent_id": id, "name": strings.ToUpper(id[:1]) + id[1:]}, Want: 201})
		apiKeys[id], keyIDs[id] = a.field("api_key"), a.field("key_id")
	}
	c.do(call{Who: "the admin creates an agent without a name", Method: "POST", Path: "/v1/admin/agents", Auth: admin,
		Body: map[string]string{"agent_id": "nameless"}, Want: 201})
	c.do(call{Who: "the admin creates alice twice", Method: "POST", Path: "/v1/admin/agents", Auth: admin,
		Body: map[string]string{"agent_id": "alice"}, Want: 409, Code: "agent_exists"})
	c.do(call{Who: "the admin names an agent me", Method: "POST", Path: "/v1/admin/agents", Auth: admin,
		Body: map[string]string{"agent_id": "me"}, Want: 422, Code: "reserved_agent_id"})
	c.do(call{Who: "the admin names an agent with 201 characters", Method: "POST", Path: "/v1/admin/agents", Auth: admin,
		Body: map[string]string{"agent_id": "verbose", "name": strings.Repeat("v", 201)}, Want: 422, Code: "invalid_name", OffSpec: true})
	c.do(call{Who: "the admin sends an id with a space", Method: "POST", Path: "/v1/admin/agents", Auth: admin,
		Body: map[string]string{"agent_id": "not valid"}, Want: 422, Code: "invalid_agent_id", OffSpec: true})
	c.do(call{Who: "no credentials", Method: "POST", Path: "/v1/admin/agents",
		Body: map[string]string{"agent_id": "zed"}, Want: 401, Code: "missing_token", OffSpec: true})
	c.do(call{Who: "a wrong admin key", Method: "POST", Path: "/v1/admin/agents", Auth: "Bearer not-the-key",
		Body: map[string]string{"agent_id": "zed"}, Want: 401, Code: "invalid_admin_key"})
	c.do(call{Who: "the admin sends an unknown field", Method: "POST", Path: "/v1/admin/agents", Auth: admin,
		Body: `{"agent_id":"zed","colour":"red"}`, Want: 400, Code: "invalid_json", OffSpec: true})
	c.do(call{Who: "the admin sends more than 1 MiB", Method: "POST", Path: "/v1/admin/agents", Auth: admin,
		Body: map[string]string{"agent_id": "zed", "name": strings.Repeat("n", 1<<20)}, Want: 413, Code: "body_too_large", OffSpec: true})

	// ---- tokens ----
	tokens := map[string]string{}
	token := func(id string) {
		a := c.do(call{Who: id + " exchanges its API key", Method: "POST", Path: "/v1/auth/token",
			Body: map[string]string{"api_key": apiKeys[id]}, Want: 200})
		tokens[id] = "Bearer " + a.field("token")
	}
	for _, id := range []string{"alice", "bob", "carol", "dave", "erin", "rita"} {
		token(id)
	}
	c.do(call{Who: "an unknown API key", Method: "POST", Path: "/v1/auth/token",
		Body: map[string]string{"api_key": "amk_nope"}, Want: 401, Code: "invalid_api_key"})
	c.do(call{Who: "no body", Method: "POST", Path: "/v1/auth/token", Want: 400, Code: "invalid_json", OffSpec: true})

	// ---- admin: keys ----
	daveOld := tokens["dave"]
	rotated := c.do(call{Who: "the admin adds a key for dave", Method: "POST", Path: "/v1/admin/agents/dave/keys", Auth: admin, Want: 201})
	leak := c.do(call{Who: "the admin rotates dave's keys and inbox key after a leak", Method: "POST", Path: "/v1/admin/agents/dave/keys", Auth: admin,
		Body: map[string]bool{"revoke_existing": true, "rotate_inbox_key": true}, Want: 201})
	spare := c.do(call{Who: "the admin adds one more key for dave", Method: "POST", Path: "/v1/admin/agents/dave/keys", Auth: admin,
		Body: map[string]bool{}, Want: 201})
	c.do(call{Who: "the admin revokes dave's spare key", Method: "DELETE", Path: "/v1/admin/agents/dave/keys/" + spare.field("key_id"), Auth: admin, Want: 200})
	c.do(call{Who: "the admin revokes an already revoked key", Method: "DELETE", Path: "/v1/admin/agents/dave/keys/" + rotated.field("key_id"), Auth: admin, Want: 200})
	c.do(call{Who: "the admin revokes a key dave never had", Method: "DELETE", Path: "/v1/admin/agents/dave/keys/AAAAAAAAAAAA", Auth: admin, Want: 404, Code: "key_not_found"})
	c.do(call{Who: "no credentials", Method: "DELETE", Path: "/v1/admin/agents/dave/keys/AAAAAAAAAAAA", Want: 401, Code: "missing_token", OffSpec: true})
	c.do(call{Who: "the admin adds a key for nobody", Method: "POST", Path: "/v1/admin/agents/nobody/keys", Auth: admin, Want: 404, Code: "agent_not_found"})
	c.do(call{Who: "the admin sends an unknown option", Method: "POST", Path: "/v1/admin/agents/dave/keys", Auth: admin,
		Body: `{"revoke":true}`, Want: 400, Code: "invalid_json", OffSpec: true})
	c.do(call{Who: "dave's token from a revoked key", Method: "GET", Path: "/v1/agents/me", Auth: daveOld, Want: 401, Code: "key_revoked"})
	// Dave's live key is the one of the rotation after the leak (epoch 2).
	apiKeys["dave"] = leak.field("api_key")
	token("dave")

	// ---- admin: graph ----
	c.do(call{Who: "the admin befriends alice and bob", Method: "POST", Path: "/v1/admin/friendships", Auth: admin,
		Body: map[string]string{"a": "alice", "b": "bob"}, Want: 201})
	c.do(call{Who: "the admin befriends them again", Method: "POST", Path: "/v1/admin/friendships", Auth: admin,
		Body: map[string]string{"a": "bob", "b": "alice"}, Want: 200})
	c.do(call{Who: "the admin befriends alice and dave", Method: "POST", Path: "/v1/admin/friendships", Auth: admin,
		Body: map[string]string{"a": "alice", "b": "dave"}, Want: 201})
	c.do(call{Who: "the admin befriends alice and a ghost", Method: "POST", Path: "/v1/admin/friendships", Auth: admin,
		Body: map[string]string{"a": "alice", "b": "ghost"}, Want: 404, Code: "agent_not_found"})
	c.do(call{Who: "the admin befriends alice with herself", Method: "POST", Path: "/v1/admin/friendships", Auth: admin,
		Body: map[string]string{"a": "alice", "b": "alice"}, Want: 422, Code: "self_friendship"})
	c.do(call{Who: "the admin forgets b", Method: "POST", Path: "/v1/admin/friendships", Auth: admin,
		Body: map[string]string{"a": "alice"}, Want: 422, Code: "invalid_agent_id", OffSpec: true})
	c.do(call{Who: "the admin sends a third friend", Method: "POST", Path: "/v1/admin/friendships", Auth: admin,
		Body: `{"a":"alice","b":"bob","c":"carol"}`, Want: 400, Code: "invalid_json", OffSpec: true})

	c.do(call{Who: "the admin creates group ops", Method: "POST", Path: "/v1/admin/groups", Auth: admin,
		Body: map[string]any{"group_id": "ops", "name": "Ops", "owner": "alice", "members": []string{"bob", "bob", "alice"}}, Want: 201})
	c.do(call{Who: "the admin creates a group with a minted id", Method: "POST", Path: "/v1/admin/groups", Auth: admin,
		Body: map[string]any{"name": "Minted", "owner": "erin"}, Want: 201})
	c.do(call{Who: "the admin creates ops again", Method: "POST", Path: "/v1/admin/groups", Auth: admin,
		Body: map[string]any{"group_id": "ops", "name": "Ops", "owner": "alice"}, Want: 409, Code: "group_exists"})
	c.do(call{Who: "the admin gives a group a ghost owner", Method: "POST", Path: "/v1/admin/groups", Auth: admin,
		Body: map[string]any{"name": "Haunted", "owner": "ghost"}, Want: 404, Code: "agent_not_found"})
	c.do(call{Who: "the admin names a group with nothing", Method: "POST", Path: "/v1/admin/groups", Auth: admin,
		Body: map[string]any{"name": "", "owner": "alice"}, Want: 422, Code: "invalid_name", OffSpec: true})
	c.do(call{Who: "the admin picks a group id with a space", Method: "POST", Path: "/v1/admin/groups", Auth: admin,
		Body: map[string]any{"group_id": "bad id", "name": "Bad", "owner": "alice"}, Want: 422, Code: "invalid_group_id", OffSpec: true})
	c.do(call{Who: "the admin picks an invalid owner id", Method: "POST", Path: "/v1/admin/groups", Auth: admin,
		Body: map[string]any{"name": "Bad", "owner": "bad owner"}, Want: 422, Code: "invalid_agent_id", OffSpec: true})
	crowd := make([]string, 1001)
	for i := range crowd {
		crowd[i] = fmt.Sprintf("member-%04d", i)
	}
	c.do(call{Who: "the admin creates a group with 1001 members", Method: "POST", Path: "/v1/admin/groups", Auth: admin,
		Body: map[string]any{"name": "Crowd", "owner": "alice", "members": crowd}, Want: 422, Code: "too_many_members"})
	c.do(call{Who: "the admin sends a list for a group", Method: "POST", Path: "/v1/admin/groups", Auth: admin,
		Body: `["ops"]`, Want: 400, Code: "invalid_json", OffSpec: true})

	c.do(call{Who: "the admin adds dave to ops", Method: "POST", Path: "/v1/admin/groups/ops/members", Auth: admin,
		Body: map[string]string{"agent_id": "dave"}, Want: 201})
	c.do(call{Who: "the admin adds dave to ops again", Method: "POST", Path: "/v1/admin/groups/ops/members", Auth: admin,
		Body: map[string]string{"agent_id": "dave", "role": "admin"}, Want: 200})
	c.do(call{Who: "the admin adds dave to a group that does not exist", Method: "POST", Path: "/v1/admin/groups/nope/members", Auth: admin,
		Body: map[string]string{"agent_id": "dave"}, Want: 404, Code: "group_not_found"})
	c.do(call{Who: "the admin makes dave a second owner", Method: "POST", Path: "/v1/admin/groups/ops/members", Auth: admin,
		Body: map[string]string{"agent_id": "dave", "role": "owner"}, Want: 422, Code: "invalid_role", OffSpec: true})
	c.do(call{Who: "the admin adds a ghost to ops", Method: "POST", Path: "/v1/admin/groups/ops/members", Auth: admin,
		Body: map[string]string{"agent_id": "ghost"}, Want: 404, Code: "agent_not_found"})
	c.do(call{Who: "the admin adds an invalid id to ops", Method: "POST", Path: "/v1/admin/groups/ops/members", Auth: admin,
		Body: map[string]string{"agent_id": "not valid"}, Want: 422, Code: "invalid_agent_id", OffSpec: true})
	c.do(call{Who: "the admin sends an unknown field", Method: "POST", Path: "/v1/admin/groups/ops/members", Auth: admin,
		Body: `{"agent_id":"dave","since":"now"}`, Want: 400, Code: "invalid_json", OffSpec: true})

	// ---- presence ----
	c.do(call{Who: "alice beats from host-1 with stats", Method: "POST", Path: "/v1/agents/me/heartbeat", Auth: tokens["alice"],
		Body: map[string]any{"instance_id": "host-1", "stats": map[string]int{"handled": 3, "lag": 0}}, Want: 200})
	c.do(call{Who: "alice beats with an empty instance id", Method: "POST", Path: "/v1/agents/me/heartbeat", Auth: tokens["alice"],
		Body: map[string]any{"instance_id": ""}, Want: 422, Code: "invalid_instance_id", OffSpec: true})
	c.do(call{Who: "alice sends stats that are no object", Method: "POST", Path: "/v1/agents/me/heartbeat", Auth: tokens["alice"],
		Body: map[string]any{"instance_id": "host-1", "stats": 5}, Want: 422, Code: "invalid_stats", OffSpec: true})
	c.do(call{Who: "alice sends 9 KiB of stats", Method: "POST", Path: "/v1/agents/me/heartbeat", Auth: tokens["alice"],
		Body: map[string]any{"instance_id": "host-1", "stats": map[string]string{"log": strings.Repeat("l", 9<<10)}}, Want: 422, Code: "stats_too_large"})
	c.do(call{Who: "carol beats with an unknown field", Method: "POST", Path: "/v1/agents/me/heartbeat", Auth: tokens["carol"],
		Body: `{"instance_id":"c1","uptime":3}`, Want: 400, Code: "invalid_json", OffSpec: true})
	c.do(call{Who: "no credentials", Method: "POST", Path: "/v1/agents/me/heartbeat",
		Body: map[string]any{"instance_id": "host-1"}, Want: 401, Code: "missing_token", OffSpec: true})
	c.do(call{Who: "bob, never seen, goes offline", Method: "DELETE", Path: "/v1/agents/me/online", Auth: tokens["bob"], Want: 200})
	c.do(call{Who: "alice's host-1 stops", Method: "DELETE", Path: "/v1/agents/me/online?instance_id=host-1", Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "alice's stopped host-1 still beats", Method: "POST", Path: "/v1/agents/me/heartbeat", Auth: tokens["alice"],
		Body: map[string]any{"instance_id": "host-1", "stats": nil}, Want: 200})
	c.do(call{Who: "alice's new host-2 beats", Method: "POST", Path: "/v1/agents/me/heartbeat", Auth: tokens["alice"],
		Body: map[string]any{"instance_id": "host-2"}, Want: 200})
	c.do(call{Who: "an instance id with a space", Method: "DELETE", Path: "/v1/agents/me/online?instance_id=" + url.QueryEscape("host 1"), Auth: tokens["alice"],
		Want: 422, Code: "invalid_instance_id", OffSpec: true})
	c.do(call{Who: "alice reads herself", Method: "GET", Path: "/v1/agents/me", Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "carol, never seen, reads herself", Method: "GET", Path: "/v1/agents/me", Auth: tokens["carol"], Want: 200})
	c.do(call{Who: "a forged token", Method: "GET", Path: "/v1/agents/me", Auth: "Bearer e30.e30.c2ln", Want: 401, Code: "invalid_token"})
	c.do(call{Who: "alice reads her friend bob", Method: "GET", Path: "/v1/agents/bob", Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "alice reads herself by id", Method: "GET", Path: "/v1/agents/alice", Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "alice reads the stranger erin", Method: "GET", Path: "/v1/agents/erin", Auth: tokens["alice"], Want: 404, Code: "agent_not_found"})

	// ---- friends ----
	aliceToCarol := c.do(call{Who: "alice asks carol", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["alice"],
		Body: map[string]string{"to": "carol"}, Want: 201}).field("request_id")
	c.do(call{Who: "alice asks carol again", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["alice"],
		Body: map[string]string{"to": "carol"}, Want: 200})
	erinToCarol := c.do(call{Who: "erin asks carol", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["erin"],
		Body: map[string]string{"to": "carol"}, Want: 201}).field("request_id")
	c.do(call{Who: "dave asks carol", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["dave"],
		Body: map[string]string{"to": "carol"}, Want: 201})
	c.do(call{Who: "carol asks dave, who asked her: friends at once", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["carol"],
		Body: map[string]string{"to": "dave"}, Want: 201})
	c.do(call{Who: "alice asks her friend bob", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["alice"],
		Body: map[string]string{"to": "bob"}, Want: 409, Code: "already_friends"})
	c.do(call{Who: "alice asks herself", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["alice"],
		Body: map[string]string{"to": "alice"}, Want: 422, Code: "self_request"})
	c.do(call{Who: "alice asks a ghost: answered like a new request, nothing stored", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["alice"],
		Body: map[string]string{"to": "ghost"}, Want: 201})
	c.do(call{Who: "alice asks nobody", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["alice"],
		Body: map[string]string{}, Want: 422, Code: "invalid_agent_id", OffSpec: true})
	c.do(call{Who: "dave asks with a message", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["dave"],
		Body: `{"to":"bob","note":"hi"}`, Want: 400, Code: "invalid_json", OffSpec: true})
	c.do(call{Who: "carol lists her requests", Method: "GET", Path: "/v1/friends/requests", Auth: tokens["carol"], Want: 200})
	c.do(call{Who: "alice lists her outgoing requests", Method: "GET", Path: "/v1/friends/requests?direction=outgoing", Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "carol asks for a direction that does not exist", Method: "GET", Path: "/v1/friends/requests?direction=sideways", Auth: tokens["carol"],
		Want: 400, Code: "invalid_parameter", OffSpec: true})
	c.do(call{Who: "carol accepts alice", Method: "POST", Path: "/v1/friends/requests/" + aliceToCarol + "/accept", Auth: tokens["carol"], Want: 200})
	c.do(call{Who: "carol accepts alice again", Method: "POST", Path: "/v1/friends/requests/" + aliceToCarol + "/accept", Auth: tokens["carol"], Want: 200})
	c.do(call{Who: "alice accepts her own request", Method: "POST", Path: "/v1/friends/requests/" + aliceToCarol + "/accept", Auth: tokens["alice"],
		Want: 403, Code: "cannot_accept_own_request"})
	c.do(call{Who: "carol accepts a request that does not exist", Method: "POST", Path: "/v1/friends/requests/999999/accept", Auth: tokens["carol"],
		Want: 404, Code: "request_not_found"})
	c.do(call{Who: "carol rejects erin", Method: "POST", Path: "/v1/friends/requests/" + erinToCarol + "/reject", Auth: tokens["carol"], Want: 200})
	c.do(call{Who: "carol accepts erin after rejecting her", Method: "POST", Path: "/v1/friends/requests/" + erinToCarol + "/accept", Auth: tokens["carol"],
		Want: 409, Code: "request_not_pending"})
	c.do(call{Who: "erin withdraws the rejected request", Method: "POST", Path: "/v1/friends/requests/" + erinToCarol + "/reject", Auth: tokens["erin"],
		Want: 409, Code: "request_not_pending"})
	c.do(call{Who: "bob rejects a request between others", Method: "POST", Path: "/v1/friends/requests/" + erinToCarol + "/reject", Auth: tokens["bob"],
		Want: 404, Code: "request_not_found"})
	c.do(call{Who: "erin asks carol again during the cool-down", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["erin"],
		Body: map[string]string{"to": "carol"}, Want: 429, Code: "request_cool_down"})
	c.do(call{Who: "erin blocks carol", Method: "PUT", Path: "/v1/blocks/carol", Auth: tokens["erin"], Want: 204})
	c.do(call{Who: "erin blocks carol again", Method: "PUT", Path: "/v1/blocks/carol", Auth: tokens["erin"], Want: 204})
	c.do(call{Who: "erin blocks herself", Method: "PUT", Path: "/v1/blocks/erin", Auth: tokens["erin"], Want: 422, Code: "self_block"})
	c.do(call{Who: "erin blocks an invalid id", Method: "PUT", Path: "/v1/blocks/not%20valid", Auth: tokens["erin"],
		Want: 422, Code: "invalid_agent_id", OffSpec: true})
	c.do(call{Who: "erin lists her blocks", Method: "GET", Path: "/v1/blocks", Auth: tokens["erin"], Want: 200})
	c.do(call{Who: "erin lists blocks with a bad limit", Method: "GET", Path: "/v1/blocks?limit=0", Auth: tokens["erin"],
		Want: 400, Code: "invalid_parameter", OffSpec: true})
	c.do(call{Who: "erin asks carol, whom she blocked", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["erin"],
		Body: map[string]string{"to": "carol"}, Want: 409, Code: "agent_blocked"})
	c.do(call{Who: "carol asks erin, who blocked her: answered like a new request", Method: "POST", Path: "/v1/friends/requests", Auth: tokens["carol"],
		Body: map[string]string{"to": "erin"}, Want: 201})
	c.do(call{Who: "erin unblocks carol", Method: "DELETE", Path: "/v1/blocks/carol", Auth: tokens["erin"], Want: 204})
	c.do(call{Who: "erin unblocks an invalid id", Method: "DELETE", Path: "/v1/blocks/not%20valid", Auth: tokens["erin"],
		Want: 422, Code: "invalid_agent_id", OffSpec: true})
	c.do(call{Who: "alice lists her friends", Method: "GET", Path: "/v1/friends", Auth: tokens["alice"], Want: 200})
	next := c.do(call{Who: "alice lists one friend", Method: "GET", Path: "/v1/friends?limit=1", Auth: tokens["alice"], Want: 200}).field("next_after")
	c.do(call{Who: "alice lists the friends after the first", Method: "GET", Path: "/v1/friends?limit=1&after=" + next, Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "alice asks for no friends at all", Method: "GET", Path: "/v1/friends?limit=0", Auth: tokens["alice"],
		Want: 400, Code: "invalid_parameter", OffSpec: true})
	c.do(call{Who: "carol unfriends dave", Method: "DELETE", Path: "/v1/friends/dave", Auth: tokens["carol"], Want: 204})
	c.do(call{Who: "carol unfriends dave again", Method: "DELETE", Path: "/v1/friends/dave", Auth: tokens["carol"], Want: 404, Code: "not_friends"})

	// ---- groups ----
	research := c.do(call{Who: "alice creates research", Method: "POST", Path: "/v1/groups", Auth: tokens["alice"],
		Body: map[string]string{"name": "Research"}, Want: 201}).field("group_id")
	solo := c.do(call{Who: "bob creates a group of one", Method: "POST", Path: "/v1/groups", Auth: tokens["bob"],
		Body: map[string]string{"name": "Solo"}, Want: 201}).field("group_id")
	c.do(call{Who: "alice names a group with 201 characters", Method: "POST", Path: "/v1/groups", Auth: tokens["alice"],
		Body: map[string]string{"name": strings.Repeat("x", 201)}, Want: 422, Code: "invalid_name", OffSpec: true})
	c.do(call{Who: "dave creates a group with an owner field", Method: "POST", Path: "/v1/groups", Auth: tokens["dave"],
		Body: `{"name":"Mine","owner":"alice"}`, Want: 400, Code: "invalid_json", OffSpec: true})
	c.do(call{Who: "alice adds bob to research", Method: "POST", Path: "/v1/groups/" + research + "/members", Auth: tokens["alice"],
		Body: map[string]string{"agent_id": "bob"}, Want: 201})
	c.do(call{Who: "alice adds bob to research again", Method: "POST", Path: "/v1/groups/" + research + "/members", Auth: tokens["alice"],
		Body: map[string]string{"agent_id": "bob"}, Want: 200})
	c.do(call{Who: "alice makes carol an admin of research", Method: "POST", Path: "/v1/groups/" + research + "/members", Auth: tokens["alice"],
		Body: map[string]string{"agent_id": "carol", "role": "admin"}, Want: 201})
	c.do(call{Who: "bob, a plain member, adds dave", Method: "POST", Path: "/v1/groups/" + research + "/members", Auth: tokens["bob"],
		Body: map[string]string{"agent_id": "dave"}, Want: 403, Code: "not_group_admin"})
	c.do(call{Who: "carol, an admin, adds an admin", Method: "POST", Path: "/v1/groups/" + research + "/members", Auth: tokens["carol"],
		Body: map[string]string{"agent_id": "dave", "role": "admin"}, Want: 403, Code: "role_not_allowed"})
	c.do(call{Who: "alice adds the stranger erin", Method: "POST", Path: "/v1/groups/" + research + "/members", Auth: tokens["alice"],
		Body: map[string]string{"agent_id": "erin"}, Want: 403, Code: "not_a_friend"})
	c.do(call{Who: "erin adds to a group she is not in", Method: "POST", Path: "/v1/groups/" + research + "/members", Auth: tokens["erin"],
		Body: map[string]string{"agent_id": "bob"}, Want: 404, Code: "group_not_found"})
	c.do(call{Who: "alice adds an invalid id", Method: "POST", Path: "/v1/groups/" + research + "/members", Auth: tokens["alice"],
		Body: map[string]string{"agent_id": "not valid"}, Want: 422, Code: "invalid_agent_id", OffSpec: true})
	c.do(call{Who: "alice makes bob the owner", Method: "POST", Path: "/v1/groups/" + research + "/members", Auth: tokens["alice"],
		Body: map[string]string{"agent_id": "bob", "role": "owner"}, Want: 422, Code: "invalid_role", OffSpec: true})
	c.do(call{Who: "alice adds with a typo", Method: "POST", Path: "/v1/groups/" + research + "/members", Auth: tokens["alice"],
		Body: `{"agentid":"bob"}`, Want: 400, Code: "invalid_json", OffSpec: true})
	c.do(call{Who: "alice lists her groups", Method: "GET", Path: "/v1/groups", Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "alice lists one group", Method: "GET", Path: "/v1/groups?limit=1", Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "alice lists groups with a bad limit", Method: "GET", Path: "/v1/groups?limit=many", Auth: tokens["alice"],
		Want: 400, Code: "invalid_parameter", OffSpec: true})
	c.do(call{Who: "bob reads the roster of research", Method: "GET", Path: "/v1/groups/" + research + "/roster", Auth: tokens["bob"], Want: 200})
	c.do(call{Who: "alice reads one member of ops", Method: "GET", Path: "/v1/groups/ops/roster?limit=1", Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "erin reads the roster of ops", Method: "GET", Path: "/v1/groups/ops/roster", Auth: tokens["erin"], Want: 404, Code: "group_not_found"})
	c.do(call{Who: "alice pages from an invalid id", Method: "GET", Path: "/v1/groups/ops/roster?after=" + url.QueryEscape("a b"), Auth: tokens["alice"],
		Want: 400, Code: "invalid_parameter", OffSpec: true})
	c.do(call{Who: "bob removes carol, an admin", Method: "DELETE", Path: "/v1/groups/" + research + "/members/carol", Auth: tokens["bob"],
		Want: 403, Code: "not_group_admin"})
	c.do(call{Who: "alice removes erin, no member", Method: "DELETE", Path: "/v1/groups/" + research + "/members/erin", Auth: tokens["alice"],
		Want: 404, Code: "member_not_found"})
	c.do(call{Who: "erin removes bob from ops, which she is not in", Method: "DELETE", Path: "/v1/groups/ops/members/bob", Auth: tokens["erin"],
		Want: 404, Code: "group_not_found"})
	c.do(call{Who: "carol removes bob", Method: "DELETE", Path: "/v1/groups/" + research + "/members/bob", Auth: tokens["carol"], Want: 204})

	// ---- messages and tasks ----
	first := map[string]any{"to": "bob", "message_id": "m-1", "parts": []map[string]any{
		{"kind": "text", "text": "Hello bob"},
		{"kind": "data", "data": map[string]any{"priority": 2, "tags": []string{"a", "b"}}, "media_type": "application/json"},
		{"kind": "url", "url": "https://example.com/spec.pdf", "name": "spec.pdf", "media_type": "application/pdf"},
		{"kind": "file", "bytes": base64.StdEncoding.EncodeToString([]byte("hello")), "name": "hello.txt", "media_type": "text/plain"},
	}}
	sent := c.do(call{Who: "alice sends bob every kind of part", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"], Body: first, Want: 202})
	task := sent.field("task_id")
	again := c.do(call{Who: "alice retries the same message", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"], Body: first, Want: 202})
	if !bytes.Equal(again.Body, sent.Body) {
		t.Errorf("POST /v1/messages: a retry answered %s, the original %s", again.Body, sent.Body)
	}
	c.do(call{Who: "alice reuses the message id for other content", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "bob", "message_id": "m-1", "parts": text("other")}, Want: 409, Code: "message_id_conflict"})
	c.do(call{Who: "alice writes to the stranger erin", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "erin", "parts": text("hi")}, Want: 403, Code: "not_reachable"})
	c.do(call{Who: "alice writes to herself", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "alice", "parts": text("hi")}, Want: 422, Code: "cannot_message_self"})
	c.do(call{Who: "alice appends to a task that does not exist", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "bob", "task_id": "no-such-task", "parts": text("hi")}, Want: 404, Code: "task_not_found"})
	c.do(call{Who: "alice appends to bob's task naming dave", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "dave", "task_id": task, "parts": text("hi")}, Want: 422, Code: "recipient_mismatch"})
	c.do(call{Who: "alice appends in another context", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "bob", "task_id": task, "context_id": "elsewhere", "parts": text("hi")}, Want: 422, Code: "context_mismatch"})
	c.do(call{Who: "bob borrows his conversation with alice for dave", Method: "POST", Path: "/v1/messages", Auth: tokens["bob"],
		Body: map[string]any{"to": "dave", "context_id": sent.field("context_id"), "parts": text("hi")}, Want: 422, Code: "context_mismatch"})
	c.do(call{Who: "alice appends to the task", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "bob", "task_id": task, "parts": text("one more thing")}, Want: 202})
	c.do(call{Who: "alice sends no parts", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "bob", "parts": []any{}}, Want: 400, Code: "invalid_parts", OffSpec: true})
	c.do(call{Who: "alice sends a text part with a url", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "bob", "parts": []map[string]any{{"kind": "text", "text": "x", "url": "https://example.com"}}}, Want: 400, Code: "invalid_part", OffSpec: true})
	c.do(call{Who: "alice sends an invalid message id", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "bob", "message_id": "has space", "parts": text("x")}, Want: 400, Code: "invalid_message_id", OffSpec: true})
	c.do(call{Who: "carol writes to an invalid id", Method: "POST", Path: "/v1/messages", Auth: tokens["carol"],
		Body: map[string]any{"to": "not valid", "parts": text("x")}, Want: 400, Code: "invalid_recipient", OffSpec: true})
	c.do(call{Who: "carol names an invalid task", Method: "POST", Path: "/v1/messages", Auth: tokens["carol"],
		Body: map[string]any{"to": "alice", "task_id": "bad task", "parts": text("x")}, Want: 400, Code: "invalid_task_id", OffSpec: true})
	c.do(call{Who: "carol names an invalid context", Method: "POST", Path: "/v1/messages", Auth: tokens["carol"],
		Body: map[string]any{"to": "alice", "context_id": "bad context", "parts": text("x")}, Want: 400, Code: "invalid_context_id", OffSpec: true})
	c.do(call{Who: "carol copies dave", Method: "POST", Path: "/v1/messages", Auth: tokens["carol"],
		Body: `{"to":"alice","cc":"dave","parts":[{"kind":"text","text":"x"}]}`, Want: 400, Code: "invalid_json", OffSpec: true})
	c.do(call{Who: "alice sends 300 KiB of text", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "bob", "parts": text(strings.Repeat("x", 300<<10))}, Want: 413, Code: "message_too_large"})

	c.do(call{Who: "bob replies", Method: "POST", Path: "/v1/tasks/" + task + "/messages", Auth: tokens["bob"],
		Body: map[string]any{"parts": text("Hi alice"), "message_id": "r-1"}, Want: 202})
	c.do(call{Who: "bob reuses his reply's id for other content", Method: "POST", Path: "/v1/tasks/" + task + "/messages", Auth: tokens["bob"],
		Body: map[string]any{"parts": text("Hi again"), "message_id": "r-1"}, Want: 409, Code: "message_id_conflict"})
	c.do(call{Who: "bob replies with an invalid message id", Method: "POST", Path: "/v1/tasks/" + task + "/messages", Auth: tokens["bob"],
		Body: map[string]any{"parts": text("x"), "message_id": "-lead"}, Want: 400, Code: "invalid_message_id", OffSpec: true})
	c.do(call{Who: "bob replies with a file part without bytes", Method: "POST", Path: "/v1/tasks/" + task + "/messages", Auth: tokens["bob"],
		Body: map[string]any{"parts": []map[string]any{{"kind": "file", "name": "a.txt", "media_type": "text/plain"}}}, Want: 400, Code: "invalid_part", OffSpec: true})
	c.do(call{Who: "bob replies with 300 KiB", Method: "POST", Path: "/v1/tasks/" + task + "/messages", Auth: tokens["bob"],
		Body: map[string]any{"parts": text(strings.Repeat("y", 300<<10))}, Want: 413, Code: "message_too_large"})
	c.do(call{Who: "bob replies to someone", Method: "POST", Path: "/v1/tasks/" + task + "/messages", Auth: tokens["bob"],
		Body: `{"to":"alice","parts":[{"kind":"text","text":"x"}]}`, Want: 400, Code: "invalid_json", OffSpec: true})
	c.do(call{Who: "erin replies in a task not hers", Method: "POST", Path: "/v1/tasks/" + task + "/messages", Auth: tokens["erin"],
		Body: map[string]any{"parts": text("me too")}, Want: 404, Code: "task_not_found"})
	c.do(call{Who: "bob replies with nothing", Method: "POST", Path: "/v1/tasks/" + task + "/messages", Auth: tokens["bob"],
		Body: map[string]any{}, Want: 400, Code: "invalid_parts", OffSpec: true})

	c.do(call{Who: "bob starts working", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["bob"],
		Body: map[string]any{"status": "working"}, Want: 200})
	c.do(call{Who: "bob asks a question", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["bob"],
		Body: map[string]any{"status": "input-required", "message_id": "q-1", "message": map[string]any{"parts": text("Which format?")}}, Want: 200})
	c.do(call{Who: "alice completes bob's work", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["alice"],
		Body: map[string]any{"status": "completed"}, Want: 409, Code: "illegal_transition"})
	c.do(call{Who: "alice sends a state that does not exist", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["alice"],
		Body: map[string]any{"status": "done"}, Want: 400, Code: "invalid_status", OffSpec: true})
	c.do(call{Who: "bob reuses his question's id for another move", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["bob"],
		Body: map[string]any{"status": "working", "message_id": "q-1"}, Want: 409, Code: "message_id_conflict"})
	c.do(call{Who: "bob moves with an invalid message id", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["bob"],
		Body: map[string]any{"status": "working", "message_id": "a b"}, Want: 400, Code: "invalid_message_id", OffSpec: true})
	c.do(call{Who: "bob attaches an empty note", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["bob"],
		Body: map[string]any{"status": "working", "message": map[string]any{"parts": []any{}}}, Want: 400, Code: "invalid_parts", OffSpec: true})
	c.do(call{Who: "bob attaches a url part that is no url", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["bob"],
		Body: map[string]any{"status": "working", "message": map[string]any{"parts": []map[string]any{{"kind": "url", "url": "ftp://x"}}}}, Want: 400, Code: "invalid_part", OffSpec: true})
	c.do(call{Who: "bob attaches a 300 KiB note", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["bob"],
		Body: map[string]any{"status": "working", "message": map[string]any{"parts": text(strings.Repeat("z", 300<<10))}}, Want: 413, Code: "message_too_large"})
	c.do(call{Who: "bob moves with a reason", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["bob"],
		Body: `{"status":"working","reason":"ready"}`, Want: 400, Code: "invalid_json", OffSpec: true})
	c.do(call{Who: "alice answers the question", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["alice"],
		Body: map[string]any{"status": "working", "message": map[string]any{"parts": text("PDF")}}, Want: 200})
	c.do(call{Who: "erin moves a task not hers", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["erin"],
		Body: map[string]any{"status": "canceled"}, Want: 404, Code: "task_not_found"})

	c.do(call{Who: "bob adds an artifact", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["bob"],
		Body: map[string]any{"name": "report.md", "parts": text("# Report")}, Want: 201})
	c.do(call{Who: "bob adds an artifact with an id", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["bob"],
		Body: map[string]any{"name": "data.json", "message_id": "a-1", "parts": []map[string]any{{"kind": "data", "data": []int{1, 2}}}}, Want: 201})
	c.do(call{Who: "bob reuses the artifact's id for another name", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["bob"],
		Body: map[string]any{"name": "other.json", "message_id": "a-1", "parts": []map[string]any{{"kind": "data", "data": []int{1, 2}}}}, Want: 409, Code: "message_id_conflict"})
	c.do(call{Who: "erin adds an artifact to a task not hers", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["erin"],
		Body: map[string]any{"name": "x.md", "parts": text("x")}, Want: 404, Code: "task_not_found"})
	c.do(call{Who: "bob adds an artifact with an invalid id", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["bob"],
		Body: map[string]any{"name": "x.md", "message_id": "a/1", "parts": text("x")}, Want: 400, Code: "invalid_message_id", OffSpec: true})
	c.do(call{Who: "bob adds an artifact with no parts", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["bob"],
		Body: map[string]any{"name": "x.md", "parts": []any{}}, Want: 400, Code: "invalid_parts", OffSpec: true})
	c.do(call{Who: "bob adds a data part holding null", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["bob"],
		Body: map[string]any{"name": "x.md", "parts": []map[string]any{{"kind": "data", "data": nil}}}, Want: 400, Code: "invalid_part", OffSpec: true})
	c.do(call{Who: "bob adds a 300 KiB artifact", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["bob"],
		Body: map[string]any{"name": "big.txt", "parts": text(strings.Repeat("b", 300<<10))}, Want: 413, Code: "message_too_large"})
	c.do(call{Who: "bob adds an artifact with a size", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["bob"],
		Body: `{"name":"x.md","size":1,"parts":[{"kind":"text","text":"x"}]}`, Want: 400, Code: "invalid_json", OffSpec: true})
	c.do(call{Who: "alice, the initiator, adds an artifact", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["alice"],
		Body: map[string]any{"name": "mine.md", "parts": text("x")}, Want: 403, Code: "not_task_recipient"})
	c.do(call{Who: "bob adds an artifact without a name", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["bob"],
		Body: map[string]any{"name": "", "parts": text("x")}, Want: 400, Code: "invalid_name", OffSpec: true})
	c.do(call{Who: "bob completes the task", Method: "POST", Path: "/v1/tasks/" + task + "/status", Auth: tokens["bob"],
		Body: map[string]any{"status": "completed"}, Want: 200})
	c.do(call{Who: "bob adds an artifact to the completed task", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Auth: tokens["bob"],
		Body: map[string]any{"name": "late.md", "parts": text("x")}, Want: 409, Code: "task_terminal"})
	c.do(call{Who: "bob replies in the completed task", Method: "POST", Path: "/v1/tasks/" + task + "/messages", Auth: tokens["bob"],
		Body: map[string]any{"parts": text("late")}, Want: 409, Code: "task_terminal"})
	c.do(call{Who: "alice appends to the completed task", Method: "POST", Path: "/v1/messages", Auth: tokens["alice"],
		Body: map[string]any{"to": "bob", "task_id": task, "parts": text("late")}, Want: 409, Code: "task_terminal"})

	fanout := c.do(call{Who: "alice writes to ops", Method: "POST", Path: "/v1/groups/ops/messages", Auth: tokens["alice"],
		Body: map[string]any{"parts": text("Stand-up in 5"), "message_id": "g-1"}, Want: 202})
	c.do(call{Who: "alice reuses the group message id for other content", Method: "POST", Path: "/v1/groups/ops/messages", Auth: tokens["alice"],
		Body: map[string]any{"parts": text("Stand-up in 10"), "message_id": "g-1"}, Want: 409, Code: "message_id_conflict"})
	c.do(call{Who: "erin writes to ops", Method: "POST", Path: "/v1/groups/ops/messages", Auth: tokens["erin"],
		Body: map[string]any{"parts": text("hi")}, Want: 404, Code: "group_not_found"})
	c.do(call{Who: "bob writes to his group of one", Method: "POST", Path: "/v1/groups/" + solo + "/messages", Auth: tokens["bob"],
		Body: map[string]any{"parts": text("echo")}, Want: 422, Code: "no_recipients"})
	c.do(call{Who: "alice writes a part of unknown kind to ops", Method: "POST", Path: "/v1/groups/ops/messages", Auth: tokens["alice"],
		Body: map[string]any{"parts": []map[string]any{{"kind": "video"}}}, Want: 400, Code: "invalid_part", OffSpec: true})
	c.do(call{Who: "dave writes to ops with an invalid id", Method: "POST", Path: "/v1/groups/ops/messages", Auth: tokens["dave"],
		Body: map[string]any{"parts": text("x"), "message_id": "x y"}, Want: 400, Code: "invalid_message_id", OffSpec: true})
	c.do(call{Who: "dave writes nothing to ops", Method: "POST", Path: "/v1/groups/ops/messages", Auth: tokens["dave"],
		Body: map[string]any{"parts": []any{}}, Want: 400, Code: "invalid_parts", OffSpec: true})
	c.do(call{Who: "dave writes 300 KiB to ops", Method: "POST", Path: "/v1/groups/ops/messages", Auth: tokens["dave"],
		Body: map[string]any{"parts": text(strings.Repeat("d", 300<<10))}, Want: 413, Code: "message_too_large"})
	c.do(call{Who: "dave names the recipients", Method: "POST", Path: "/v1/groups/ops/messages", Auth: tokens["dave"],
		Body: `{"to":["bob"],"parts":[{"kind":"text","text":"x"}]}`, Want: 400, Code: "invalid_json", OffSpec: true})
	// Nesting has no JSON Schema keyword: these requests match the document
	// and are refused by the cap it describes in prose.
	deep := []map[string]any{{"kind": "data", "data": json.RawMessage(strings.Repeat("[", 33) + strings.Repeat("]", 33))}}
	for _, k := range []call{
		{Who: "alice sends data 33 levels deep", Method: "POST", Path: "/v1/messages", Body: map[string]any{"to": "bob", "parts": deep}},
		{Who: "alice writes data 33 levels deep to ops", Method: "POST", Path: "/v1/groups/ops/messages", Body: map[string]any{"parts": deep}},
		{Who: "alice replies with data 33 levels deep", Method: "POST", Path: "/v1/tasks/" + task + "/messages", Body: map[string]any{"parts": deep}},
		{Who: "alice notes data 33 levels deep", Method: "POST", Path: "/v1/tasks/" + task + "/status", Body: map[string]any{"status": "canceled", "message": map[string]any{"parts": deep}}},
		{Who: "bob adds an artifact 33 levels deep", Method: "POST", Path: "/v1/tasks/" + task + "/artifacts", Body: map[string]any{"name": "x", "parts": deep}},
	} {
		k.Auth, k.Want, k.Code = tokens["alice"], 400, "too_deep"
		if strings.HasSuffix(k.Path, "/artifacts") {
			k.Auth = tokens["bob"]
		}
		c.do(k)
	}
	var groupTask string
	var fan struct {
		Tasks []struct {
			To     string `json:"to"`
			TaskID string `json:"task_id"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(fanout.Body, &fan); err == nil && len(fan.Tasks) > 0 {
		groupTask = fan.Tasks[0].TaskID
	}

	c.do(call{Who: "alice reads the task", Method: "GET", Path: "/v1/tasks/" + task, Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "bob reads his task from the group", Method: "GET", Path: "/v1/tasks/" + groupTask, Auth: tokens["bob"], Want: 200})
	c.do(call{Who: "erin reads a task not hers", Method: "GET", Path: "/v1/tasks/" + task, Auth: tokens["erin"], Want: 404, Code: "task_not_found"})
	msgs := "/v1/tasks/" + task + "/messages"
	after := c.do(call{Who: "alice reads the task's first two messages", Method: "GET", Path: msgs + "?limit=2", Auth: tokens["alice"], Want: 200}).field("next_after")
	c.do(call{Who: "alice reads the messages after them", Method: "GET", Path: msgs + "?after=" + url.QueryEscape(after), Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "erin reads the messages of a task not hers", Method: "GET", Path: msgs, Auth: tokens["erin"], Want: 404, Code: "task_not_found"})
	c.do(call{Who: "alice sends a message cursor the API never gave", Method: "GET", Path: msgs + "?after=bm9wZQ", Auth: tokens["alice"], Want: 400, Code: "invalid_cursor"})
	c.do(call{Who: "alice asks for 1000 messages", Method: "GET", Path: msgs + "?limit=1000", Auth: tokens["alice"], Want: 400, Code: "invalid_query", OffSpec: true})
	c.do(call{Who: "alice lists her tasks", Method: "GET", Path: "/v1/tasks", Auth: tokens["alice"], Want: 200})
	cursor := c.do(call{Who: "alice lists one task", Method: "GET", Path: "/v1/tasks?limit=1", Auth: tokens["alice"], Want: 200}).field("next_cursor")
	c.do(call{Who: "alice lists the next page", Method: "GET", Path: "/v1/tasks?limit=1&cursor=" + url.QueryEscape(cursor), Auth: tokens["alice"], Want: 200})
	c.do(call{Who: "bob lists the completed tasks he received in a context", Method: "GET",
		Path: "/v1/tasks?role=recipient&status=completed&context_id=" + url.QueryEscape(sent.field("context_id")), Auth: tokens["bob"], Want: 200})
	c.do(call{Who: "alice sends a cursor the API never gave", Method: "GET", Path: "/v1/tasks?cursor=bm9wZQ", Auth: tokens["alice"], Want: 400, Code: "invalid_cursor"})
	c.do(call{Who: "alice filters by a role that does not exist", Method: "GET", Path: "/v1/tasks?role=boss", Auth: tokens["alice"],
		Want: 400, Code: "invalid_query", OffSpec: true})

	// The inbox answers must hold every body shape, or validating them
	// would prove little.
	holds := func(who string, a answer, fragments ...string) {
		for _, f := range fragments {
			if !bytes.Contains(a.Body, []byte(f)) {
				t.Errorf("GET /v1/inbox: %s's events hold no %s: %s", who, f, a.Body)
			}
		}
	}
	holds("bob", c.do(call{Who: "bob reads his inbox", Method: "GET", Path: "/v1/inbox", Auth: tokens["bob"], Want: 200}),
		`"type":"message"`, `"type":"status"`, `"group_id":"ops"`)
	holds("alice", c.do(call{Who: "alice reads her inbox", Method: "GET", Path: "/v1/inbox?after=0&limit=500", Auth: tokens["alice"], Want: 200}),
		`"type":"message"`, `"type":"status"`, `"type":"artifact"`, `"state":"input-required"`)
	// An event stored before the nesting caps is served as a placeholder.
	if _, err := db.Exec("UPDATE outbox_events SET body = ? WHERE recipient = 'alice' AND seq = 1",
		`{"message":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`}`); err != nil {
		t.Fatal(err)
	}
	holds("alice", c.do(call{Who: "alice reads an event that can no longer be served", Method: "GET", Path: "/v1/inbox?after=0&limit=1", Auth: tokens["alice"], Want: 200}),
		`"type":"undeliverable"`, `"code":"too_deep"`)
	c.do(call{Who: "bob long-polls past his first event", Method: "GET", Path: "/v1/inbox?after=1&limit=2&wait=1", Auth: tokens["bob"], Want: 200})
	c.do(call{Who: "dave reads an empty inbox page", Method: "GET", Path: "/v1/inbox?after=1000", Auth: tokens["dave"], Want: 200})
	c.do(call{Who: "bob asks for 501 events", Method: "GET", Path: "/v1/inbox?limit=501", Auth: tokens["bob"], Want: 400, Code: "invalid_query", OffSpec: true})
	c.do(call{Who: "no credentials", Method: "GET", Path: "/v1/inbox", Want: 401, Code: "missing_token", OffSpec: true})

	// ---- the mesh's own events: idle tasks fail, both parties are told ----
	time.Sleep(cfg.TaskIdleTimeout + 100*time.Millisecond)
	if err := reg.Jobs["TaskScannerFunction"](context.Background()); err != nil {
		t.Fatalf("task scanner: %v", err)
	}
	holds("dave", c.do(call{Who: "dave reads the idle timeout of his group task", Method: "GET", Path: "/v1/inbox?after=1", Auth: tokens["dave"], Want: 200}),
		`"from":""`, `"reason":"idle_timeout"`)

	// ---- the rate limit, honestly: rita drains her burst on a read route ----
	c.do(call{Who: "rita, past her burst", Method: "GET", Path: "/v1/agents/me", Auth: tokens["rita"],
		Drain: 3 * identity.RateBurst, Want: 429, Code: "rate_limited"})
	c.do(call{Who: "rita exchanges her key past her burst", Method: "POST", Path: "/v1/auth/token",
		Body: map[string]string{"api_key": apiKeys["rita"]}, Drain: 3 * identity.RateBurst, Want: 429, Code: "rate_limited"})
}

// checkDriftIsCaught replays real answers of the scenario, each changed in
// one way the document does not allow, and requires validateResponse to
// object: without this, a validator that accepted anything would pass.
func checkDriftIsCaught(t *testing.T, doc apiDoc, samples map[string]sample) {
	edit := func(body []byte, change func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("not a JSON object: %s", body)
		}
		change(m)
		b, _ := json.Marshal(m)
		return b
	}
	firstEvent := func(m map[string]any) map[string]any {
		events, _ := m["events"].([]any)
		if len(events) == 0 {
			t.Fatal("the inbox sample holds no event")
		}
		return events[0].(map[string]any)
	}
	cases := []struct {
		what, sample string
		status       int
		header       func(h http.Header)
		body         func(b []byte) []byte
	}{
		{what: "an undeclared field", sample: "GET /v1/agents/me 200",
			body: func(b []byte) []byte { return edit(b, func(m map[string]any) { m["nickname"] = "al" }) }},
		{what: "a field of the wrong type", sample: "GET /v1/agents/me 200",
			body: func(b []byte) []byte { return edit(b, func(m map[string]any) { m["key_epoch"] = "1" }) }},
		{what: "a missing required field", sample: "POST /v1/messages 202",
			body: func(b []byte) []byte { return edit(b, func(m map[string]any) { delete(m, "context_id") }) }},
		{what: "a value outside its enum", sample: "DELETE /v1/agents/me/online 200",
			body: func(b []byte) []byte { return edit(b, func(m map[string]any) { m["status"] = "asleep" }) }},
		{what: "an undeclared status", sample: "POST /v1/groups 201", status: http.StatusOK},
		{what: "a 204 with a body", sample: "DELETE /v1/friends/{id} 204",
			body: func([]byte) []byte { return []byte(`{}`) }},
		{what: "a problem code the operation does not list", sample: "GET /v1/tasks/{id} 404",
			body: func(b []byte) []byte { return edit(b, func(m map[string]any) { m["code"] = "task_gone" }) }},
		{what: "a problem as plain JSON", sample: "GET /v1/tasks/{id} 404",
			header: func(h http.Header) { h.Set("Content-Type", "application/json") }},
		{what: "a 429 without Retry-After", sample: "GET /v1/agents/me 429",
			header: func(h http.Header) { h.Del("Retry-After") }},
		{what: "an event body that does not fit its type", sample: "GET /v1/inbox 200",
			body: func(b []byte) []byte {
				return edit(b, func(m map[string]any) { delete(firstEvent(m)["body"].(map[string]any), "task") })
			}},
		{what: "an inbox event still sealed", sample: "GET /v1/inbox 200",
			body: func(b []byte) []byte { return edit(b, func(m map[string]any) { firstEvent(m)["sealed"] = "AAAA" }) }},
	}
	for _, tc := range cases {
		t.Run(tc.what+" in "+tc.sample+" is reported", func(t *testing.T) {
			s, ok := samples[tc.sample]
			if !ok {
				t.Fatalf("the scenario recorded no %s", tc.sample)
			}
			if problems := doc.validateResponse(s.req, s.route, s.params, s.Status, s.Header, s.Body); len(problems) > 0 {
				t.Fatalf("the unchanged answer already fails: %v", problems)
			}
			status, header, body := s.Status, s.Header.Clone(), s.Body
			if tc.status != 0 {
				status = tc.status
			}
			if tc.header != nil {
				tc.header(header)
			}
			if tc.body != nil {
				body = tc.body(body)
			}
			if problems := doc.validateResponse(s.req, s.route, s.params, status, header, body); len(problems) == 0 {
				t.Errorf("%d %s passed validation", status, body)
			}
		})
	}
}

// strictBodies sends, on every route that accepted a body in the scenario,
// that same request twice more: with its first key repeated (400
// duplicate_key) and labelled text/plain (415 unsupported_media_type). Both
// are refused before the handler, so they change nothing.
func strictBodies(t *testing.T, c *conformance) {
	keys := make([]string, 0, len(c.bodies))
	for k := range c.bodies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		k := c.bodies[key]
		if k.Path == oauthTokenPath {
			continue // a form, not JSON: runCardScenario checks its own
		}
		k.Drain, k.OffSpec = 0, false
		dup := k
		dup.Who, dup.DupKey, dup.Want, dup.Code = k.Who+", with a key repeated", true, http.StatusBadRequest, "duplicate_key"
		c.do(dup)
		plain := k
		plain.Who, plain.ContentType, plain.Want, plain.Code, plain.OffSpec = k.Who+", as text/plain", "text/plain", http.StatusUnsupportedMediaType, "unsupported_media_type", true
		c.do(plain)
	}
	if len(keys) < 15 {
		t.Errorf("only %d routes accepted a body in the scenario: %v", len(keys), keys)
	}
}

// repeatFirstKey returns the JSON object b with its first key (and value)
// given twice: {"a":1,"b":2} becomes {"a":1,"a":1,"b":2}.
func repeatFirstKey(b []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') || !dec.More() {
		return b
	}
	start := dec.InputOffset()
	if _, err := dec.Token(); err != nil { // the key
		return b
	}
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return b
	}
	pair := bytes.TrimLeft(b[start:dec.InputOffset()], " \t\r\n,")
	out := append([]byte{}, b[:start]...)
	out = append(out, pair...)
	out = append(out, ',')
	return append(out, b[start:]...)
}
