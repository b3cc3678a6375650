//go:build !linux

package meshd

import "os"

// datasync is a full fsync where fdatasync is not offered.
func datasync(f *os.File) error { return f.Sync() }
