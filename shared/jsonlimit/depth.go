// Package jsonlimit measures a JSON text on its raw bytes, in one pass and
// without decoding it: how deeply it nests, and (for request bodies) whether
// an object repeats a key. A hostile body is refused before a decoder (whose
// own limit is 10,000 levels, and which lets the last of two equal keys win)
// or a later re-encoding of it ever runs.
//
// Depth counts open objects and arrays: a scalar is depth 0, {} and [] are
// depth 1, {"a":[1]} is depth 2.
package jsonlimit

import (
	"bytes"
	"encoding/json"
	"math"
	"unicode/utf8"
)

// Exceeds reports whether b nests deeper than limit. It stops at the first
// byte past the limit, so its cost is bounded by the bytes up to that point.
// It does not validate b: brackets inside strings are skipped, anything else
// is left to the decoder.
func Exceeds(b []byte, limit int) bool { return scan(b, limit, false).Depth > limit }

// Depth returns the deepest nesting of b (see the package comment).
func Depth(b []byte) int { return scan(b, math.MaxInt-1, false).Depth }

// Check is the verdict of Strict on one text.
type Check struct {
	// Depth is the deepest nesting seen, up to the first level past the
	// limit (where the scan stops).
	Depth int
	// DuplicateKey is the first key found twice in one object (decoded, so
	// "to" and "\u0074o" are the same key), or "" when no object repeats
	// one. Duplicate reports whether one was found (the key may be "").
	DuplicateKey string
	Duplicate    bool
}

// Strict scans b once for both of a request body's structural limits: it
// stops at the first level past limit or at the first object key that
// repeats in its object, whichever comes first. Like Exceeds it does not
// validate b; a text it passes is still decoded strictly.
func Strict(b []byte, limit int) Check { return scan(b, limit, true) }

// frame is one open object or array of the scan.
type frame struct {
	object  bool
	wantKey bool                // the next string in this object is a key
	keys    map[string]struct{} // made on the object's second key
	first   []byte              // the object's first key, raw
}

// scan walks b once. With keys set it tracks each open object's keys.
func scan(b []byte, limit int, keys bool) Check {
	var c Check
	depth := 0
	var stack []frame
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			start := i
			escaped := false
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					escaped = true
					i++ // the escaped byte cannot end the string
				}
			}
			if !keys || len(stack) == 0 {
				continue
			}
			top := &stack[len(stack)-1]
			if !top.object || !top.wantKey {
				continue
			}
			top.wantKey = false
			raw := b[start:min(i+1, len(b))]
			if dup, key := top.add(raw, escaped); dup {
				c.Duplicate, c.DuplicateKey = true, key
				return c
			}
		case '{', '[':
			depth++
			if depth > c.Depth {
				if c.Depth = depth; c.Depth > limit {
					return c
				}
			}
			if keys {
				stack = append(stack, frame{object: b[i] == '{', wantKey: b[i] == '{'})
			}
		case '}', ']':
			depth--
			if keys && len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',':
			if keys && len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].wantKey = true
			}
		}
	}
	return c
}

// add records the raw key (with its quotes) of an object and reports
// whether the object already had it. Keys are compared as the decoder will
// see them: escapes resolved, invalid UTF-8 replaced.
func (f *frame) add(raw []byte, escaped bool) (bool, string) {
	if f.keys == nil && f.first == nil {
		f.first = raw // most objects hold one key or a few: no map yet
		return false, ""
	}
	if f.keys == nil {
		f.keys = make(map[string]struct{}, 4)
		f.keys[keyOf(f.first, bytes.IndexByte(f.first, '\\') >= 0)] = struct{}{}
	}
	k := keyOf(raw, escaped)
	if _, ok := f.keys[k]; ok {
		return true, k
	}
	f.keys[k] = struct{}{}
	return false, ""
}

// keyOf decodes a raw JSON string the way encoding/json does.
func keyOf(raw []byte, escaped bool) string {
	if !escaped && utf8.Valid(raw) && len(raw) >= 2 && raw[len(raw)-1] == '"' {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return string(raw) // malformed: the decoder refuses the body anyway
	}
	return s
}
