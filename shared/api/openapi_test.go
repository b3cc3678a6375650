package api

import (
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// wireTypes names, for every wire type, where openapi.yaml describes it:
// "Name" is a component schema; "METHOD /path request" and "METHOD /path
// 2xx" are a route's inline body; ".field" and "[]" step into a property and
// an array's items.
var wireTypes = []struct {
	v      any
	schema string
}{
	{TokenRequest{}, "TokenRequest"},
	{TokenResponse{}, "TokenResponse"},
	{InboxKey{}, "InboxKey"},
	{KafkaInfo{}, "KafkaInfo"},
	{SendRequest{}, "SendMessageRequest"},
	{SendResult{}, "SendResult"},
	{ReplyRequest{}, "ReplyRequest"},
	{StatusRequest{}, "POST /v1/tasks/{id}/status request"},
	{StatusNote{}, "POST /v1/tasks/{id}/status request .message"},
	{StatusResult{}, "POST /v1/tasks/{id}/status 200"},
	{ArtifactRequest{}, "ArtifactRequest"},
	{ArtifactResult{}, "POST /v1/tasks/{id}/artifacts 201"},
	{GroupSendRequest{}, "GroupMessageRequest"},
	{GroupSendResult{}, "GroupSendResult"},
	{GroupTask{}, "GroupSendResult .tasks []"},
	{InboxPage{}, "InboxPage"},
	{HeartbeatRequest{}, "POST /v1/agents/me/heartbeat request"},
	{HeartbeatResult{}, "POST /v1/agents/me/heartbeat 200"},
	{Me{}, "Me"},
	{Agent{}, "Agent"},
	{Friend{}, "Friend"},
	{FriendPage{}, "GET /v1/friends 200"},
	{FriendRequestInput{}, "POST /v1/friends/requests request"},
	{FriendRequest{}, "FriendRequest"},
	{FriendRequests{}, "GET /v1/friends/requests 200"},
	{Block{}, "Block"},
	{BlockPage{}, "GET /v1/blocks 200"},
	{CreateGroupRequest{}, "POST /v1/groups request"},
	{Group{}, "Group"},
	{GroupPage{}, "GET /v1/groups 200"},
	{AddMemberRequest{}, "AddMemberRequest"},
	{Membership{}, "Membership"},
	{Member{}, "Member"},
	{Roster{}, "Roster"},
	{Task{}, "Task"},
	{Message{}, "Message"},
	{Artifact{}, "Artifact"},
	{TaskDetail{}, "TaskDetail"},
	{MessagePage{}, "MessagePage"},
	{TaskPage{}, "TaskPage"},
	{Problem{}, "Problem"},
	{CreateAgentRequest{}, "CreateAgentRequest"},
	{NewAgent{}, "NewAgent"},
	{RotateKeyRequest{}, "RotateKeyRequest"},
	{RotatedKey{}, "RotatedKey"},
	{RevokedKey{}, "RevokedKey"},
	{FriendshipRequest{}, "POST /v1/admin/friendships request"},
	{Friendship{}, "Friendship"},
	{AdminGroupRequest{}, "POST /v1/admin/groups request"},
	{AgentPolicy{}, "AgentPolicy"},
	// The account routes (accounts.go).
	{CreateAccountRequest{}, "CreateAccountRequest"},
	{Account{}, "Account"},
	{SignInRequest{}, "SignInRequest"},
	{SignedIn{}, "SignedIn"},
	{AccountKey{}, "AccountKey"},
	{AccountAgent{}, "AccountAgent"},
	{AccountAgentPage{}, "AccountAgentPage"},
	{AccountCreateAgentRequest{}, "AccountCreateAgentRequest"},
	{AccountNewAgent{}, "AccountNewAgent"},
	{DrainResult{}, "POST /v1/account/agents/{id}/drain 200"},
	{PolicyRequest{}, "PolicyRequest"},
	{Timeline{}, "Timeline"},
	{AccountFriendRequests{}, "GET /v1/account/friend-requests 200"},
	{DecisionRequest{}, "DecisionRequest"},
	{AuditActor{}, "AuditEntry .actor"},
	{AuditEntry{}, "AuditEntry"},
	{AuditPage{}, "AuditPage"},
	{DeadLetter{}, "DeadLetter"},
	{Backlog{}, "OutboxHealth .backlog []"},
	{OutboxHealth{}, "OutboxHealth"},
	{RedriveRequest{}, "RedriveRequest"},
	{Redriven{}, "Redriven"},
}

// TestWireTypesMatchOpenAPI fails when a field is in openapi.yaml and not in
// its Go type or the other way round, or when a field the schema requires
// may be left out of the JSON (omitempty), or an optional one is always sent.
func TestWireTypesMatchOpenAPI(t *testing.T) {
	doc := loadOpenAPI(t)
	for _, w := range wireTypes {
		typ := reflect.TypeOf(w.v)
		t.Run(typ.Name()+" is "+w.schema+" in openapi.yaml", func(t *testing.T) {
			props, required := doc.object(t, w.schema)
			fields := jsonFields(typ)
			var goNames []string
			for name := range fields {
				goNames = append(goNames, name)
			}
			sort.Strings(goNames)
			for _, name := range goNames {
				if _, ok := props[name]; !ok {
					t.Errorf("field %q of %s is not in the schema", name, typ.Name())
				}
			}
			for name := range props {
				if _, ok := fields[name]; !ok {
					t.Errorf("schema property %q has no field in %s", name, typ.Name())
				}
			}
			for name, omitempty := range fields {
				if _, ok := props[name]; !ok {
					continue
				}
				req := slices.Contains(required, name)
				if req && omitempty {
					t.Errorf("field %q is required by the schema but omitempty in %s", name, typ.Name())
				}
				if !req && !omitempty && !isRequestType(typ) {
					t.Errorf("field %q is optional in the schema but always sent by %s (add omitempty or require it)", name, typ.Name())
				}
			}
		})
	}
}

// isRequestType: a request's optional field may be sent empty by a client
// that sets it; only answers must leave out what they do not promise.
func isRequestType(t reflect.Type) bool {
	return strings.HasSuffix(t.Name(), "Request") || strings.HasSuffix(t.Name(), "Input") || t.Name() == "StatusNote"
}

// jsonFields maps each JSON name of t (embedded structs flattened) to
// whether it is omitempty.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = slices.Contains(strings.Split(opts, ","), "omitempty")
	}
	return out
}

