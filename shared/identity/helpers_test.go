package identity

import "github.com/agentmesh/agentmesh/shared/config"

// testJWTKeys are identitytest.JWTKeys, which this internal test package
// cannot import (identitytest imports identity): TestVerifyToken signs
// with them directly. Every test needing a Service is external and uses
// identitytest.
var testJWTKeys = []config.JWTKey{
	{ID: "k2026a", Secret: []byte("0123456789abcdef0123456789abcdef-first")},
	{ID: "k2025z", Secret: []byte("fedcba9876543210fedcba9876543210-second")},
}
