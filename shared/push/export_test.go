package push

// SetAfterAuth makes Connect run fn between the token check and its
// transaction, where a racing revocation lands.
func (s *Service) SetAfterAuth(fn func()) { s.afterAuth = fn }

// SetBeforeDelete makes every deleting transaction run fn before its
// statement; an error fn returns is the statement's.
func (s *Service) SetBeforeDelete(fn func() error) { s.beforeDelete = fn }