type openapi struct{ root map[string]any }

func loadOpenAPI(t *testing.T) openapi {
	t.Helper()
	b, err := os.ReadFile("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	return openapi{root}
}

func dig(m any, keys ...string) any {
	for _, k := range keys {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[k]
	}
	return m
}

// resolve follows $ref and merges allOf into one object schema.
func (d openapi) resolve(t *testing.T, s any) map[string]any {
	t.Helper()
	m, _ := s.(map[string]any)
	if m == nil {
		t.Fatalf("schema %v is not an object", s)
	}
	if ref, ok := m["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		return d.resolve(t, dig(d.root, "components", "schemas", name))
	}
	all, ok := m["allOf"].([]any)
	if !ok {
		return m
	}
	merged := map[string]any{"properties": map[string]any{}, "required": []any{}}
	for _, part := range append(all, map[string]any{"properties": m["properties"], "required": m["required"]}) {
		p := d.resolve(t, part)
		for k, v := range asMap(p["properties"]) {
			merged["properties"].(map[string]any)[k] = v
		}
		if r, ok := p["required"].([]any); ok {
			merged["required"] = append(merged["required"].([]any), r...)
		}
	}
	return merged
}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

// object finds the schema at loc and returns its properties and required names.
func (d openapi) object(t *testing.T, loc string) (map[string]any, []string) {
	t.Helper()
	words := strings.Fields(loc)
	var s any
	switch {
	case len(words) >= 3 && strings.HasPrefix(words[1], "/"):
		op := dig(d.root, "paths", words[1], strings.ToLower(words[0]))
		if op == nil {
			t.Fatalf("openapi.yaml has no %s %s", words[0], words[1])
		}
		if words[2] == "request" {
			s = dig(op, "requestBody", "content", "application/json", "schema")
		} else {
			s = dig(op, "responses", words[2], "content", "application/json", "schema")
		}
		words = words[3:]
	default:
		s = dig(d.root, "components", "schemas", words[0])
		words = words[1:]
	}
	if s == nil {
		t.Fatalf("openapi.yaml has no schema at %q", loc)
	}
	for _, w := range words {
		m := d.resolve(t, s)
		switch {
		case w == "[]":
			s = m["items"]
		case strings.HasPrefix(w, "."):
			s = asMap(m["properties"])[w[1:]]
		}
		if s == nil {
			t.Fatalf("openapi.yaml: %q: no %s", loc, w)
		}
	}
	m := d.resolve(t, s)
	var req []string
	for _, r := range asAnySlice(m["required"]) {
		req = append(req, r.(string))
	}
	return asMap(m["properties"]), req
}

func asAnySlice(v any) []any { s, _ := v.([]any); return s }
