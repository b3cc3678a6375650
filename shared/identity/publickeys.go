package identity

import (
	"github.com/agentmesh/agentmesh/shared/config"
)

// FormatPublicKeys returns the public halves of keys in MESH_JWT_PUBLIC_KEYS
// form: what the token function publishes (Custom::JwtPublicKeys) to every
// function that verifies agent tokens, so only it ever reads the private
// keys. Without keys it fails, as signing would.
func FormatPublicKeys(keys []config.JWTKey) (string, error) {
	if len(keys) == 0 {
		return "", errNoSigningKey
	}
	pub := make([]config.JWTPublicKey, len(keys))
	for i, k := range keys {
		pub[i] = k.Public()
	}
	return config.FormatJWTPublicKeys(pub), nil
}
