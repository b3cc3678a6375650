// Package statedir keeps a process's files on local disk safely: secrets and
// state written atomically with their mode from the first byte, and an
// exclusive lock that the OS drops when the process dies. meshd, its MCP
// server and the local stack use it for every file that holds a key or a
// position.
package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/gofrs/flock"
)

// WriteFile replaces path with data so that a reader sees either the old file
// or the whole new one, never a mix, and so that the new content survives a
// crash once WriteFile returns. The temporary file gets a random name in the
// same directory (a leftover from a crash never collides) and is created with
// perm, so a secret is never readable by others, not even for an instant, and
// a file that existed before with a wider mode does not lend it its mode.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600; set the asked mode before any byte is
	// written (umask does not apply to Chmod, which is the point: the caller
	// says exactly who may read it).
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// Put writes a private file (0600) named name into dir through WriteFile,
// first making dir (0700) when it is missing: how meshd and its MCP server
// keep their state, run info, cursors and dead letters.
func Put(dir, name string, data []byte) error {
	if err := Make(dir); err != nil {
		return err
	}
	if err := WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// SyncDir makes a rename or create in dir durable. Systems that cannot open
// or sync a directory (Windows) return nil: there the rename is as durable
// as the platform makes it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		if runtime.GOOS == "windows" {
			return nil
		}
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) && !errors.Is(err, os.ErrPermission) {
		return err
	}
	return nil
}

// Make creates dir (and its parents) readable by its owner only when it does
// not exist yet. An existing directory keeps its mode: it is the owner's.
func Make(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir %s: %w", dir, err)
	}
	return nil
}

// ErrLocked is returned by Lock when another process holds the lock.
var ErrLocked = errors.New("statedir: locked by another process")

// Lock takes an exclusive lock on path (created 0600 if missing) without
// waiting. It returns ErrLocked when another process holds it. The OS drops
// the lock if the process dies; unlock releases it earlier.
func Lock(path string) (unlock func(), err error) {
	if err := Make(filepath.Dir(path)); err != nil {
		return nil, err
	}
	l := flock.New(path, flock.SetPermissions(0o600))
	ok, err := l.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !ok {
		return nil, ErrLocked
	}
	return func() { _ = l.Unlock() }, nil
}

// LockWait takes the same exclusive lock as Lock on path, waiting as long as
// another process holds it. It suits locks held only for a short
// read-modify-write (the MCP cursor), where waiting beats failing.
func LockWait(path string) (unlock func(), err error) {
	if err := Make(filepath.Dir(path)); err != nil {
		return nil, err
	}
	l := flock.New(path, flock.SetPermissions(0o600))
	if err := l.Lock(); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = l.Unlock() }, nil
}
