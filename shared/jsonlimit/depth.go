// Package jsondepth measures how deeply a JSON text nests, in one pass over
// its bytes and without decoding it, so a hostile body is refused before a
// decoder (whose own limit is 10,000 levels) or a later re-encoding of it
// ever runs.
//
// Depth counts open objects and arrays: a scalar is depth 0, {} and [] are
// depth 1, {"a":[1]} is depth 2.
package jsonlimit

import "math"

// Exceeds reports whether b nests deeper than limit. It stops at the first
// byte past the limit, so its cost is bounded by the bytes up to that point.
// It does not validate b: brackets inside strings are skipped, anything else
// is left to the decoder.
func Exceeds(b []byte, limit int) bool { return scan(b, limit) > limit }

// Depth returns the deepest nesting of b (see the package comment).
func Depth(b []byte) int { return scan(b, math.MaxInt-1) }

// scan returns the deepest nesting of b, stopping once it passes limit.
func scan(b []byte, limit int) int {
	depth, deepest := 0, 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > deepest {
				if deepest = depth; deepest > limit {
					return deepest
				}
			}
		case '}', ']':
			depth--
		}
	}
	return deepest
}
