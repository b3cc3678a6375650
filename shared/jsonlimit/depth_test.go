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

func TestStrictFindsRepeatedKeysAtEveryDepth(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		dup  bool
		key  string
	}{
		{"a top-level key given twice is found", `{"to":"nobody","to":"bob"}`, true, "to"},
		{"an escaped spelling of the same key is found", `{"to":"nobody","\u0074o":"bob"}`, true, "to"},
		{"a repeat three objects down is found", `{"parts":[{"kind":"data","data":{"x":{"k":1,"k":2}}}]}`, true, "k"},
		{"a repeat after a nested value is found", `{"a":{"b":1},"c":[1,"a"],"a":2}`, true, "a"},
		{"a repeat among many keys is found", `{"a":1,"b":2,"c":3,"d":4,"b":5}`, true, "b"},
		{"an empty key given twice is found", `{"":1,"":2}`, true, ""},
		{"equal keys in sibling objects are fine", `[{"a":1},{"a":2}]`, false, ""},
		{"a key equal to a value is fine", `{"a":"b","b":"a"}`, false, ""},
		{"keys differing in case are distinct", `{"data":{"k":1,"K":2}}`, false, ""},
		{"a key inside a string is not a key", `{"a":"{\"a\":1,\"a\":2}"}`, false, ""},
		{"an escaped quote does not end a key", `{"a\"":1,"a":2}`, false, ""},
		{"a repeat in an inner object does not leak out", `{"a":{"b":1},"b":2}`, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Strict([]byte(c.in), 40)
			if got.Duplicate != c.dup || got.DuplicateKey != c.key {
				t.Errorf("Strict(%s) = duplicate %v %q, want %v %q", c.in, got.Duplicate, got.DuplicateKey, c.dup, c.key)
			}
		})
	}
	t.Run("the depth limit is checked in the same pass", func(t *testing.T) {
		if got := Strict([]byte(`{"a":`+nested(41)+`}`), 40); got.Depth <= 40 || got.Duplicate {
			t.Errorf("Strict of 42 levels = %+v, want a depth past 40 and no duplicate", got)
		}
		if got := Strict([]byte(nested(40)), 40); got.Depth != 40 {
			t.Errorf("Strict of 40 levels = %+v, want depth 40", got)
		}
	})
}

func TestUnservable(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		want string
	}{
		{"a plain object is served", `{"text":"hi"}`, ""},
		{"multi-byte characters are served", `{"text":"héllo ☃ 😀"}`, ""},
		{"a body at the served depth is served", nested(MaxServedDepth), ""},
		{"a body one level deeper is too deep", nested(MaxServedDepth + 1), TooDeep},
		{"a body past any decoder's limit is too deep, not unencodable", nested(20000), TooDeep},
		{"invalid UTF-8 inside a string is unencodable", "{\"text\":\"\xff\"}", Unencodable},
		{"a multi-byte character cut short is unencodable", "{\"text\":\"\xe2\x98\"}", Unencodable},
		{"a text that is not JSON is unencodable", `{"text":`, Unencodable},
		{"an empty text is unencodable", ``, Unencodable},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Unservable([]byte(c.in)); got != c.want {
				t.Errorf("Unservable(%.40q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}
