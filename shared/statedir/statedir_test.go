package statedir_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/statedir"
)

// modeOf is path's permission bits.
func modeOf(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// onlyFiles lists dir's entries, so a test can tell a temp file was left.
func onlyFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Unix permission bits")
	}
	cases := []struct {
		name   string
		before func(t *testing.T, path string) // what the directory held
		perm   os.FileMode
	}{
		{"a new file gets exactly the asked mode", func(t *testing.T, path string) {}, 0o600},
		{"a world-readable file already there does not lend the new secret its mode", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o644); err != nil { // past the umask
				t.Fatal(err)
			}
		}, 0o600},
		{"a world-readable leftover temp file of the old fixed name changes nothing", func(t *testing.T, path string) {
			if err := os.WriteFile(path+".tmp", []byte("leftover"), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path+".tmp", 0o666); err != nil {
				t.Fatal(err)
			}
		}, 0o600},
		{"a wider mode asked for is given whatever the umask", func(t *testing.T, path string) {}, 0o644},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "secret.json")
			tc.before(t, path)
			before := onlyFiles(t, dir)
			if err := statedir.WriteFile(path, []byte("new secret"), tc.perm); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(path); string(got) != "new secret" {
				t.Errorf("content %q, want the new secret", got)
			}
			if m := modeOf(t, path); m != tc.perm {
				t.Errorf("mode %o, want %o", m, tc.perm)
			}
			after := onlyFiles(t, dir)
			for _, n := range after {
				if strings.HasSuffix(n, ".tmp") && !strings.Contains(strings.Join(before, "\n"), n) {
					t.Errorf("a temp file was left behind: %s (dir %v)", n, after)
				}
			}
		})
	}
}

func TestAFailedWriteLeavesTheOldFileAndNoTempFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := statedir.WriteFile(path, []byte("v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory in the way makes the final rename fail after the temp
	// file was written.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "child"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := statedir.WriteFile(blocked, []byte("v2"), 0o600); err == nil {
		t.Fatal("a write over a non-empty directory succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "v1" {
		t.Errorf("the other file changed: %q", got)
	}
	for _, n := range onlyFiles(t, dir) {
		if strings.HasSuffix(n, ".tmp") {
			t.Errorf("the failed write left %s behind", n)
		}
	}
}

func TestMake(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Unix permission bits")
	}
	t.Run("a missing directory and its parents are made owner-only", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "b")
		if err := statedir.Make(dir); err != nil {
			t.Fatal(err)
		}
		if m := modeOf(t, dir); m != 0o700 {
			t.Errorf("mode %o, want 700", m)
		}
	})
	t.Run("an existing directory keeps the mode its owner gave it", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := statedir.Make(dir); err != nil {
			t.Fatal(err)
		}
		if m := modeOf(t, dir); m != 0o750 {
			t.Errorf("mode %o, want 750 untouched", m)
		}
	})
	t.Run("a file in the way is an error naming the directory", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := statedir.Make(filepath.Join(file, "sub")); err == nil || !strings.Contains(err.Error(), file) {
			t.Errorf("err %v, want one naming %s", err, file)
		}
	})
}

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new", "bob.lock")
	unlock, err := statedir.Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a second holder is refused with ErrLocked", func(t *testing.T) {
		// flock locks belong to an open file, so a second open in the same
		// process contends like another process would.
		if u, err := statedir.Lock(path); !errors.Is(err, statedir.ErrLocked) {
			if u != nil {
				u()
			}
			t.Fatalf("second lock: %v, want ErrLocked", err)
		}
	})
	t.Run("LockWait waits until the holder unlocks", func(t *testing.T) {
		var released atomic.Bool
		got := make(chan error, 1)
		go func() {
			u, err := statedir.LockWait(path)
			if err == nil {
				if !released.Load() {
					err = errors.New("LockWait returned while the lock was held")
				}
				u()
			}
			got <- err
		}()
		released.Store(true)
		unlock()
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("LockWait did not get the lock within 30 s of its release")
		}
	})
	t.Run("the lock can be taken again once released", func(t *testing.T) {
		u, err := statedir.Lock(path)
		if err != nil {
			t.Fatal(err)
		}
		u()
	})
}

func TestPutMakesAPrivateDirectoryAndAPrivateFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("POSIX modes")
	}
	dir := filepath.Join(t.TempDir(), "state", "dead-letters")
	if err := statedir.Put(dir, "7.json", []byte(`{"seq":7}`)); err != nil {
		t.Fatal(err)
	}
	if m := modeOf(t, dir); m != 0o700 {
		t.Errorf("the new directory is %v, want 0700", m)
	}
	if m := modeOf(t, filepath.Join(dir, "7.json")); m != 0o600 {
		t.Errorf("the file is %v, want 0600", m)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "7.json")); err != nil || string(b) != `{"seq":7}` {
		t.Fatalf("read back %q, %v", b, err)
	}
}
