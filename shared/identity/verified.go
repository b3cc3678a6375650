package identity

import (
	"crypto/sha256"
	"sync"
	"time"
)

// maxVerifiedTokens bounds the tokens a Service remembers as verified: a
// function instance serves a handful of agents, a long-running process
// more; each entry is a few hundred bytes.
const maxVerifiedTokens = 4096

// verifiedTokens remembers the claims of tokens whose signature and claims
// verifyToken checked, so the requests an agent makes with the token it
// holds cost a hash and a lookup instead of an Ed25519 verification (a
// quarter of a send's CPU in Go). An entry answers only while its token is
// within its validity; the signing keys are the Service's configuration,
// fixed for its life. A token's key liveness is not a claim: it is checked
// in the database on every request, cached or not. The key is the token's
// SHA-256, so two tokens differing in any byte are two entries and a cached
// token cannot vouch for another.
type verifiedTokens struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]claims
}

// get returns the claims remembered for the token hashed to sum, if it is
// valid at now; an entry no longer valid is dropped, and the token is then
// verified (and refused) again.
func (v *verifiedTokens) get(sum [sha256.Size]byte, now time.Time) (claims, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.m[sum]
	if ok && !validAt(c, now) {
		delete(v.m, sum)
		return claims{}, false
	}
	return c, ok
}

// put remembers c, verified at now, for the token hashed to sum. When the
// table is full, the entries no longer valid go first, then an arbitrary
// one.
func (v *verifiedTokens) put(sum [sha256.Size]byte, c claims, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = make(map[[sha256.Size]byte]claims)
	}
	if len(v.m) >= maxVerifiedTokens {
		for k, old := range v.m {
			if !validAt(old, now) {
				delete(v.m, k)
			}
		}
		for k := range v.m {
			if len(v.m) < maxVerifiedTokens {
				break
			}
			delete(v.m, k)
		}
	}
	v.m[sum] = c
}

// validAt is jwt's time check of verified claims at now: before exp (which
// a verified token has) and not before nbf.
func validAt(c claims, now time.Time) bool {
	if c.ExpiresAt == nil || !now.Before(c.ExpiresAt.Time) {
		return false
	}
	return c.NotBefore == nil || !now.Before(c.NotBefore.Time)
}
