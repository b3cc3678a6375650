package meshd

// PushFallbackAfter is pushFallbackAfter for the black-box tests.
const PushFallbackAfter = pushFallbackAfter
