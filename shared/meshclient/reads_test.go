package meshclient

import (
	"context"
	"net/http"
	"testing"
)

func TestReadsSendTheirFiltersAndDecodePages(t *testing.T) {
	f, srv := newFakeAPI(t)
	var got string
	record := func(body any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			got = r.Method + " " + r.URL.EscapedPath() + "?" + r.URL.RawQuery
			writeJSON(w, 200, body)
		}
	}
	f.routes["GET /v1/friends"] = record(map[string]any{"friends": []map[string]any{{"agent_id": "bob", "name": "Bob", "status": "active", "last_heartbeat_at": nil, "since": "2026-01-02T03:04:05Z"}}, "next_after": "bob"})
	f.routes["GET /v1/groups"] = record(map[string]any{"groups": []map[string]any{{"group_id": "g1", "name": "reviewers", "owner": "alice", "context_id": "c", "role": "owner", "member_count": 3, "created_at": "2026-01-02T03:04:05Z"}}})
	f.routes["GET /v1/tasks"] = record(map[string]any{"tasks": []map[string]any{{"task_id": "t1", "status": "working"}}, "next_cursor": "n1"})
	f.routes["GET /v1/tasks/a b"] = record(map[string]any{"task_id": "a b", "status": "completed", "messages": []map[string]any{{"message_id": "m1", "from": "bob", "parts": []map[string]any{{"kind": "text", "text": "hi"}}}}, "artifacts": []any{}})
	c := New(srv.URL, "amk_good")
	ctx := context.Background()

	cases := []struct {
		name  string
		call  func() (bool, error)
		query string
	}{
		{"friends are paged by after and limit", func() (bool, error) {
			p, err := c.ListFriends(ctx, "alice", 5)
			return len(p.Friends) == 1 && p.Friends[0].AgentID == "bob" && p.Friends[0].LastHeartbeatAt == nil && p.NextAfter == "bob", err
		}, "GET /v1/friends?after=alice&limit=5"},
		{"groups without paging send no query", func() (bool, error) {
			p, err := c.ListGroups(ctx, "", 0)
			return len(p.Groups) == 1 && p.Groups[0].MemberCount == 3 && p.NextAfter == "", err
		}, "GET /v1/groups?"},
		{"tasks send every filter", func() (bool, error) {
			p, err := c.ListTasks(ctx, TaskQuery{Status: "working", Role: "recipient", ContextID: "c1", Cursor: "xyz", Limit: 20})
			return len(p.Tasks) == 1 && p.NextCursor == "n1", err
		}, "GET /v1/tasks?context_id=c1&cursor=xyz&limit=20&role=recipient&status=working"},
		{"a task id is escaped into the path", func() (bool, error) {
			d, err := c.GetTask(ctx, "a b")
			return d.TaskID == "a b" && len(d.Messages) == 1 && d.Messages[0].Parts[0].Text == "hi", err
		}, "GET /v1/tasks/a%20b?"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got = ""
			ok, err := tc.call()
			if err != nil || !ok || got != tc.query {
				t.Fatalf("ok=%v err=%v request %q; want %q", ok, err, got, tc.query)
			}
		})
	}
	t.Run("a task without an id is refused before any request", func(t *testing.T) {
		got = ""
		if _, err := c.GetTask(ctx, ""); err == nil || got != "" {
			t.Fatalf("err=%v request %q", err, got)
		}
	})
}
