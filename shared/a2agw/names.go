package a2agw

import (
	"encoding/json"
	"strings"
)

// Proto field names. A2A 1.0's JSON is the proto3 JSON mapping of its
// schema, whose parsers accept a field's proto name (history_length) as
// well as its JSON name (historyLength); the A2A TCK's JSON-RPC client
// sends some of the former, and the reference SDK (a2a-sdk, protobuf
// types) reads them. a2a-go decodes the JSON names only and drops the
// others without a word, so GetTask's history_length was ignored. The
// front renames the proto names of the request fields to their JSON names
// before a2a-go decodes the body; only request fields are renamed, never
// a key inside a data part or metadata (free JSON).

// shape is where the multi-word fields of one request message sit.
type shape struct {
	names  map[string]string // proto name -> JSON name
	fields map[string]*shape // message fields, by JSON name
	lists  map[string]*shape // repeated message fields, by JSON name
}

// The request messages of a2a.proto (lf.a2a.v1) with a multi-word field,
// or a message field that has one.
var (
	partShape    = &shape{names: map[string]string{"media_type": "mediaType"}}
	messageShape = &shape{names: map[string]string{"message_id": "messageId", "context_id": "contextId",
		"task_id": "taskId", "reference_task_ids": "referenceTaskIds"}, lists: map[string]*shape{"parts": partShape}}
	pushConfigShape = &shape{names: map[string]string{"task_id": "taskId"}}
	sendConfigShape = &shape{names: map[string]string{"accepted_output_modes": "acceptedOutputModes",
		"task_push_notification_config": "taskPushNotificationConfig", "history_length": "historyLength",
		"return_immediately": "returnImmediately"}, fields: map[string]*shape{"taskPushNotificationConfig": pushConfigShape}}
	sendShape = &shape{fields: map[string]*shape{"message": messageShape, "configuration": sendConfigShape}}

	// requestShapes are the JSON-RPC methods' params.
	requestShapes = map[string]*shape{
		"SendMessage":          sendShape,
		"SendStreamingMessage": sendShape,
		"GetTask":              {names: map[string]string{"history_length": "historyLength"}},
		"ListTasks": {names: map[string]string{"context_id": "contextId", "page_size": "pageSize", "page_token": "pageToken",
			"history_length": "historyLength", "status_timestamp_after": "statusTimestampAfter", "include_artifacts": "includeArtifacts"}},
		"CreateTaskPushNotificationConfig": pushConfigShape,
		"GetTaskPushNotificationConfig":    pushConfigShape,
		"DeleteTaskPushNotificationConfig": pushConfigShape,
		"ListTaskPushNotificationConfigs": {names: map[string]string{"task_id": "taskId", "page_size": "pageSize",
			"page_token": "pageToken"}},
	}
)

// rename returns v with the proto names of sh renamed, recursively, and
// whether anything changed. A field given under both names is refused
// (msg): the two could disagree. v that is not an object is left alone
// (a2a-go answers its type).
func (sh *shape) rename(v json.RawMessage, path string) (json.RawMessage, bool, string) {
	if sh == nil || len(v) == 0 || v[0] != '{' {
		return v, false, ""
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil {
		return v, false, ""
	}
	changed := false
	for proto, name := range sh.names {
		val, ok := m[proto]
		if !ok {
			continue
		}
		if _, dup := m[name]; dup {
			return v, false, path + " names one field twice: " + proto + " and " + name
		}
		m[name] = val
		delete(m, proto)
		changed = true
	}
	for name, sub := range sh.fields {
		if val, ok := m[name]; ok {
			out, ch, msg := sub.rename(val, path+"."+name)
			if msg != "" {
				return v, false, msg
			}
			if ch {
				m[name], changed = out, true
			}
		}
	}
	for name, sub := range sh.lists {
		val, ok := m[name]
		if !ok || len(val) == 0 || val[0] != '[' {
			continue
		}
		var items []json.RawMessage
		if json.Unmarshal(val, &items) != nil {
			continue
		}
		listChanged := false
		for i, item := range items {
			out, ch, msg := sub.rename(item, path+"."+name+"["+itoa(i)+"]")
			if msg != "" {
				return v, false, msg
			}
			if ch {
				items[i], listChanged = out, true
			}
		}
		if listChanged {
			b, err := json.Marshal(items)
			if err != nil {
				return v, false, ""
			}
			m[name], changed = b, true
		}
	}
	if !changed {
		return v, false, ""
	}
	b, err := json.Marshal(m)
	if err != nil {
		return v, false, ""
	}
	return b, true, ""
}

// renameRPC renames the proto names in a JSON-RPC request's params; body
// comes back unchanged when there are none. msg is an InvalidParams
// answer.
func renameRPC(body []byte, method string) ([]byte, string) {
	sh := requestShapes[method]
	if sh == nil || !strings.Contains(string(body), "_") {
		return body, ""
	}
	var env map[string]json.RawMessage
	if json.Unmarshal(body, &env) != nil {
		return body, ""
	}
	params, changed, msg := sh.rename(env["params"], "params")
	if msg != "" || !changed {
		return body, msg
	}
	env["params"] = params
	b, err := json.Marshal(env)
	if err != nil {
		return body, ""
	}
	return b, ""
}

// renameREST renames the proto names in an HTTP+JSON request body (the
// POSTed messages and push configs).
func renameREST(body []byte, restPath string) ([]byte, string) {
	var sh *shape
	switch {
	case restPath == "/message:send" || restPath == "/message:stream":
		sh = sendShape
	case strings.HasPrefix(restPath, "/tasks/") && strings.HasSuffix(restPath, "/pushNotificationConfigs"):
		sh = pushConfigShape
	}
	if sh == nil || !strings.Contains(string(body), "_") {
		return body, ""
	}
	out, changed, msg := sh.rename(body, "body")
	if msg != "" || !changed {
		return body, msg
	}
	return out, ""
}
