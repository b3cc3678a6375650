// Package testenv decides what a test does when a real service it needs is
// missing: under CI (CI set) it fails, so a green CI always means the real
// services were exercised; elsewhere it skips with the command to start them.
package testenv

import (
	"os"
	"testing"
)

// InCI reports whether the tests run under CI.
func InCI() bool { return os.Getenv("CI") != "" }

// Missing stops the test because a service is unreachable.
func Missing(t testing.TB, service string, err error) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s is required under CI but unreachable: %v (start it with: infra/services.sh up)", service, err)
	}
	t.Skipf("%s unreachable (%v); start it with: infra/services.sh up", service, err)
}
