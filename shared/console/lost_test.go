package console

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/shared/accounts"
)

func TestTheAgentsPageShowsTheEventsAnAgentLost(t *testing.T) {
	for _, tc := range []struct {
		name, stats, want string
	}{
		{"a loss meshd reports is shown with its count and first seq",
			`{"last_seq":9,"lost":{"events":3,"from_seq":4,"to_seq":6,"total":5,"at":"2026-01-02T03:04:05Z"}}`, "lost 3 events from seq 4"},
		{"a heartbeat without a loss shows none", `{"last_seq":9,"mode":"kafka"}`, ""},
		{"no stats at all show none", ``, ""},
		{"numbers that do not add up are not shown", `{"lost":{"events":3,"from_seq":4,"to_seq":9,"total":3}}`, ""},
		{"a loss that is not an object is not shown", `{"lost":"<b>many</b>"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(nil, nil)
			agents := []accounts.AgentView{{AgentID: "bob", Status: "active", Stats: json.RawMessage(tc.stats)}}
			resp := c.render(http.StatusOK, "agents.html", page{Data: map[string]any{"Agents": agents, "Cards": map[string]any{}}})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, resp.Body)
			}
			shown := strings.Contains(resp.Body, `class="lost"`)
			if tc.want == "" && shown {
				t.Errorf("a loss is shown for stats %s", tc.stats)
			}
			if tc.want != "" && !strings.Contains(resp.Body, tc.want) {
				t.Errorf("the page does not say %q for stats %s", tc.want, tc.stats)
			}
		})
	}
}
