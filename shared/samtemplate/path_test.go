package samtemplate

import (
	"reflect"
	"testing"
)

func TestParsePathSplitsLiteralsVariablesAndAGreedyTail(t *testing.T) {
	tests := []struct {
		name, path string
		want       []Segment
	}{
		{"a literal path is all literals", "/v1/health", []Segment{{Literal, "v1"}, {Literal, "health"}}},
		{"a variable segment names its variable", "/v1/tasks/{id}/messages",
			[]Segment{{Literal, "v1"}, {Literal, "tasks"}, {Var, "id"}, {Literal, "messages"}}},
		{"a greedy last segment names its variable without the plus", "/v1/files/{path+}",
			[]Segment{{Literal, "v1"}, {Literal, "files"}, {Greedy, "path"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePath(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParsePath(%q) = %+v, want %+v", tt.path, got, tt.want)
			}
		})
	}
}

func TestParsePathRejectsMalformedTemplates(t *testing.T) {
	for _, path := range []string{"v1/no-slash", "/v1/{a+}/more", "/v1/x{id}", "/v1/{}"} {
		t.Run(path+" is refused", func(t *testing.T) {
			if _, err := ParsePath(path); err == nil {
				t.Fatalf("ParsePath(%q) accepted it", path)
			}
		})
	}
}
