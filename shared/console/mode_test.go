package console

import (
	"encoding/json"
	"testing"
)

func TestTheAgentsPageShowsTheDeliveryModeTheHeartbeatReports(t *testing.T) {
	for _, tc := range []struct {
		name, stats, want string
	}{
		{"a push host reads push", `{"mode":"push","last_seq":3}`, "push"},
		{"a heartbeat without a mode shows none", `{"last_seq":3}`, ""},
		{"no stats at all show none", ``, ""},
		{"a mode that is not a short plain word is not shown", `{"mode":"<b>push</b>"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deliveryMode(json.RawMessage(tc.stats)); got != tc.want {
				t.Errorf("deliveryMode(%s) = %q, want %q", tc.stats, got, tc.want)
			}
		})
	}
}
