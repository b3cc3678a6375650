package deploy_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/agentmesh/agentmesh/shared/deploy"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// cfnTemplate is a CloudFormation/SAM template as plain maps, with the short
// intrinsic tags turned into their long form (!Ref X -> {"Ref": "X"},
// !GetAtt A.B -> {"Fn::GetAtt": "A.B"}, !Sub s -> {"Fn::Sub": s}), so tests
// can read what refers to what.
type cfnTemplate struct {
	Parameters map[string]any
	Resources  map[string]map[string]any
	Outputs    map[string]any
	Globals    map[string]any
}

func loadTemplate(t *testing.T, rel string) cfnTemplate {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	top, ok := plain(doc.Content[0]).(map[string]any)
	if !ok {
		t.Fatalf("%s is not a mapping", rel)
	}
	tpl := cfnTemplate{Resources: map[string]map[string]any{}}
	tpl.Parameters, _ = top["Parameters"].(map[string]any)
	tpl.Outputs, _ = top["Outputs"].(map[string]any)
	tpl.Globals, _ = top["Globals"].(map[string]any)
	res, _ := top["Resources"].(map[string]any)
	for id, r := range res {
		m, ok := r.(map[string]any)
		if !ok {
			t.Fatalf("%s: resource %s is not a mapping", rel, id)
		}
		tpl.Resources[id] = m
	}
	return tpl
}

// plain converts a YAML node to maps, slices and scalars, expanding tags.
func plain(n *yaml.Node) any {
	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = plain(n.Content[i+1])
		}
		v = m
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, c := range n.Content {
			s[i] = plain(c)
		}
		v = s
	case yaml.AliasNode:
		return plain(n.Alias)
	default:
		v = n.Value
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		name := "Fn::" + n.Tag[1:]
		if n.Tag == "!Ref" {
			name = "Ref"
		}
		return map[string]any{name: v}
	}
	return v
}

