package deploy_test

import (
	"context"
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/localstack"
	"github.com/agentmesh/agentmesh/shared/samlocal"
)

// SAM passes a function only the variables the template declares for it:
// a variable read but declared nowhere cannot be set under `sam local`,
// whatever --env-vars says (MYSQL_DSN once was, and no SAM-run function
// found the database).
func TestEveryVariableAFunctionReadsIsDeclared(t *testing.T) {
	tpl := loadTemplate(t, "template.yaml")
	globalFn, _ := tpl.Globals["Function"].(map[string]any)
	globals := envVars(globalFn)
	fns := tpl.ofType("AWS::Serverless::Function")
	declaredBy := func(name string) []string {
		var out []string
		for _, fn := range fns {
			if _, ok := envVars(tpl.props(fn))[name]; ok {
				out = append(out, fn)
			}
		}
		return out
	}

	// What the functions read locally: every lookup of config.LoadAWS
	// without any *_SECRET_ARN (the local path), plus the os.Getenv of
	// shared/metrics.
	read := map[string]bool{"MESH_STACK_NAME": true}
	if _, err := config.LoadAWS(context.Background(), func(k string) string { read[k] = true; return "" }); err != nil {
		t.Fatalf("config.LoadAWS with an empty environment: %v", err)
	}
	if !read["MYSQL_DSN"] || !read["KAFKA_BROKERS"] {
		t.Fatalf("config.LoadAWS read %v: the recording missed the configuration", slices.Sorted(maps.Keys(read)))
	}

	// Set on AWS only where used, to a reference each of those functions
	// needs (a secret's ARN, a URL of this stack): declared by some function.
	perFunction := []string{
		"MESH_JWT_PUBLIC_KEYS", "MESH_PUSH_URL", "MESH_PUSH_ENDPOINT", "MESH_PUSH_RELAY_FUNCTION",
		"MESH_A2A_URL", "MESH_PUBLIC_API_URL", "KAFKA_PUBLIC_BROKERS",
		"MESH_ADMIN_KEY_SECRET_ARN", "MESH_JWT_KEYS_SECRET_ARN", "MESH_INBOX_MASTER_KEY_SECRET_ARN",
		// The database secrets: the migration's only (every other function
		// connects with IAM as MESH_DB_USER).
		"MESH_DB_SECRET_ARN", "MESH_DB_APP_SECRET_ARN",
	}
	// A secret: its plain value (what local runs give) beside its ARN.
	secrets := []string{"MESH_ADMIN_KEY", "MESH_JWT_KEYS", "MESH_INBOX_MASTER_KEY"}

	for _, name := range slices.Sorted(maps.Keys(read)) {
		t.Run(name+" is declared where it is read", func(t *testing.T) {
			switch {
			case slices.Contains(secrets, name):
				withArn := declaredBy(name + "_SECRET_ARN")
				if len(withArn) == 0 {
					t.Fatalf("no function declares %s_SECRET_ARN: the template was not read", name)
				}
				for _, fn := range withArn {
					if _, ok := envVars(tpl.props(fn))[name]; !ok {
						t.Errorf("%s reads %s (given %s_SECRET_ARN on AWS) but does not declare it: a local run cannot give it the key", fn, name, name)
					}
				}
			case slices.Contains(perFunction, name):
				if len(declaredBy(name)) == 0 {
					t.Errorf("no function declares %s, which the functions read", name)
				}
			default:
				if _, ok := globals[name]; !ok {
					t.Errorf("every function reads %s, but the template's Globals do not declare it: under SAM no function can be given it", name)
				}
			}
		})
	}

	t.Run("the env-vars file of local runs names only declared variables", func(t *testing.T) {
		vars, err := samlocal.Vars(localstack.Secrets{JWTKeys: config.FormatJWTKeys([]config.JWTKey{{ID: "k", Secret: make([]byte, 32)}})}, "dsn", "")
		if err != nil {
			t.Fatal(err)
		}
		for name := range vars {
			if _, ok := globals[name]; !ok && len(declaredBy(name)) == 0 {
				t.Errorf("the env-vars file sets %s, which no function declares: SAM would drop it", name)
			}
		}
	})
}

// The Makefile's build-<LogicalId> rule builds for the architecture SAM
// builds the function for: SAM tells make only ARTIFACTS_DIR, so the rule
// reads the function's architecture from the build graph SAM writes beside
// its build directory (build.toml). A binary of the wrong architecture would
// fail only when invoked.
func TestTheBuildRuleHonoursTheArchitectureSAMBuildsFor(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is required to build the functions: %v", err)
	}
	tests := []struct {
		name  string
		graph string // build.toml's architecture for the function; "" = no build.toml
		env   []string
		want  elf.Machine
	}{
		{"a function SAM builds for x86_64 is an x86-64 binary", "x86_64", nil, elf.EM_X86_64},
		{"a function SAM builds for arm64 is an arm64 binary", "arm64", nil, elf.EM_AARCH64},
		{"without a build graph the deploy default arm64 is built", "", nil, elf.EM_AARCH64},
		{"without a build graph LAMBDA_ARCH chooses", "", []string{"LAMBDA_ARCH=x86_64"}, elf.EM_X86_64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			build := filepath.Join(top, "build")
			if err := os.MkdirAll(build, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.graph != "" {
				// The shape SAM writes: one definition per function, the
				// architecture before the functions it builds.
				graph := fmt.Sprintf(`# This file is auto generated by SAM CLI build command

[function_build_definitions.a1]
codeuri = %q
runtime = "provided.al2023"
architecture = "arm64"
handler = "bootstrap"
functions = ["MigrateFunction"]

[function_build_definitions.a1.metadata]
BuildMethod = "makefile"

[function_build_definitions.b2]
codeuri = %q
runtime = "provided.al2023"
architecture = %q
handler = "bootstrap"
functions = ["HealthFunction"]

[function_build_definitions.b2.metadata]
BuildMethod = "makefile"
`, root, root, tc.graph)
				if err := os.WriteFile(filepath.Join(top, "build.toml"), []byte(graph), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// The rule's first step compiles every function's libraries
			// once per build; stamped done here, it builds only this one.
			for _, a := range []string{"amd64", "arm64"} {
				if err := os.WriteFile(filepath.Join(build, ".go-warm."+a), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			art := filepath.Join(build, "HealthFunction")
			cmd := exec.Command("make", "-s", "build-HealthFunction", "ARTIFACTS_DIR="+art)
			cmd.Dir = root
			cmd.Env = append(withoutVars(os.Environ(), "LAMBDA_ARCH", "GOARCH", "GOOS", "ARTIFACTS_DIR"), tc.env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("make build-HealthFunction: %v\n%s", err, out)
			}
			f, err := elf.Open(filepath.Join(art, "bootstrap"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Machine != tc.want {
				t.Errorf("built for %v, want %v", f.Machine, tc.want)
			}
		})
	}
}

func withoutVars(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, k) {
			out = append(out, kv)
		}
	}
	return out
}
