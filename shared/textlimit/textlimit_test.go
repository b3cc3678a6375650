package textlimit

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"a text within the limit is kept whole", "héllo", 6, "héllo"},
		{"an ASCII text is cut at the limit", "hello", 3, "hel"},
		{"a two-byte character straddling the limit is dropped whole", "aé", 2, "a"},
		{"a three-byte character straddling the limit is dropped whole", "a☃", 3, "a"},
		{"a four-byte character straddling the limit is dropped whole", "ab😀", 4, "ab"},
		{"a character ending at the limit is kept", "a☃b", 4, "a☃"},
		{"a limit of zero gives the empty text", "abc", 0, ""},
		{"a negative limit gives the empty text", "abc", -1, ""},
		{"a long error cut at 500 bytes ends before a split character", strings.Repeat("x", 499) + "é" + "tail", 500, strings.Repeat("x", 499)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Truncate(c.in, c.n)
			if got != c.want {
				t.Fatalf("Truncate(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("Truncate(%q, %d) = %q is not valid UTF-8", c.in, c.n, got)
			}
		})
	}
}
