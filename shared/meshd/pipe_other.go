//go:build !linux

package meshd

import "os"

// handlerPipe is os.Pipe where pipe2 is not available.
func handlerPipe() (r, w *os.File, err error) { return os.Pipe() }
