package localstack_test

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/outbox"
	"github.com/agentmesh/agentmesh/shared/samtemplate"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// listBound is how one route that answers a list stays inside a Lambda
// response: either by bytes (the route cuts its pages itself) or by count
// times the largest item the API lets anyone create.
type listBound struct {
	pageBytes int // > 0: the route bounds its answer to this many wire bytes
	count     int // otherwise: at most this many items...
	item      any // ...each at most this large (a maximal value)
	// also: fixed parts of the answer beside the list (a roster's group).
	also any
}

// Maximal field values: ids at their 64-character limit, names at their
// 200-character limit in a character JSON escapes to 6 bytes (7 on the
// wire), times in the longest form.
var (
	maxID   = strings.Repeat("a", 64)
	maxName = strings.Repeat("<", identity.MaxNameLength)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -12*3600-59*60))
)

func maxPresence() identity.Presence {
	return identity.Presence{AgentID: maxID, Name: maxName, Status: "inactive", LastHeartbeatAt: &maxTime}
}

func maxGroup() identity.Group {
	return identity.Group{GroupID: maxID, Name: maxName, Owner: maxID, ContextID: maxID, Role: "member", MemberCount: 1 << 31, CreatedAt: maxTime}
}

// bounds names, for every route whose answer holds a list, why it fits.
var bounds = map[string]listBound{
	"GET /v1/inbox":                 {pageBytes: outbox.MaxInboxPageBytes},
	"GET /v1/tasks/{id}/messages":   {pageBytes: tasks.MaxMessagePageBytes},
	"GET /v1/tasks/{id}":            {pageBytes: tasks.DetailMessageBytes + tasks.DetailArtifactBytes, also: tasks.Task{TaskID: maxID, ContextID: maxID, GroupID: maxID, Initiator: maxID, Recipient: maxID, Status: "input-required", CreatedAt: maxTime, UpdatedAt: maxTime}},
	"GET /v1/tasks":                 {count: tasks.MaxListLimit, item: tasks.Task{TaskID: maxID, ContextID: maxID, GroupID: maxID, Initiator: maxID, Recipient: maxID, Status: "input-required", CreatedAt: maxTime, UpdatedAt: maxTime}, also: map[string]string{"next_cursor": strings.Repeat("a", 200)}},
	"POST /v1/groups/{id}/messages": {count: tasks.MaxFanoutMembers, item: tasks.GroupTask{To: maxID, TaskID: maxID}, also: tasks.GroupSendResult{GroupID: maxID, ContextID: maxID, MessageID: maxID}},
	"GET /v1/friends":               {count: identity.MaxPageSize, item: identity.Friend{Presence: maxPresence(), Since: maxTime}},
	"GET /v1/friends/requests":      {count: 2 * identity.MaxListedRequests, item: identity.FriendRequest{RequestID: "18446744073709551615", From: maxID, To: maxID, Status: "withdrawn", CreatedAt: maxTime, DecidedAt: &maxTime}},
	"GET /v1/groups":                {count: identity.MaxPageSize, item: maxGroup()},
	"GET /v1/groups/{id}/roster":    {count: identity.MaxPageSize, item: identity.Member{Presence: maxPresence(), Role: "member", JoinedAt: maxTime}, also: maxGroup()},
	"GET /v1/blocks":                {count: identity.MaxPageSize, item: identity.Block{AgentID: maxID, Since: maxTime}},
	// Not enforced by the code: only the admin creates keys, and nothing
	// caps an agent's live keys. 100,000 live keys (far past any rotation
	// practice) would still fit; see the report on issue 7.
	"POST /v1/admin/agents/{id}/keys": {count: 100000, item: strings.Repeat("k", 12), also: identity.RotatedKey{AgentID: maxID, KeyID: strings.Repeat("k", 12), APIKey: strings.Repeat("s", 128), CreatedAt: maxTime}},
	// The brokers are the operator's configuration, not anyone's input: a
	// bootstrap list of 100 host names of 253 characters.
	"POST /v1/auth/token": {count: 100, item: strings.Repeat("b", 253) + ":65535"},
}

// holdsList reports whether a schema can hold an array anywhere inside it.
func holdsList(s *openapi3.SchemaRef, seen map[*openapi3.Schema]bool) bool {
	if s == nil || s.Value == nil || seen[s.Value] {
		return false
	}
	v := s.Value
	seen[v] = true
	if v.Type != nil && v.Type.Includes("array") {
		return true
	}
	for _, p := range v.Properties {
		if holdsList(p, seen) {
			return true
		}
	}
	for _, group := range [][]*openapi3.SchemaRef{v.AllOf, v.AnyOf, v.OneOf} {
		for _, c := range group {
			if holdsList(c, seen) {
				return true
			}
		}
	}
	return holdsList(v.Items, seen) || holdsList(v.AdditionalProperties.Schema, seen)
}

func wire(t *testing.T, v any) int {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return jsonlimit.WireSize(b)
}

// No route can answer more than a Lambda response carries (6 MB): every
// route whose documented answer holds a list states its bound here, and the
// bound is computed from the limits the code enforces. A new list route
// without a bound, or a limit raised past what fits, fails this test.
func TestNoRouteCanAnswerMoreThanALambdaResponse(t *testing.T) {
	root, err := samtemplate.FindRepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := samtemplate.Load(root + "/template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := loadAPIDoc(t, root)
	keys := make([]string, 0)
	for k := range tpl.Routes() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lists := map[string]bool{}
	for _, key := range keys {
		method, path, _ := strings.Cut(key, " ")
		item := doc.doc.Paths.Find(path)
		if item == nil || item.GetOperation(method) == nil {
			t.Errorf("%s is not in openapi.yaml", key)
			continue
		}
		for status, resp := range item.GetOperation(method).Responses.Map() {
			if status[0] != '2' || resp.Value == nil {
				continue
			}
			for _, media := range resp.Value.Content {
				if holdsList(media.Schema, map[*openapi3.Schema]bool{}) {
					lists[key] = true
				}
			}
		}
	}
	limit := httpapi.MaxResponseBytes
	for _, key := range keys {
		b, stated := bounds[key]
		t.Run(key+" answers at most a Lambda response", func(t *testing.T) {
			switch {
			case lists[key] && !stated:
				t.Fatalf("its answer holds a list, but no bound is stated for it")
			case !lists[key] && stated:
				t.Fatalf("a bound is stated, but its documented answer holds no list")
			case !lists[key]:
				return // one object of bounded fields
			}
			worst := b.pageBytes
			if worst == 0 {
				worst = b.count * (wire(t, b.item) + 1)
			}
			if b.also != nil {
				worst += wire(t, b.also)
			}
			if worst > limit {
				t.Fatalf("worst case %d bytes on the wire, over the %d a response may take", worst, limit)
			}
			t.Logf("worst case %.2f MB", float64(worst)/1e6)
		})
	}
	for key := range bounds {
		if _, ok := tpl.Routes()[key]; !ok {
			t.Errorf("a bound is stated for %s, which is no route of template.yaml", key)
		}
	}
}
