package jsonlimit

import (
	"encoding/json"
	"strings"
	"testing"
)

func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

func TestDepth(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		want int
	}{
		{"a scalar is depth 0", `"x"`, 0},
		{"an empty object is depth 1", `{}`, 1},
		{"an object holding an array is depth 2", `{"a":[1]}`, 2},
		{"brackets inside strings do not count", `{"a":"[[[{{{"}`, 1},
		{"an escaped quote does not end a string", `{"a":"\"[[["}`, 1},
		{"an escaped backslash before a quote ends the string", `["\\",[[1]]]`, 3},
		{"siblings do not add up", `[[1],[2],{"a":1}]`, 2},
		{"10,000 levels are counted exactly", nested(10000), 10000},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Depth([]byte(c.in)); got != c.want {
				t.Errorf("Depth(%.40s) = %d, want %d", c.in, got, c.want)
			}
			if Exceeds([]byte(c.in), c.want) {
				t.Errorf("Exceeds(%.40s, %d) = true, want false", c.in, c.want)
			}
			if c.want > 0 && !Exceeds([]byte(c.in), c.want-1) {
				t.Errorf("Exceeds(%.40s, %d) = false, want true", c.in, c.want-1)
			}
		})
	}
}

func TestWireSizeBoundsTheEscapedString(t *testing.T) {
	for _, in := range []string{`{}`, `{"a":"b"}`, `["\\","\"",""]`, `"<a>&amp;"`, "\"\x01\"", `"héllo ☃"`} {
		t.Run(in+" fits its wire size once escaped", func(t *testing.T) {
			esc, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			if got, enc := WireSize([]byte(in)), len(esc)-2; got < enc {
				t.Errorf("WireSize = %d, but the escaped string takes %d bytes", got, enc)
			}
		})
	}
}
