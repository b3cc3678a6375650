package localstack

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/statedir"
)

// Secrets are the local mesh's keys. Generated ones are kept in a 0600 file
// under the repo's ignored .local/ directory, so a restart keeps issued
// tokens valid and messages sealed under the same inbox master key readable.
type Secrets struct {
	AdminKey       string `json:"admin_key"`
	JWTKeys        string `json:"jwt_keys"`
	InboxMasterKey string `json:"inbox_master_key"`
	// Generated names the variables whose values meshlocal made (not from the
	// environment); not stored.
	Generated []string `json:"-"`
}

// LoadSecrets returns the secrets from the environment, falling back to the
// file at path and generating (and storing) whatever is still missing.
func LoadSecrets(path string, getenv func(string) string) (Secrets, error) {
	var stored Secrets
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &stored); err != nil {
			return Secrets{}, fmt.Errorf("%s is not valid JSON (delete it to generate new local keys): %v", path, err)
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return Secrets{}, err
	}
	s := Secrets{
		AdminKey:       getenv("MESH_ADMIN_KEY"),
		JWTKeys:        getenv("MESH_JWT_KEYS"),
		InboxMasterKey: getenv("MESH_INBOX_MASTER_KEY"),
	}
	dirty := false
	pick := func(env *string, stored, name string, gen func() string) {
		if *env != "" {
			return
		}
		if stored != "" {
			*env = stored
			return
		}
		*env = gen()
		s.Generated = append(s.Generated, name)
		dirty = true
	}
	pick(&s.AdminKey, stored.AdminKey, "MESH_ADMIN_KEY", func() string { return "amadm_" + randomB64URL(32) })
	pick(&s.JWTKeys, stored.JWTKeys, "MESH_JWT_KEYS", func() string {
		return config.FormatJWTKeys([]config.JWTKey{{ID: "local-" + randomB64URL(4), Secret: randomBytes(32)}})
	})
	pick(&s.InboxMasterKey, stored.InboxMasterKey, "MESH_INBOX_MASTER_KEY", func() string {
		return base64.StdEncoding.EncodeToString(randomBytes(32))
	})
	if dirty {
		// Keep stored values for the variables the environment overrode this
		// time, so unsetting them later brings the old keys back.
		out := s
		if stored.AdminKey != "" && getenv("MESH_ADMIN_KEY") != "" {
			out.AdminKey = stored.AdminKey
		}
		if stored.JWTKeys != "" && getenv("MESH_JWT_KEYS") != "" {
			out.JWTKeys = stored.JWTKeys
		}
		if stored.InboxMasterKey != "" && getenv("MESH_INBOX_MASTER_KEY") != "" {
			out.InboxMasterKey = stored.InboxMasterKey
		}
		if err := writeSecrets(path, out); err != nil {
			return Secrets{}, err
		}
	}
	return s, nil
}

// writeSecrets stores s atomically, owner-only from the first byte: neither a
// leftover temp file nor an older, wider file can lend the keys its mode.
func writeSecrets(path string, s Secrets) error {
	if err := statedir.Make(filepath.Dir(path)); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return statedir.WriteFile(path, append(b, '\n'), 0o600)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux; a guessable key must not be used
	}
	return b
}

func randomB64URL(n int) string { return base64.RawURLEncoding.EncodeToString(randomBytes(n)) }
