package samlocal_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/agentmesh/agentmesh/shared/samlocal"
)

func TestLocalTemplateChangesOnlyTheCodeTheArchitectureAndTheTimeoutsAsked(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := samlocal.LocalTemplate(src, "/src/mesh", "x86_64", map[string]int{"DispatcherFunction": 15, "HealthFunction": 7})
	if err != nil {
		t.Fatal(err)
	}
	before, after := canon(t, src), canon(t, out)
	fn := func(doc map[string]any) map[string]any {
		return doc["Globals"].(map[string]any)["Function"].(map[string]any)
	}
	props := func(doc map[string]any, id string) map[string]any {
		return doc["Resources"].(map[string]any)[id].(map[string]any)["Properties"].(map[string]any)
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"the code is the repository, by its absolute path", fn(after)["CodeUri"], "/src/mesh"},
		{"the architecture is the one asked", fn(after)["Architectures"], []any{"x86_64"}},
		{"a function's own timeout is replaced", props(after, "DispatcherFunction")["Timeout"], "15"},
		{"a function without one gets it", props(after, "HealthFunction")["Timeout"], "7"},
		{"other functions keep theirs", props(after, "A2aFunction")["Timeout"], props(before, "A2aFunction")["Timeout"]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !reflect.DeepEqual(tc.got, tc.want) {
				t.Errorf("got %#v, want %#v", tc.got, tc.want)
			}
		})
	}
	t.Run("nothing else changes", func(t *testing.T) {
		fn(after)["CodeUri"], fn(after)["Architectures"] = fn(before)["CodeUri"], fn(before)["Architectures"]
		props(after, "DispatcherFunction")["Timeout"] = props(before, "DispatcherFunction")["Timeout"]
		delete(props(after, "HealthFunction"), "Timeout")
		if !reflect.DeepEqual(before, after) {
			t.Errorf("the local template differs from template.yaml beyond what was asked")
		}
	})
	t.Run("an unknown architecture is refused", func(t *testing.T) {
		if _, err := samlocal.LocalTemplate(src, "/src/mesh", "mips", nil); err == nil {
			t.Errorf("LocalTemplate accepted architecture mips")
		}
	})
}

// canon is a YAML document as maps, slices and scalars, with each
// CloudFormation tag kept as a one-key map ({"!Ref": "X"}): a re-encoding
// that lost a tag would differ.
func canon(t *testing.T, src []byte) map[string]any {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	var walk func(n *yaml.Node) any
	walk = func(n *yaml.Node) any {
		var v any
		switch n.Kind {
		case yaml.MappingNode:
			m := map[string]any{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				m[n.Content[i].Value] = walk(n.Content[i+1])
			}
			v = m
		case yaml.SequenceNode:
			l := make([]any, len(n.Content))
			for i, c := range n.Content {
				l[i] = walk(c)
			}
			v = l
		case yaml.AliasNode:
			return walk(n.Alias)
		default:
			v = n.Value
		}
		if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
			return map[string]any{n.Tag: v}
		}
		return v
	}
	return walk(doc.Content[0]).(map[string]any)
}
