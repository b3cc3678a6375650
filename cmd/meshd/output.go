package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// table prints aligned columns for people; --json is the form for scripts.
// An empty table prints nothing, not even its header.
type table struct {
	w      *tabwriter.Writer
	header []string
}

func newTable(w io.Writer, header ...string) *table {
	return &table{w: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0), header: header}
}

func (t *table) row(cells ...any) {
	if t.header != nil {
		fmt.Fprintln(t.w, strings.Join(t.header, "\t"))
		t.header = nil
	}
	s := make([]string, len(cells))
	for i, c := range cells {
		switch v := c.(type) {
		case time.Time:
			s[i] = ago(v)
		case *time.Time:
			s[i] = "-"
			if v != nil {
				s[i] = ago(*v)
			}
		default:
			s[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(fmt.Sprint(c))
		}
		if s[i] == "" {
			s[i] = "-"
		}
	}
	fmt.Fprintln(t.w, strings.Join(s, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// ago is a timestamp as a person reads it: "3m ago", or the date when old.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < 0:
		return t.Local().Format("2006-01-02 15:04")
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02 15:04")
}

// printJSON writes v as one JSON line (the --json form).
func printJSON(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// truncate shortens s to n runes with an ellipsis.
func truncate(s string, n int) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n-1]) + "…"
}
