package httpapi

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
)

// encoding/json matches object keys to struct fields without regard to
// case, so {"to":"nobody","TO":"bob"} fills To twice and the last wins,
// past both DisallowUnknownFields and the duplicate-key scan (the keys
// differ). caseMismatch finds such a key: one that names a field of the
// target only when case is ignored. Free-form values (json.RawMessage,
// maps, interfaces) are not looked into: their keys are data, and "a" and
// "A" are two keys there.
func caseMismatch(body []byte, v any) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	key, _ := walkFields(dec, reflect.TypeOf(v))
	return key
}

var (
	rawMessageType  = reflect.TypeOf(json.RawMessage(nil))
	unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	textUnmarshaler = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
)

// walkFields consumes one value of dec that decodes into t and returns the
// first key that matches a field of a struct only by folding case. Errors
// stop the walk: the decoder reports malformed bodies itself.
func walkFields(dec *json.Decoder, t reflect.Type) (string, error) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t == rawMessageType || t.Kind() == reflect.Interface || t.Kind() == reflect.Map ||
		reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		var skip json.RawMessage
		return "", dec.Decode(&skip)
	}
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return "", nil // a scalar
	}
	switch {
	case d == '[' && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for dec.More() {
			if key, err := walkFields(dec, t.Elem()); key != "" || err != nil {
				return key, err
			}
		}
	case d == '{' && t.Kind() == reflect.Struct:
		fields := fieldsOf(t)
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return "", err
			}
			key, _ := tok.(string)
			ft, exact := fields[key]
			if !exact {
				for name := range fields {
					if strings.EqualFold(name, key) { // as encoding/json folds, Kelvin sign and long s included
						return key, nil
					}
				}
			}
			if k, err := walkFields(dec, ft); k != "" || err != nil {
				return k, err
			}
		}
	default:
		// A type mismatch: the decoder reports it. Skip the rest.
		for dec.More() {
			if _, err := walkFields(dec, nil); err != nil {
				return "", err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return "", err
}

// fieldCache holds jsonFields per struct type: request types are few and
// fixed, and the map was rebuilt for every object of every request body.
var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// fieldsOf is jsonFields(t), built once per type. The maps are shared:
// read only.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	f, _ := fieldCache.LoadOrStore(t, jsonFields(t, nil))
	return f.(map[string]reflect.Type)
}

// jsonFields maps the JSON names of t's fields (embedded structs
// included) to their types.
func jsonFields(t reflect.Type, into map[string]reflect.Type) map[string]reflect.Type {
	if into == nil {
		into = map[string]reflect.Type{}
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				jsonFields(ft, into)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		into[name] = f.Type
	}
	return into
}
