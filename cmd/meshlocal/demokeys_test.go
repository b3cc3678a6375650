package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestDemoKeysAreStoredReadableByTheOwnerOnly(t *testing.T) {
	keys := map[string]string{"alice": "amk_a", "bob": "amk_b"}
	tests := []struct {
		name string
		// before is the mode of a file already there (0: none).
		before os.FileMode
	}{
		{"a new file is created 0600", 0},
		{"a world-readable file left by an older run becomes 0600", 0o644},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, demoKeysFile)
			if tt.before != 0 {
				if err := os.WriteFile(path, []byte(`{"alice":"old"}`), tt.before); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.before); err != nil {
					t.Fatal(err)
				}
			}
			if err := saveDemoKeys(dir, keys); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s mode %v, want 0600", demoKeysFile, fi.Mode().Perm())
			}
			if got := loadDemoKeys(dir); !reflect.DeepEqual(got, keys) {
				t.Errorf("loadDemoKeys = %v, want %v", got, keys)
			}
		})
	}
}
