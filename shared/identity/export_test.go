package identity

// What the external tests (package identity_test, which may import
// identitytest) inspect directly.
const (
	APIKeyPrefix    = apiKeyPrefix
	APIKeyIDLen     = apiKeyIDLen
	ScanPresenceSQL = scanPresenceSQL
)
