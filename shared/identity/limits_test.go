package identity_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// TestEveryReadSpendsTheCallersRateBudget: the rate limit lives in the
// domain, for reads as for writes, so no adapter can serve a read for free.
func TestEveryReadSpendsTheCallersRateBudget(t *testing.T) {
	s, clock, _ := identitytest.NewService(t)
	ctx := context.Background()
	identitytest.NewAgent(t, s, "reader")
	identitytest.NewAgent(t, s, "other")
	g, err := s.CreateGroup(ctx, "reader", "g")
	if err != nil {
		t.Fatal(err)
	}
	page := identity.Page{Limit: 10}
	for _, r := range []struct {
		name string
		read func() error
	}{
		{"GetMe", func() error { _, err := s.GetMe(ctx, "reader"); return err }},
		{"GetAgent", func() error { _, err := s.GetAgent(ctx, "reader", "other"); return err }},
		{"ListFriendRequests", func() error { _, err := s.ListFriendRequests(ctx, "reader", true, true); return err }},
		{"ListFriends", func() error { _, err := s.ListFriends(ctx, "reader", page); return err }},
		{"ListBlocks", func() error { _, err := s.ListBlocks(ctx, "reader", page); return err }},
		{"ListGroups", func() error { _, err := s.ListGroups(ctx, "reader", page); return err }},
		{"GetRoster", func() error { _, err := s.GetRoster(ctx, "reader", g.GroupID, page); return err }},
	} {
		t.Run(r.name+" is refused once the caller's budget is spent", func(t *testing.T) {
			// The whole burst spent: the theoretical arrival time is 10 s ahead.
			if _, err := s.DB.Exec("UPDATE rate_limits SET tat_us = ? WHERE agent_id = ?", clock.Now().Add(10*time.Second).UnixMicro(), "reader"); err != nil {
				t.Fatal(err)
			}
			var me *mesh.Error
			if err := r.read(); !errors.As(err, &me) || me.Code != "rate_limited" {
				t.Fatalf("%s with the budget spent = %v, want rate_limited", r.name, err)
			}
		})
	}
}

// TestALongMultiByteGroupNameIsAuditedNotRefused: the audit row's detail
// (a VARCHAR(500) of utf8mb4) holds the group's name; cutting it at a byte
// inside a character made strict mode refuse the row, and with it the
// group, as a 5xx for a valid request.
func TestALongMultiByteGroupNameIsAuditedNotRefused(t *testing.T) {
	s, _, _ := identitytest.NewService(t)
	identitytest.NewAgent(t, s, "owner-cjk")
	name := strings.Repeat("漢", 200) // 200 characters, 600 bytes
	g, err := s.CreateGroup(context.Background(), "owner-cjk", name)
	if err != nil {
		t.Fatalf("CreateGroup with a 200-character CJK name: %v", err)
	}
	var detail string
	if err := s.DB.QueryRow("SELECT detail FROM audit_log WHERE agent_id = ? AND detail LIKE ?", "owner-cjk", "%"+g.GroupID+"%").Scan(&detail); err != nil {
		t.Fatalf("the audit row: %v", err)
	}
	if len(detail) > 500 || !strings.Contains(detail, "漢") {
		t.Fatalf("audit detail is %d bytes: %q", len(detail), detail)
	}
}
