package meshd_test

import (
	"syscall"
	"testing"

	"github.com/agentmesh/agentmesh/shared/meshd"
)

// PR_GET_DUMPABLE and PR_SET_DUMPABLE of <linux/prctl.h>.
const prGetDumpable, prSetDumpable = 3, 4

func dumpable(t *testing.T) uintptr {
	t.Helper()
	v, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetDumpable, 0, 0)
	if errno != 0 {
		t.Fatal(errno)
	}
	return v
}

// A non-dumpable process's /proc/<pid>/environ and memory belong to root:
// a handler of the same user cannot read meshd's key there.
func TestHideProcessMakesThisProcessNonDumpable(t *testing.T) {
	if dumpable(t) != 1 {
		t.Skip("this test process is not dumpable to begin with")
	}
	t.Cleanup(func() { _, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 1, 0) })
	if err := meshd.HideProcess(); err != nil {
		t.Fatal(err)
	}
	if d := dumpable(t); d != 0 {
		t.Errorf("dumpable = %d after HideProcess, want 0", d)
	}
}
