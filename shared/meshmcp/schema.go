package meshmcp

import (
	"encoding/json"
	"reflect"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

// schemaProps are the top-level properties of a tool's schema, for edits
// struct tags cannot express (enums, ranges).
type schemaProps map[string]*jsonschema.Schema

// typeSchemas replaces inference where Go types say too little: raw JSON
// is any JSON value (not an array of bytes), and a part is described for
// the model field by field.
func typeSchemas() map[reflect.Type]*jsonschema.Schema {
	str := func(desc string) *jsonschema.Schema { return &jsonschema.Schema{Type: "string", Description: desc} }
	return map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): {},
		reflect.TypeFor[mesh.Part](): {
			Type:        "object",
			Description: "One part of a message. A part carries only its kind's fields: text {text}; data {data, media_type?}; url {url, name?, media_type?}; file {bytes, name, media_type}.",
			Required:    []string{"kind"},
			Properties: map[string]*jsonschema.Schema{
				"kind":       {Type: "string", Enum: enum([]string{"text", "data", "url", "file"}), Description: "what the part holds"},
				"text":       str("plain text (kind text)"),
				"data":       {Description: "any JSON value, e.g. structured results (kind data)"},
				"url":        str("an absolute http(s) URL (kind url)"),
				"name":       str("a file name without slashes (kind url or file)"),
				"media_type": str("a media type such as application/pdf (required for kind file)"),
				"bytes":      str("the file's content, base64 (standard alphabet, padded) (kind file)"),
			},
			PropertyOrder:        []string{"kind", "text", "data", "url", "name", "media_type", "bytes"},
			AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
		},
	}
}

// schemaFor infers T's schema and applies edit to its properties. Every
// required string property of an input must be non-empty.
func schemaFor[T any](input bool, edit func(schemaProps)) (*jsonschema.Schema, error) {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: typeSchemas()})
	if err != nil {
		return nil, err
	}
	if edit != nil {
		edit(s.Properties)
	}
	if input {
		for name, p := range s.Properties {
			if p.Type == "string" && slices.Contains(s.Required, name) {
				p.MinLength = ptr(1)
			}
		}
	}
	return s, nil
}

func ptr[T any](v T) *T { return &v }

func num(v float64) *float64 { return &v }

func enum(values []string) []any {
	out := make([]any, len(values))
	for i, v := range values {
		out[i] = v
	}
	return out
}
