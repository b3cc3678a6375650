package meshd

import (
	"os"
	"syscall"
)

// handlerPipe is the pipe an exec handler's stdin is written into before
// its start. Its ends are blocking descriptors the runtime's poller does
// not watch (os.Pipe registers both): nothing in meshd waits on them, and
// each registration costs the run wake-ups of the poller as the child reads.
// The write cannot block either: the data fits the empty pipe (stdinAhead).
func handlerPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}
