package samtemplate

import (
	"fmt"
	"strings"
)

// SegmentKind says what one segment of an HttpApi path template is. The
// kinds are ordered by how specific they are: API Gateway prefers a literal
// segment to a {var}, and a {var} to a greedy {var+}.
type SegmentKind int

// The segment kinds, most specific first.
const (
	Literal SegmentKind = iota // e.g. "tasks"
	Var                        // e.g. "{id}": exactly one non-empty segment
	Greedy                     // e.g. "{path+}": the rest of the path, last only
)

// Segment is one "/"-separated part of a path template.
type Segment struct {
	Kind SegmentKind
	// Text is the literal, or the variable's name.
	Text string
}

// ParsePath splits an HttpApi path template such as /v1/tasks/{id}/messages
// into its segments, refusing what API Gateway refuses: a path not starting
// with /, a variable that is not a whole segment, an empty variable name and
// a greedy variable before the last segment.
func ParsePath(path string) ([]Segment, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("path %q must start with /", path)
	}
	parts := strings.Split(path[1:], "/")
	segs := make([]Segment, len(parts))
	for i, p := range parts {
		switch {
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "+}"):
			if i != len(parts)-1 {
				return nil, fmt.Errorf("path %q: a greedy variable must be the last segment", path)
			}
			segs[i] = Segment{Greedy, p[1 : len(p)-2]}
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}"):
			segs[i] = Segment{Var, p[1 : len(p)-1]}
		case strings.ContainsAny(p, "{}"):
			return nil, fmt.Errorf("path %q: a variable must be a whole segment", path)
		default:
			segs[i] = Segment{Literal, p}
		}
		if segs[i].Kind != Literal && segs[i].Text == "" {
			return nil, fmt.Errorf("path %q: empty variable name", path)
		}
	}
	return segs, nil
}
