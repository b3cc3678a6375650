// Package textlimit cuts text to a byte budget without splitting a UTF-8
// character: a string cut mid-character is refused by a utf8mb4 column under
// strict sql_mode, and shows as garbage anywhere else.
package textlimit

import "unicode/utf8"

// Truncate returns the longest prefix of s that is at most n bytes long and
// does not end inside a UTF-8 sequence. A valid s gives a valid prefix.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
