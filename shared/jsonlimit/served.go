package jsonlimit

import (
	"encoding/json"
	"unicode/utf8"
)

// MaxServedDepth is the deepest stored body that is served as is, through
// Kafka (package dispatch), GET /v1/inbox (package outbox) and task reads
// (package tasks) alike. Every write route caps a request body at 40 levels
// and a data part's value at 32, so what the API writes stays well below it;
// a deeper stored body (written before the caps, or by a bug) becomes an
// undeliverable placeholder on every path, never a page or record that a
// reader's decoder rejects.
const MaxServedDepth = 64

// Reasons a stored body cannot be served (mesh.UndeliverableBody.Code).
const (
	// Unencodable: the stored body is not valid JSON or not valid UTF-8.
	Unencodable = "unencodable"
	// TooDeep: the stored body nests deeper than MaxServedDepth.
	TooDeep = "too_deep"
)

// Unservable returns why a stored body cannot be served as is (Unencodable
// or TooDeep), or "" when it can. It is the one rule for every path that
// serves stored content, so an event never reaches a handler whole one way
// and as a placeholder the other.
func Unservable(body []byte) string {
	switch {
	case Exceeds(body, MaxServedDepth): // first: cheap, and json.Valid fails past 10,000 levels
		return TooDeep
	case !utf8.Valid(body) || !json.Valid(body):
		return Unencodable
	}
	return ""
}
