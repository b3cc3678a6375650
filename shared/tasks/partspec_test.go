package tasks_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentmesh/agentmesh/shared/mesh"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

// TestOpenAPIPartsAreAsStrictAsTheServer holds openapi.yaml's Part schema to
// what validatePart accepts, case by case: a part the document calls valid
// must be accepted (else generated clients send what the server refuses),
// and one it calls invalid must be refused. Schemathesis (infra/fuzz-api.sh,
// in `make test`) searches the same property at random; these are the cases
// it found or that sit on an edge.
func TestOpenAPIPartsAreAsStrictAsTheServer(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile(filepath.Join("..", "..", "openapi.yaml"))
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	schema := doc.Components.Schemas["Part"]
	if schema == nil {
		t.Fatal("openapi.yaml has no Part schema")
	}
	file := func(bytes, name, mediaType string) string {
		b, _ := json.Marshal(map[string]string{"kind": "file", "bytes": bytes, "name": name, "media_type": mediaType})
		return string(b)
	}
	data := func(mediaType string) string {
		b, _ := json.Marshal(map[string]any{"kind": "data", "data": 1, "media_type": mediaType})
		return string(b)
	}
	cases := []struct {
		name  string
		part  string
		valid bool
	}{
		{"a file with content, name and media type is valid", file("aGk=", "a.txt", "text/plain"), true},
		{"a file with empty bytes is invalid", file("", "a.txt", "text/plain"), false},
		{"a file with an empty name is invalid", file("aGk=", "", "text/plain"), false},
		{"unpadded base64 is invalid", file("aGk", "a.txt", "text/plain"), false},
		{"base64 with a stray padding is invalid", file("aGk==", "a.txt", "text/plain"), false},
		{"two bytes of base64 with two pads are valid", file("aA==", "a.txt", "text/plain"), true},
		{"url-safe base64 is invalid", file("a-_=", "a.txt", "text/plain"), false},
		{"a media type without a subtype is invalid", file("aGk=", "a.txt", "pdf"), false},
		{"a media type with a parameter is valid", file("aGk=", "a.txt", "text/plain; charset=utf-8"), true},
		{"a media type with a quoted parameter is valid", file("aGk=", "a.txt", `text/plain;format="flowed x"`), true},
		{"a media type with a space in its subtype is invalid", file("aGk=", "a.txt", "text/pl ain"), false},
		{"a name of 255 four-byte characters is valid", file("aGk=", strings.Repeat("😀", 255), "text/plain"), true},
		{"a name of 256 characters is invalid", file("aGk=", strings.Repeat("a", 256), "text/plain"), false},
		{"a name with a slash is invalid", file("aGk=", "a/b", "text/plain"), false},
		{"a data part with a media type is valid", data("application/json"), true},
		{"a data part with a malformed media type is invalid", data("json"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v any
			if err := json.Unmarshal([]byte(c.part), &v); err != nil {
				t.Fatal(err)
			}
			specErr := schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020())
			var p mesh.Part
			if err := json.Unmarshal([]byte(c.part), &p); err != nil {
				t.Fatal(err)
			}
			serverErr := tasks.ValidatePart(&p)
			if (specErr == nil) != c.valid {
				t.Errorf("openapi.yaml: valid = %v, want %v (%v)", specErr == nil, c.valid, specErr)
			}
			if (serverErr == nil) != c.valid {
				t.Errorf("server: accepts = %v, want %v (%v)", serverErr == nil, c.valid, serverErr)
			}
		})
	}
}
