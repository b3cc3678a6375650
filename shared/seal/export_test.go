package seal

// CachedKeys is how many derived keys s holds in its cache. For tests only.
func CachedKeys(s *Sealer) int { return s.keys.len() }