// ofType returns the logical ids of the resources of one type, sorted.
func (c cfnTemplate) ofType(typ string) []string {
	var ids []string
	for id, r := range c.Resources {
		if r["Type"] == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

func (c cfnTemplate) props(id string) map[string]any {
	p, _ := c.Resources[id]["Properties"].(map[string]any)
	return p
}

// dependsOn lists a resource's DependsOn (a string or a list).
func (c cfnTemplate) dependsOn(id string) []string {
	switch d := c.Resources[id]["DependsOn"].(type) {
	case string:
		return []string{d}
	case []any:
		var out []string
		for _, x := range d {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestTheMigrationRunsBeforeAnythingGoesLive(t *testing.T) {
	tpl := loadTemplate(t, "template.yaml")
	migrations := tpl.ofType("Custom::SchemaMigration")
	if len(migrations) != 1 {
		t.Fatalf("template.yaml has %d Custom::SchemaMigration resources, want 1", len(migrations))
	}
	mig := migrations[0]
	props := tpl.props(mig)
	token, _ := props["ServiceToken"].(map[string]any)
	migrateFn := strings.TrimSuffix(fmt.Sprint(token["Fn::GetAtt"]), ".Arn")

	t.Run("the custom resource carries the hash of the embedded migrations", func(t *testing.T) {
		want, err := mysql.MigrationsHash()
		if err != nil {
			t.Fatal(err)
		}
		if got := props[deploy.MigrationsHashProperty]; got != want {
			t.Fatalf("%s.%s is %v; the code embeds migrations hashing to %s: set that value in template.yaml, so that CloudFormation runs the new migrations on the next deploy",
				mig, deploy.MigrationsHashProperty, got, want)
		}
	})

	t.Run("a failed migration fails the deploy in minutes, not CloudFormation's hour", func(t *testing.T) {
		if props["ServiceTimeout"] == nil {
			t.Fatalf("%s has no ServiceTimeout", mig)
		}
	})

	t.Run("every function but the migration's own depends on the migration", func(t *testing.T) {
		fns := tpl.ofType("AWS::Serverless::Function")
		if len(fns) < 30 || !contains(fns, migrateFn) {
			t.Fatalf("found functions %v and migration function %q: the template was not read", fns, migrateFn)
		}
		for _, fn := range fns {
			if fn == migrateFn {
				if contains(tpl.dependsOn(fn), mig) {
					t.Errorf("%s runs the migration and cannot depend on it", fn)
				}
				continue
			}
			// Routes and schedules are events of these functions: their
			// API Gateway integrations and EventBridge rules name the
			// function's ARN, so they come after it.
			if !contains(tpl.dependsOn(fn), mig) {
				t.Errorf("%s does not DependsOn %s: on a first deploy it could serve before the tables exist", fn, mig)
			}
		}
	})

	t.Run("every HTTP API depends on the migration", func(t *testing.T) {
		apis := append(tpl.ofType("AWS::Serverless::HttpApi"), tpl.ofType("AWS::Serverless::Api")...)
		if len(apis) == 0 {
			t.Fatal("no HTTP API in the template")
		}
		for _, api := range apis {
			if !contains(tpl.dependsOn(api), mig) {
				t.Errorf("%s does not DependsOn %s", api, mig)
			}
		}
	})

	t.Run("nothing else starts work on its own before the migration", func(t *testing.T) {
		for id, r := range tpl.Resources {
			switch r["Type"] {
			case "AWS::Events::Rule", "AWS::Scheduler::Schedule", "AWS::Lambda::EventSourceMapping",
				"AWS::ApiGatewayV2::Api", "AWS::ApiGatewayV2::Route", "AWS::Lambda::Function":
				if !contains(tpl.dependsOn(id), mig) {
					t.Errorf("%s (%s) does not DependsOn %s", id, r["Type"], mig)
				}
			}
		}
	})
}

// secretParams maps each secret's environment variable to the template
// parameter holding its ARN.
var secretParams = map[string]string{
	"MESH_DB_SECRET_ARN":               "DBSecretArn",
	"MESH_DB_APP_SECRET_ARN":           "DBAppSecretArn",
	"MESH_ADMIN_KEY_SECRET_ARN":        "AdminKeySecretArn",
	"MESH_JWT_KEYS_SECRET_ARN":         "JwtKeysSecretArn",
	"MESH_INBOX_MASTER_KEY_SECRET_ARN": "InboxMasterKeySecretArn",
}

// envSecrets returns the secret parameters a function is told about: the
// *_SECRET_ARN variables of Globals and of its own Environment.
func envSecrets(t *testing.T, tpl cfnTemplate, globals map[string]any, fn string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	add := func(vars map[string]any) {
		for name, v := range vars {
			if !strings.HasSuffix(name, "_SECRET_ARN") {
				continue
			}
			if v == "" {
				// A function's own "" blanks the Globals' value: it is not told.
				delete(out, secretParams[name])
				continue
			}
			ref, _ := v.(map[string]any)["Ref"].(string)
			if ref == "" || secretParams[name] != ref {
				t.Errorf("%s: %s is %v, want !Ref %s", fn, name, v, secretParams[name])
			}
			out[ref] = true
		}
	}
	add(envVars(globals))
	add(envVars(tpl.props(fn)))
	return out
}

func envVars(props map[string]any) map[string]any {
	env, _ := props["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	return vars
}

// policySecrets returns the secret parameters the function's policies let
// it read, and fails on any secretsmanager grant that is not GetSecretValue
// on one parameter's ARN (BatchGetSecretValue, which has no resource-level
// permission, aside).
func policySecrets(t *testing.T, tpl cfnTemplate, fn string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	pols, _ := tpl.props(fn)["Policies"].([]any)
	for _, p := range pols {
		ref, _ := p.(map[string]any)["Ref"].(string)
		if tpl.Resources[ref]["Type"] != "AWS::IAM::ManagedPolicy" {
			t.Errorf("%s: policy %v is not a managed policy of this template; the test cannot see what it grants", fn, p)
			continue
		}
		doc, _ := tpl.props(ref)["PolicyDocument"].(map[string]any)
		stmts, _ := doc["Statement"].([]any)
		for _, st := range stmts {
			m, _ := st.(map[string]any)
			if _, isIf := m["Fn::If"]; isIf {
				continue // the conditional kms:Decrypt
			}
			action := fmt.Sprint(m["Action"])
			if !strings.Contains(action, "secretsmanager:") {
				continue
			}
			switch action {
			case "secretsmanager:BatchGetSecretValue":
				continue
			case "secretsmanager:GetSecretValue":
				res, _ := m["Resource"].(map[string]any)
				param, _ := res["Ref"].(string)
				if !slices.Contains(slices.Collect(maps.Values(secretParams)), param) {
					t.Errorf("%s: policy %s grants GetSecretValue on %v, not on one secret parameter", fn, ref, m["Resource"])
				}
				out[param] = true
			default:
				t.Errorf("%s: policy %s grants %s", fn, ref, action)
			}
		}
	}
	return out
}

func TestEachFunctionReadsOnlyItsOwnSecrets(t *testing.T) {
	tpl := loadTemplate(t, "template.yaml")
	globals := tpl.Globals
	globalFn, _ := globals["Function"].(map[string]any)

	fns := tpl.ofType("AWS::Serverless::Function")
	readers := map[string][]string{} // secret parameter -> functions that can read it
	for _, fn := range fns {
		env := envSecrets(t, tpl, globalFn, fn)
		pol := policySecrets(t, tpl, fn)
		if strings.Join(slices.Sorted(maps.Keys(env)), ",") != strings.Join(slices.Sorted(maps.Keys(pol)), ",") {
			t.Errorf("%s is told about secrets %v but its policies let it read %v: the two must be the same", fn, slices.Sorted(maps.Keys(env)), slices.Sorted(maps.Keys(pol)))
		}
		for p := range pol {
			readers[p] = append(readers[p], fn)
		}
	}
	for _, p := range readers {
		sort.Strings(p)
	}

	tests := []struct {
		name   string
		secret string
		may    func(fn string) bool
	}{
		{"only admin routes can read the admin key", "AdminKeySecretArn",
			func(fn string) bool { return strings.HasPrefix(fn, "Admin") }},
		{"only the token function and the dispatcher can read the inbox master key", "InboxMasterKeySecretArn",
			func(fn string) bool { return fn == "AuthTokenFunction" || fn == "DispatcherFunction" }},
		// POST /v1/oauth/token issues the same token for stock OAuth clients.
		{"only the token functions can read the JWT signing keys", "JwtKeysSecretArn",
			func(fn string) bool { return fn == "AuthTokenFunction" || fn == "OAuthTokenFunction" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if len(readers[tc.secret]) == 0 {
				t.Fatalf("no function reads %s: the template was not read", tc.secret)
			}
			for _, fn := range readers[tc.secret] {
				if !tc.may(fn) {
					t.Errorf("%s can read %s", fn, tc.secret)
				}
			}
		})
	}
	t.Run("the token function can read the JWT keys and the inbox master key", func(t *testing.T) {
		for _, s := range []string{"JwtKeysSecretArn", "InboxMasterKeySecretArn"} {
			if !contains(readers[s], "AuthTokenFunction") {
				t.Errorf("AuthTokenFunction cannot read %s", s)
			}
		}
	})
	t.Run("every route that verifies agent tokens gets the token function's public keys", func(t *testing.T) {
		pk := tpl.ofType("Custom::JwtPublicKeys")
		if len(pk) != 1 {
			t.Fatalf("%d Custom::JwtPublicKeys resources, want 1", len(pk))
		}
		token, _ := tpl.props(pk[0])["ServiceToken"].(map[string]any)
		if fmt.Sprint(token["Fn::GetAtt"]) != "AuthTokenFunction.Arn" {
			t.Errorf("%s is answered by %v, want the token function (the only holder of the signing keys)", pk[0], token)
		}
		want := fmt.Sprint(map[string]any{"Fn::GetAtt": pk[0] + ".Keys"})
		n := 0
		for _, fn := range fns {
			// $connect of the push channel and the A2A gateway (a Function
			// URL) authenticate the agent token too.
			isRoute := strings.Contains(fmt.Sprint(tpl.props(fn)["Events"]), "Type:HttpApi") || fn == "PushConnectFunction" || fn == "A2aFunction"
			// Account routes and the console authenticate a session cookie.
			agentAuth := isRoute && fn != "HealthFunction" && fn != "AuthTokenFunction" && fn != "OAuthTokenFunction" && !strings.HasPrefix(fn, "Admin") &&
				!strings.HasPrefix(fn, "Account") && fn != "ConsoleFunction"
			got := envVars(tpl.props(fn))["MESH_JWT_PUBLIC_KEYS"]
			switch {
			case agentAuth && fmt.Sprint(got) != want:
				t.Errorf("%s verifies agent tokens but its MESH_JWT_PUBLIC_KEYS is %v, want %s", fn, got, want)
			case !agentAuth && got != nil:
				t.Errorf("%s verifies no agent token but is given MESH_JWT_PUBLIC_KEYS", fn)
			case agentAuth:
				n++
			}
		}
		if n < 20 {
			t.Errorf("only %d functions verify agent tokens: the template was not read", n)
		}
	})

	// Who reads the database secrets and who connects with IAM:
	// TestOnlyTheMigrationHoldsADatabasePassword (iam_template_test.go).
}

func TestTheStackIsObservable(t *testing.T) {
	tpl := loadTemplate(t, "template.yaml")
	globals := tpl.Globals
	globalFn, _ := globals["Function"].(map[string]any)
	alarms := tpl.ofType("AWS::CloudWatch::Alarm")

	t.Run("every mesh metric alarm watches its own stack's series", func(t *testing.T) {
		if fmt.Sprint(envVars(globalFn)["MESH_STACK_NAME"]) != fmt.Sprint(map[string]any{"Ref": "AWS::StackName"}) {
			t.Errorf("Globals do not set MESH_STACK_NAME to the stack name: %v", envVars(globalFn)["MESH_STACK_NAME"])
		}
		n := 0
		for _, a := range alarms {
			p := tpl.props(a)
			if p["Namespace"] != "AgentMesh" {
				continue
			}
			n++
			if !strings.Contains(fmt.Sprint(p["Dimensions"]), "Name:Stack Value:map[Ref:AWS::StackName]") {
				t.Errorf("%s has dimensions %v, want Stack = the stack name", a, p["Dimensions"])
			}
		}
		if n < 4 {
			t.Errorf("%d alarms on AgentMesh metrics, want at least 4", n)
		}
	})

	t.Run("a dispatcher that stops running raises an alarm", func(t *testing.T) {
		for _, a := range alarms {
			p := tpl.props(a)
			if p["Namespace"] == "AgentMesh" && p["MetricName"] == "OutboxSent" && p["TreatMissingData"] == "breaching" &&
				p["Statistic"] == "SampleCount" && p["ComparisonOperator"] == "LessThanThreshold" {
				return
			}
		}
		t.Fatal("no alarm on the dispatcher's per-run metric (OutboxSent) with missing data breaching")
	})

	t.Run("errors and throttles of every scheduled function raise an alarm", func(t *testing.T) {
		watched := map[string]bool{}
		for _, a := range alarms {
			ms, _ := tpl.props(a)["Metrics"].([]any)
			for _, m := range ms {
				stat, _ := m.(map[string]any)["MetricStat"].(map[string]any)
				metric, _ := stat["Metric"].(map[string]any)
				if metric["Namespace"] != "AWS/Lambda" {
					continue
				}
				dims, _ := metric["Dimensions"].([]any)
				for _, d := range dims {
					ref, _ := d.(map[string]any)["Value"].(map[string]any)["Ref"].(string)
					watched[ref+" "+fmt.Sprint(metric["MetricName"])] = true
				}
			}
		}
		for _, fn := range tpl.ofType("AWS::Serverless::Function") {
			if !strings.Contains(fmt.Sprint(tpl.props(fn)["Events"]), "Type:Schedule") {
				continue
			}
			for _, m := range []string{"Errors", "Throttles"} {
				if !watched[fn+" "+m] {
					t.Errorf("no alarm watches %s of %s", m, fn)
				}
			}
		}
	})

	t.Run("API 5xx raise an alarm", func(t *testing.T) {
		for _, a := range alarms {
			p := tpl.props(a)
			if p["Namespace"] == "AWS/ApiGateway" && p["MetricName"] == "5xx" {
				return
			}
		}
		t.Fatal("no alarm on the HTTP API's 5xx")
	})

	t.Run("every log group has a retention and every function logs to one", func(t *testing.T) {
		groups := tpl.ofType("AWS::Logs::LogGroup")
		for _, g := range groups {
			if tpl.props(g)["RetentionInDays"] == nil {
				t.Errorf("log group %s keeps logs forever", g)
			}
		}
		lc, _ := globalFn["LoggingConfig"].(map[string]any)
		ref, _ := lc["LogGroup"].(map[string]any)["Ref"].(string)
		if !contains(groups, ref) {
			t.Errorf("Globals.Function.LoggingConfig.LogGroup is %v, not a log group of the template", lc["LogGroup"])
		}
		for _, fn := range tpl.ofType("AWS::Serverless::Function") {
			if tpl.props(fn)["LoggingConfig"] != nil {
				t.Errorf("%s overrides the shared log group", fn)
			}
		}
	})

	t.Run("the HTTP API writes access logs and functions are traced", func(t *testing.T) {
		for _, api := range tpl.ofType("AWS::Serverless::HttpApi") {
			als, _ := tpl.props(api)["AccessLogSettings"].(map[string]any)
			if als == nil { // or for every HTTP API, in Globals
				globalAPI, _ := globals["HttpApi"].(map[string]any)
				als, _ = globalAPI["AccessLogSettings"].(map[string]any)
			}
			if als["DestinationArn"] == nil || als["Format"] == nil {
				t.Errorf("%s has no access logs", api)
			}
		}
		if globalFn["Tracing"] != "Active" {
			t.Errorf("Globals.Function.Tracing is %v, want Active (X-Ray)", globalFn["Tracing"])
		}
		if len(tpl.ofType("AWS::CloudWatch::Dashboard")) != 1 {
			t.Error("no CloudWatch dashboard")
		}
	})
}

// checkov's reserved-concurrency finding is skipped for every function
// (template.yaml's header says why): the scheduled functions and the
// migration must still reserve theirs.
func TestScheduledAndDeployTimeFunctionsReserveConcurrency(t *testing.T) {
	tpl := loadTemplate(t, "template.yaml")
	n := 0
	for _, fn := range tpl.ofType("AWS::Serverless::Function") {
		p := tpl.props(fn)
		if !strings.Contains(fmt.Sprint(p["Events"]), "Type:Schedule") && fn != "MigrateFunction" {
			continue
		}
		n++
		if p["ReservedConcurrentExecutions"] == nil {
			t.Errorf("%s runs on a schedule or at deploy time without reserved concurrency", fn)
		}
	}
	if n < 5 {
		t.Fatalf("found %d scheduled or deploy-time functions, want at least 5", n)
	}
}
