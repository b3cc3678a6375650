package meshd

import (
	"os"
	"syscall"
)

// datasync flushes f's data without its timestamps: the state file is
// preallocated, so nothing else a reload needs has changed.
func datasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
