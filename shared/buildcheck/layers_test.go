package buildcheck_test

import (
	"os/exec"
	"strings"
	"testing"
)

// domainPackages hold the mesh's rules. They return typed results and
// mesh.Errors; HTTP, Lambda wiring and the local emulator live in the
// adapters beside them and map errors once.
var domainPackages = []string{"identity", "tasks", "outbox", "accounts", "dispatch", "mesh", "seal", "push"}

// transportPackages are what a domain package must not import, directly or
// through another package: the HTTP adapter, the Lambda wiring, the web
// console and the local emulators.
var transportPackages = []string{
	module + "/shared/httpapi",
	module + "/shared/app",
	module + "/shared/console",
	module + "/shared/localstack",
	module + "/shared/apigwlocal",
	"github.com/aws/aws-lambda-go/",
}

func TestDomainPackagesDoNotImportTransport(t *testing.T) {
	root := moduleRoot(t)
	for _, pkg := range domainPackages {
		t.Run("shared/"+pkg+" imports no HTTP or wiring package", func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./shared/"+pkg)
			cmd.Dir = root
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list ./shared/%s: %v", pkg, err)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, bad := range transportPackages {
					if dep == bad || strings.HasPrefix(dep, bad+"/") || (strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad)) {
						t.Errorf("shared/%s links %s: move the code that needs it into the package's adapter", pkg, dep)
					}
				}
			}
		})
	}
}
