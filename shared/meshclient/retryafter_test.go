package meshclient_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/meshclient"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, header string
		want         time.Duration
	}{
		{"seconds are read", "7", 7 * time.Second},
		{"an HTTP date is read as the time until it", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{"a date in the past asks for no wait", now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"an absent header asks for no wait", "", 0},
		{"a malformed header asks for no wait", "soon", 0},
		{"a negative number asks for no wait", "-5", 0},
		{"an absurd number is bounded", "99999999999999999", meshclient.MaxRetryAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := meshclient.ParseRetryAfter(tc.header, now); got != tc.want {
				t.Errorf("Retry-After %q read as %v, want %v", tc.header, got, tc.want)
			}
		})
	}
}
