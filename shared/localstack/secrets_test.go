package localstack

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestStoredSecretsAreOwnerOnlyWhateverWasThereBefore(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Unix permission bits")
	}
	// A stored admin key and nothing else: the other keys are generated and
	// the file written again.
	const partial = `{"admin_key":"amadm_stored"}`
	cases := []struct {
		name   string
		before func(t *testing.T, path string)
	}{
		{"a world-readable leftover temp file of an earlier write", func(t *testing.T, path string) {
			writeOpenFile(t, path, partial)
			if err := os.Chmod(path, 0o600); err != nil {
				t.Fatal(err)
			}
			writeOpenFile(t, path+".tmp", "{}")
		}},
		{"a world-readable secrets file", func(t *testing.T, path string) {
			writeOpenFile(t, path, partial)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name+" does not make the new keys readable by others", func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "secrets.json")
			tc.before(t, path)
			s, err := LoadSecrets(path, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			if s.AdminKey != "amadm_stored" || s.JWTKeys == "" || s.InboxMasterKey == "" {
				t.Fatalf("secrets %+v: want the stored admin key and generated others", s)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("secrets file mode %o, want 600", fi.Mode().Perm())
			}
			var stored Secrets
			data, _ := os.ReadFile(path)
			if err := json.Unmarshal(data, &stored); err != nil || stored.InboxMasterKey != s.InboxMasterKey || stored.JWTKeys != s.JWTKeys {
				t.Errorf("stored %s (%v), want the generated keys", data, err)
			}
		})
	}
}

// writeOpenFile writes content to path readable and writable by anyone,
// whatever the umask.
func writeOpenFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
}
