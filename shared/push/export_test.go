package push

// SetAfterAuth makes Connect run fn between the token check and its
// transaction, where a racing revocation lands.
func (s *Service) SetAfterAuth(fn func()) { s.afterAuth = fn }
