// Package mesh holds the domain types of Agent Mesh and its single error type.
//
// Every package returns *mesh.Error for anything a client may see; httpapi maps
// the Kind to an HTTP status in one place. Anything else is an internal error:
// logged, never shown.
package mesh

import (
	"errors"
	"fmt"
)

// Kind classifies an error; httpapi maps each Kind to one HTTP status.
type Kind int

// The kinds of errors a client can be told about.
const (
	KindInternal         Kind = iota // 500, details never leave the server
	KindInvalid                      // 400 malformed request
	KindUnauthorized                 // 401 missing or bad credentials
	KindForbidden                    // 403 authenticated but not allowed
	KindNotFound                     // 404
	KindConflict                     // 409 state conflict (idempotency, state machine)
	KindTooLarge                     // 413
	KindUnprocessable                // 422 well-formed but semantically wrong
	KindRateLimited                  // 429
	KindUnavailable                  // 503 a dependency is down; retry later
	KindUnsupportedMedia             // 415 a request body that is not application/json
)

// Error is the one error type that crosses package boundaries toward clients.
// Code is stable and documented (clients switch on it); Message is for humans.
type Error struct {
	Kind    Kind
	Code    string
	Message string
	// RetryAfter, in whole seconds, is sent as a Retry-After header when > 0.
	RetryAfter int
	// Err is the internal cause, logged but never shown.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds a client-visible error.
func Errorf(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Internal wraps an unexpected failure; the client sees only "internal".
func Internal(err error) *Error {
	return &Error{Kind: KindInternal, Code: "internal", Message: "internal error", Err: err}
}

// AsError returns the *Error inside err, or an internal one wrapping err.
func AsError(err error) *Error {
	var me *Error
	if errors.As(err, &me) {
		return me
	}
	return Internal(err)
}

// IsKind reports whether err is a *mesh.Error of the given kind.
func IsKind(err error, kind Kind) bool {
	var me *Error
	return errors.As(err, &me) && me.Kind == kind
}

// Common errors with their stable codes.
var (
	ErrUnauthorized = &Error{Kind: KindUnauthorized, Code: "unauthorized", Message: "missing or invalid credentials"}
	ErrForbidden    = &Error{Kind: KindForbidden, Code: "forbidden", Message: "not allowed"}
	ErrNotReachable = &Error{Kind: KindForbidden, Code: "not_reachable", Message: "you may only talk to friends and group mates"}
)
