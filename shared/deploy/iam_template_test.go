package deploy_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// dbSecrets are the template parameters naming database secrets: the
// master's and the application user's.
var dbSecrets = []string{"DBSecretArn", "DBAppSecretArn"}

// connectResource is the one rds-db:connect resource a role may hold: the
// application user on this stack's proxy.
const connectResource = "arn:${AWS::Partition}:rds-db:${AWS::Region}:${AWS::AccountId}:dbuser:${DBProxyResourceId}/${DBUser}"

// rdsConnects returns the resources of every rds-db:connect a function's
// managed policies grant.
func rdsConnects(tpl cfnTemplate, fn string) []string {
	var out []string
	pols, _ := tpl.props(fn)["Policies"].([]any)
	for _, p := range pols {
		ref, _ := p.(map[string]any)["Ref"].(string)
		doc, _ := tpl.props(ref)["PolicyDocument"].(map[string]any)
		stmts, _ := doc["Statement"].([]any)
		for _, st := range stmts {
			m, _ := st.(map[string]any)
			if strings.Contains(fmt.Sprint(m["Action"]), "rds-db:") {
				res, _ := m["Resource"].(map[string]any)
				out = append(out, fmt.Sprint(res["Fn::Sub"]))
			}
		}
	}
	return out
}

// dbSecretReaders lists the functions whose policies let them read a
// database secret.
func dbSecretReaders(t *testing.T, tpl cfnTemplate) []string {
	var out []string
	for _, fn := range tpl.ofType("AWS::Serverless::Function") {
		pol := policySecrets(t, tpl, fn)
		if slices.ContainsFunc(dbSecrets, func(s string) bool { return pol[s] }) {
			out = append(out, fn)
		}
	}
	return out
}

func TestOnlyTheMigrationHoldsADatabasePassword(t *testing.T) {
	tpl := loadTemplate(t, "template.yaml")
	globalFn, _ := tpl.Globals["Function"].(map[string]any)
	fns := tpl.ofType("AWS::Serverless::Function")
	if len(fns) < 30 {
		t.Fatalf("%d functions: the template was not read", len(fns))
	}
	// The functions without a database: the relay runs outside the VPC.
	noDatabase := map[string]bool{"PushRelayFunction": true}

	t.Run("no function but the migration can read a database secret", func(t *testing.T) {
		if got := dbSecretReaders(t, tpl); !slices.Equal(got, []string{"MigrateFunction"}) {
			t.Fatalf("functions that can read a database secret: %v, want only MigrateFunction", got)
		}
	})

	t.Run("the migration can read the master's secret and the application user's", func(t *testing.T) {
		pol := policySecrets(t, tpl, "MigrateFunction")
		env := envSecrets(t, tpl, globalFn, "MigrateFunction")
		for _, s := range dbSecrets {
			if !pol[s] || !env[s] {
				t.Errorf("MigrateFunction: may read %s %v, is told its ARN %v; want both", s, pol[s], env[s])
			}
		}
	})

	t.Run("the check fails when a role gets the master secret back", func(t *testing.T) {
		// A copy of the template where the health route's role reads the
		// master secret again, as every role once did.
		bad := cfnTemplate{Resources: maps.Clone(tpl.Resources)}
		health := maps.Clone(bad.Resources["HealthFunction"])
		props := maps.Clone(health["Properties"].(map[string]any))
		props["Policies"] = append(slices.Clone(props["Policies"].([]any)), map[string]any{"Ref": "DBSecretReadPolicy"})
		health["Properties"] = props
		bad.Resources["HealthFunction"] = health
		if got := dbSecretReaders(t, bad); !slices.Contains(got, "HealthFunction") {
			t.Fatalf("the check found %v and missed HealthFunction reading the master secret", got)
		}
	})

	t.Run("every function that uses the database connects with IAM as the application user on the proxy only", func(t *testing.T) {
		if fmt.Sprint(envVars(globalFn)["MESH_DB_USER"]) != fmt.Sprint(map[string]any{"Ref": "DBUser"}) {
			t.Fatalf("Globals give MESH_DB_USER %v, want !Ref DBUser", envVars(globalFn)["MESH_DB_USER"])
		}
		n := 0
		for _, fn := range fns {
			if fn == "MigrateFunction" || noDatabase[fn] {
				continue
			}
			n++
			if got := rdsConnects(tpl, fn); !slices.Equal(got, []string{connectResource}) {
				t.Errorf("%s may rds-db:connect to %v, want exactly %s", fn, got, connectResource)
			}
			if v, ok := envVars(tpl.props(fn))["MESH_DB_USER"]; ok {
				t.Errorf("%s sets its own MESH_DB_USER %v", fn, v)
			}
		}
		if n < 30 {
			t.Errorf("only %d functions connect: the template was not read", n)
		}
	})

	t.Run("the migration and the relay cannot connect with IAM", func(t *testing.T) {
		for _, fn := range []string{"MigrateFunction", "PushRelayFunction"} {
			if got := rdsConnects(tpl, fn); len(got) != 0 {
				t.Errorf("%s may rds-db:connect to %v", fn, got)
			}
			if v := envVars(tpl.props(fn))["MESH_DB_USER"]; v != "" {
				t.Errorf("%s keeps MESH_DB_USER %v from Globals, want it blanked", fn, v)
			}
		}
	})

	t.Run("no managed policy grants more of rds-db than connecting as the application user", func(t *testing.T) {
		for _, id := range tpl.ofType("AWS::IAM::ManagedPolicy") {
			doc, _ := tpl.props(id)["PolicyDocument"].(map[string]any)
			stmts, _ := doc["Statement"].([]any)
			for _, st := range stmts {
				m, _ := st.(map[string]any)
				if a := fmt.Sprint(m["Action"]); strings.Contains(a, "rds-db:") || strings.Contains(a, "rds:") || a == "*" {
					res, _ := m["Resource"].(map[string]any)
					if a != "rds-db:connect" || fmt.Sprint(res["Fn::Sub"]) != connectResource {
						t.Errorf("%s grants %s on %v", id, a, m["Resource"])
					}
				}
			}
		}
	})
}

