package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/meshd"
)

func TestStatusShowsTheEventsTheAgentLost(t *testing.T) {
	// An API that does not answer (a 404, not retried): status still
	// reads the loss from the state.
	api := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(api.Close)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name string
		lost meshd.LostEvents
		want string // "" : no lost line
	}{
		{"a loss in the state is shown with its count and first seq", meshd.LostEvents{FromSeq: 4, ToSeq: 6, Total: 5, At: at},
			"lost      3 events from seq 4 (seq 4-6 expired before they were handled, 2026-01-02T03:04:05Z; 5 in all)"},
		{"no loss shows no lost line", meshd.LostEvents{}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := meshd.SaveState(dir, meshd.State{AgentID: "bob", LastSeq: 9, Offset: -1, Lost: c.lost}); err != nil {
				t.Fatal(err)
			}
			e := env(map[string]string{"HOME": t.TempDir(), "MESH_STATE_DIR": dir, "MESH_API_URL": api.URL, "MESH_API_KEY": "amk_k_v"})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			if code := cli(ctx, []string{"status"}, e, strings.NewReader(""), &stdout, &stderr); code != 0 {
				t.Fatalf("status: exit %d: %s", code, stderr.String())
			}
			if got := strings.Contains(stdout.String(), "lost "); got != (c.want != "") || !strings.Contains(stdout.String(), c.want) {
				t.Errorf("status says:\n%s\nwant the line %q", stdout.String(), c.want)
			}
			stdout.Reset()
			if code := cli(ctx, []string{"status", "--json"}, e, strings.NewReader(""), &stdout, &stderr); code != 0 {
				t.Fatalf("status --json: exit %d: %s", code, stderr.String())
			}
			var st daemonStatus
			if err := json.Unmarshal(stdout.Bytes(), &st); err != nil {
				t.Fatal(err)
			}
			if (st.Lost != nil) != (c.lost.Total > 0) || (st.Lost != nil && *st.Lost != c.lost) {
				t.Errorf("status --json lost %+v, want %+v", st.Lost, c.lost)
			}
		})
	}
}
