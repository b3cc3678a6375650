package mesh_test

import (
	"testing"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

func TestPrintableName(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want bool
	}{
		{"a plain name is printable", "Research bot", true},
		{"letters of any script and emoji are printable", "Ünïcödé 研究 🤖", true},
		{"an empty name is not", "", false},
		{"a NUL byte is not", "evil\x00name", false},
		{"a bell is not", "ding\a", false},
		{"an ANSI escape sequence is not", "\x1b[31mred", false},
		{"a newline is not", "two\nlines", false},
		{"DEL is not", "x\x7f", false},
		{"a C1 control is not", "x\u0085y", false},
		{"a right-to-left override is not", "abc\u202Etxt.exe", false},
		{"a bidi isolate is not", "x\u2066y", false},
		{"a right-to-left mark is not", "x\u200Fy", false},
		{"a line separator is not", "x\u2028y", false},
		{"a byte-order mark is not", "\uFEFFname", false},
		{"invalid UTF-8 is not", "bad\xff", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := mesh.PrintableName(tc.in); got != tc.want {
				t.Fatalf("PrintableName(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}
