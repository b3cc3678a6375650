package meshd

import "syscall"

// prSetDumpable is PR_SET_DUMPABLE of <linux/prctl.h>.
const prSetDumpable = 4

// HideProcess keeps processes of the same user, the handler above all, out
// of this process's /proc entries: on Linux a handler could otherwise read
// the API key from /proc/<meshd's pid>/environ (or its memory) although its
// own environment holds none. It makes the process non-dumpable (no core
// dumps, no ptrace by the same user); the handler, started with exec, is
// dumpable again. Call it once, early, in a daemon; not in a library's
// caller that wants to be debugged.
func HideProcess() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return errno
	}
	return nil
}