func TestTheProxyRequiresIAMForTheApplicationUser(t *testing.T) {
	platform := loadTemplate(t, "infra/aws/platform.yaml")
	auth, _ := platform.props("DBProxy")["Auth"].([]any)
	schemes := map[string]string{} // secret -> IAMAuth
	for _, a := range auth {
		m, _ := a.(map[string]any)
		schemes[fmt.Sprint(m["SecretArn"])] = fmt.Sprint(m["IAMAuth"])
	}
	app := fmt.Sprint(map[string]any{"Ref": "AppDBUserSecret"})
	master := fmt.Sprint(map[string]any{"Fn::GetAtt": "DBCluster.MasterUserSecret.SecretArn"})
	tests := []struct {
		name, secret, want string
	}{
		{"the application user's clients must present an IAM token", app, "REQUIRED"},
		{"the master logs in with its password (the migration)", master, "DISABLED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := schemes[tc.secret]; got != tc.want {
				t.Fatalf("IAMAuth for %s is %q, want %s (proxy auth: %v)", tc.secret, got, tc.want, auth)
			}
		})
	}
	t.Run("the proxy knows no other user", func(t *testing.T) {
		if len(auth) != 2 {
			t.Fatalf("the proxy has %d users, want the application user and the master", len(auth))
		}
	})
	t.Run("the user the functions connect as is the one in the proxy's secret", func(t *testing.T) {
		out, _ := platform.Outputs["DBUser"].(map[string]any)
		gen, _ := platform.props("AppDBUserSecret")["GenerateSecretString"].(map[string]any)
		if want := fmt.Sprintf(`{"username":"%v"}`, out["Value"]); gen["SecretStringTemplate"] != want {
			t.Fatalf("AppDBUserSecret's template is %v, want %s (the DBUser output)", gen["SecretStringTemplate"], want)
		}
	})
}
