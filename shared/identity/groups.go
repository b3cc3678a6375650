package identity

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// Group roles. The owner (exactly one) may add members and admins and remove
// anyone; an admin may add and remove plain members; a member may only leave.
const (
	RoleOwner  = "owner"
	RoleAdmin  = "admin"
	RoleMember = "member"
)

// Group is a group as one of its members sees it (Role, the caller's role,
// is empty in admin answers).
type Group = api.Group

// Member is one entry of a roster: role and presence.
type Member = api.Member

// Membership is the answer to adding a member.
type Membership = api.Membership

var (
	errGroupNotFound  = mesh.Errorf(mesh.KindNotFound, "group_not_found", "no such group, or you are not a member")
	errMemberNotFound = mesh.Errorf(mesh.KindNotFound, "member_not_found", "that agent is not a member of the group")
	errNotGroupAdmin  = mesh.Errorf(mesh.KindForbidden, "not_group_admin", "only the group's owner or an admin may do this")
)

// ValidGroupID reports whether id can be a group id: the same pattern as agent
// ids (generated ids are "grp_" and 24 hex digits).
func ValidGroupID(id string) bool { return mesh.ValidAgentID(id) }

func newGroupID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "grp_" + hex.EncodeToString(b)
}

// newContextID returns a random UUID (v4): the A2A context shared by every
// task of the group's fan-outs.
func newContextID() string { return uuid.NewString() }

// insertGroup writes the group and its owner's membership.
func insertGroup(ctx context.Context, tx *sql.Tx, g Group) error {
	if _, err := tx.ExecContext(ctx, "INSERT INTO mesh_groups (group_id, name, owner_id, context_id, created_at) VALUES (?, ?, ?, ?, ?)",
		g.GroupID, g.Name, g.Owner, g.ContextID, g.CreatedAt); err != nil {
		if mysql.IsDuplicate(err) {
			return mesh.Errorf(mesh.KindConflict, "group_exists", "group %q already exists", g.GroupID)
		}
		return err
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO group_members (group_id, agent_id, role, joined_at) VALUES (?, ?, 'owner', ?)", g.GroupID, g.Owner, g.CreatedAt)
	return err
}

// CreateGroup creates a group owned by caller. It gets a fresh id and a fresh
// context_id.
func (s *Service) CreateGroup(ctx context.Context, caller, name string) (Group, error) {
	if err := validName(name); err != nil {
		return Group{}, err
	}
	now := s.Now()
	g := Group{GroupID: newGroupID(), Name: name, Owner: caller, ContextID: newContextID(), Role: RoleOwner, MemberCount: 1, CreatedAt: now}
	err := s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if err := TakeRate(ctx, tx, caller, now); err != nil {
			return err
		}
		if err := insertGroup(ctx, tx, g); err != nil {
			return err
		}
		return Audit(ctx, tx, agentActor(caller), now, AuditGroupCreated, caller, g.GroupID, auditDetail("group %s (%s), owner %s", g.GroupID, g.Name, caller))
	})
	return g, err
}

// ListGroups returns a page of the groups agentID belongs to, by group id.
func (s *Service) ListGroups(ctx context.Context, agentID string, p Page) (api.GroupPage, error) {
	if err := s.takeReadRate(ctx, agentID); err != nil {
		return api.GroupPage{}, err
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT g.group_id, g.name, g.owner_id, g.context_id, m.role,
  (SELECT COUNT(*) FROM group_members c WHERE c.group_id = g.group_id), g.created_at
FROM group_members m JOIN mesh_groups g ON g.group_id = m.group_id
WHERE m.agent_id = ? AND m.group_id > ? ORDER BY m.group_id LIMIT ?`, agentID, p.After, p.Limit+1)
	if err != nil {
		return api.GroupPage{}, err
	}
	defer rows.Close()
	list := []Group{}
	for rows.Next() {
		var g Group
		if err := rows.Scan(&g.GroupID, &g.Name, &g.Owner, &g.ContextID, &g.Role, &g.MemberCount, &g.CreatedAt); err != nil {
			return api.GroupPage{}, err
		}
		list = append(list, g)
	}
	if err := rows.Err(); err != nil {
		return api.GroupPage{}, err
	}
	list, next := cutPage(list, p.Limit, func(x Group) string { return x.GroupID })
	return api.GroupPage{Groups: list, NextAfter: next}, nil
}

// Roster is a group with a page of its members. Its own Role (the caller's,
// always present) stands in for the embedded Group's.
type Roster = api.Roster

// GetRoster returns the group and a page of its members with roles and
// presence, ordered by agent id. Only members may read it; for anyone else
// the group does not exist.
func (s *Service) GetRoster(ctx context.Context, caller, groupID string, p Page) (Roster, error) {
	if err := s.takeReadRate(ctx, caller); err != nil {
		return Roster{}, err
	}
	var r Roster
	if !ValidGroupID(groupID) {
		return r, errGroupNotFound
	}
	// One statement: the group row only if the caller is a member. The
	// caller's role goes to the roster's own Role (always answered), not the
	// embedded Group's.
	err := s.DB.QueryRowContext(ctx, `SELECT g.group_id, g.name, g.owner_id, g.context_id, m.role,
  (SELECT COUNT(*) FROM group_members c WHERE c.group_id = g.group_id), g.created_at
FROM mesh_groups g JOIN group_members m ON m.group_id = g.group_id AND m.agent_id = ?
WHERE g.group_id = ?`, caller, groupID).Scan(&r.GroupID, &r.Name, &r.Owner, &r.ContextID, &r.Role, &r.MemberCount, &r.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return r, errGroupNotFound
	}
	if err != nil {
		return r, err
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT a.agent_id, a.name, a.status, a.last_heartbeat_at, m.role, m.joined_at
FROM group_members m JOIN agents a ON a.agent_id = m.agent_id
WHERE m.group_id = ? AND m.agent_id > ? ORDER BY m.agent_id LIMIT ?`, groupID, p.After, p.Limit+1)
	if err != nil {
		return r, err
	}
	defer rows.Close()
	r.Members = []Member{}
	for rows.Next() {
		var m Member
		var hb sql.NullTime
		if err := rows.Scan(&m.AgentID, &m.Name, &m.Status, &hb, &m.Role, &m.JoinedAt); err != nil {
			return r, err
		}
		m.LastHeartbeatAt = timePtr(hb)
		r.Members = append(r.Members, m)
	}
	if err := rows.Err(); err != nil {
		return r, err
	}
	r.Members, r.NextAfter = cutPage(r.Members, p.Limit, func(m Member) string { return m.AgentID })
	return r, nil
}

func validRole(role string) (string, error) {
	switch role {
	case "":
		return RoleMember, nil
	case RoleMember, RoleAdmin:
		return role, nil
	}
	return "", mesh.Errorf(mesh.KindUnprocessable, "invalid_role", "role must be member or admin")
}

// memberRole reads agentID's role in groupID with a shared lock, so the
// membership a decision rests on cannot change before the transaction ends.
// ok is false if agentID is not a member.
func memberRole(ctx context.Context, tx *sql.Tx, groupID, agentID string) (role string, joined time.Time, ok bool, err error) {
	err = tx.QueryRowContext(ctx, "SELECT role, joined_at FROM group_members WHERE group_id = ? AND agent_id = ? LOCK IN SHARE MODE", groupID, agentID).Scan(&role, &joined)
	if errors.Is(err, sql.ErrNoRows) {
		return "", time.Time{}, false, nil
	}
	return role, joined, err == nil, err
}

// AddGroupMember adds agentID to groupID on behalf of caller, who must be its
// owner or an admin; the added agent must be the caller's friend. Only the
// owner may add admins. Adding an existing member changes nothing and
// answers its current membership (created = false).
func (s *Service) AddGroupMember(ctx context.Context, caller, groupID, agentID, role string) (m Membership, created bool, err error) {
	if role, err = validMembership(groupID, agentID, role); err != nil {
		return m, false, err
	}
	now := s.Now()
	m = Membership{GroupID: groupID, AgentID: agentID}
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		created = false
		if err := TakeRate(ctx, tx, caller, now); err != nil {
			return err
		}
		callerRole, _, ok, err := memberRole(ctx, tx, groupID, caller)
		if err != nil {
			return err
		}
		if !ok {
			return errGroupNotFound
		}
		if callerRole != RoleOwner && callerRole != RoleAdmin {
			return errNotGroupAdmin
		}
		if role == RoleAdmin && callerRole != RoleOwner {
			return mesh.Errorf(mesh.KindForbidden, "role_not_allowed", "only the owner may add admins")
		}
		if existing, joined, ok, err := memberRole(ctx, tx, groupID, agentID); err != nil || ok {
			m.Role, m.JoinedAt = existing, joined
			return err
		}
		// The friendship row is share-locked too: an unfriend racing this
		// add waits for it (or this add sees no friendship).
		var friend bool
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) > 0 FROM friendships WHERE agent_id = ? AND friend_id = ? LOCK IN SHARE MODE", caller, agentID).Scan(&friend); err != nil {
			return err
		}
		if !friend {
			return mesh.Errorf(mesh.KindForbidden, "not_a_friend", "you can only add your friends to a group")
		}
		return addMember(ctx, tx, agentActor(caller), &m, &created, role, now)
	})
	return m, created, err
}

// RemoveGroupMember removes target from groupID on behalf of caller. A
// member may remove itself (leave). The owner may remove anyone; an admin only
// plain members. When the owner leaves, ownership passes to the
// longest-standing admin, else the longest-standing member; a group whose
// last member leaves is deleted.
func (s *Service) RemoveGroupMember(ctx context.Context, caller, groupID, target string) error {
	if !ValidGroupID(groupID) {
		return errGroupNotFound
	}
	if !mesh.ValidAgentID(target) {
		return errMemberNotFound
	}
	now := s.Now()
	return s.DB.InTx(ctx, func(tx *sql.Tx) error {
		if err := TakeRate(ctx, tx, caller, now); err != nil {
			return err
		}
		// Both membership rows, locked in key order.
		rows, err := tx.QueryContext(ctx, "SELECT agent_id, role FROM group_members WHERE group_id = ? AND agent_id IN (?, ?) ORDER BY agent_id FOR UPDATE", groupID, caller, target)
		if err != nil {
			return err
		}
		roles := map[string]string{}
		for rows.Next() {
			var id, role string
			if err := rows.Scan(&id, &role); err != nil {
				rows.Close()
				return err
			}
			roles[id] = role
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		callerRole, ok := roles[caller]
		if !ok {
			return errGroupNotFound
		}
		targetRole, ok := roles[target]
		if !ok {
			return errMemberNotFound
		}
		if target != caller {
			switch {
			case callerRole == RoleOwner:
			case callerRole == RoleAdmin && targetRole == RoleMember:
			default:
				return errNotGroupAdmin
			}
		}
		if targetRole == RoleOwner {
			if err := handOver(ctx, tx, groupID, target); err != nil {
				return err
			}
		}
		if _, err = tx.ExecContext(ctx, "DELETE FROM group_members WHERE group_id = ? AND agent_id = ?", groupID, target); err != nil {
			return err
		}
		return Audit(ctx, tx, agentActor(caller), now, AuditGroupMemberRemoved, target, groupID, auditDetail("%s left group %s (removed by %s)", target, groupID, caller))
	})
}

// HandOverGroup is handOver for an owner being deleted (package accounts),
// inside the deletion's transaction tx.
func HandOverGroup(ctx context.Context, tx *sql.Tx, groupID, owner string) error {
	return handOver(ctx, tx, groupID, owner)
}

// handOver passes ownership of groupID from the leaving owner to the
// longest-standing admin, else member, or deletes the group if none is left.
func handOver(ctx context.Context, tx *sql.Tx, groupID, owner string) error {
	var next string
	err := tx.QueryRowContext(ctx, `SELECT agent_id FROM group_members WHERE group_id = ? AND agent_id <> ?
ORDER BY CASE role WHEN 'admin' THEN 0 ELSE 1 END, joined_at, agent_id LIMIT 1 FOR UPDATE`, groupID, owner).Scan(&next)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = tx.ExecContext(ctx, "DELETE FROM mesh_groups WHERE group_id = ?", groupID)
		return err
	}
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE group_members SET role = 'owner' WHERE group_id = ? AND agent_id = ?", groupID, next); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, "UPDATE mesh_groups SET owner_id = ? WHERE group_id = ?", next, groupID)
	return err
}

// AdminGroupInput creates a group on an operator's behalf.
type AdminGroupInput = api.AdminGroupRequest

// AdminCreateGroup creates a group with an owner and optional members.
func (s *Service) AdminCreateGroup(ctx context.Context, in AdminGroupInput) (Group, error) {
	if in.GroupID != "" && !ValidGroupID(in.GroupID) {
		return Group{}, mesh.Errorf(mesh.KindUnprocessable, "invalid_group_id", "group_id must match %s", mesh.AgentIDPattern)
	}
	if err := validName(in.Name); err != nil {
		return Group{}, err
	}
	if !mesh.ValidAgentID(in.Owner) {
		return Group{}, errInvalidAgentID("owner")
	}
	members := []string{}
	seen := map[string]bool{in.Owner: true}
	for _, m := range in.Members {
		if !mesh.ValidAgentID(m) {
			return Group{}, errInvalidAgentID("members")
		}
		if !seen[m] {
			seen[m] = true
			members = append(members, m)
		}
	}
	if len(members) > 1000 {
		return Group{}, mesh.Errorf(mesh.KindUnprocessable, "too_many_members", "at most 1000 members at creation; add more afterwards")
	}
	if in.GroupID == "" {
		in.GroupID = newGroupID()
	}
	now := s.Now()
	g := Group{GroupID: in.GroupID, Name: in.Name, Owner: in.Owner, ContextID: newContextID(), MemberCount: 1 + len(members), CreatedAt: now}
	err := s.DB.InTx(ctx, func(tx *sql.Tx) error {
		for _, id := range append([]string{in.Owner}, members...) {
			if err := agentExists(ctx, tx, id); err != nil {
				return err
			}
		}
		if err := insertGroup(ctx, tx, g); err != nil {
			return err
		}
		for _, m := range members {
			if _, err := tx.ExecContext(ctx, "INSERT INTO group_members (group_id, agent_id, role, joined_at) VALUES (?, ?, 'member', ?)", g.GroupID, m, now); err != nil {
				return err
			}
			if err := Audit(ctx, tx, AdminActor, now, AuditGroupMemberAdded, m, g.GroupID, auditDetail("%s joined group %s as member", m, g.GroupID)); err != nil {
				return err
			}
		}
		return Audit(ctx, tx, AdminActor, now, AuditGroupCreated, g.Owner, g.GroupID, auditDetail("group %s (%s), owner %s", g.GroupID, g.Name, g.Owner))
	})
	return g, err
}

func agentExists(ctx context.Context, tx *sql.Tx, id string) error {
	var ok bool
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) > 0 FROM agents WHERE agent_id = ? LOCK IN SHARE MODE", id).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return mesh.Errorf(mesh.KindNotFound, "agent_not_found", "no agent %q", id)
	}
	return nil
}

// AdminAddGroupMember adds agentID to groupID with role (member or admin)
// without the friendship rule. An existing member is left as is
// (created = false).
func (s *Service) AdminAddGroupMember(ctx context.Context, groupID, agentID, role string) (m Membership, created bool, err error) {
	if role, err = validMembership(groupID, agentID, role); err != nil {
		return m, false, err
	}
	now := s.Now()
	m = Membership{GroupID: groupID, AgentID: agentID}
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		created = false
		var exists bool
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) > 0 FROM mesh_groups WHERE group_id = ? LOCK IN SHARE MODE", groupID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return mesh.Errorf(mesh.KindNotFound, "group_not_found", "no such group")
		}
		if err := agentExists(ctx, tx, agentID); err != nil {
			return err
		}
		if existing, joined, ok, err := memberRole(ctx, tx, groupID, agentID); err != nil || ok {
			m.Role, m.JoinedAt = existing, joined
			return err
		}
		return addMember(ctx, tx, AdminActor, &m, &created, role, now)
	})
	return m, created, err
}

// addMember inserts m's membership. A concurrent add of the same agent that
// committed first is a duplicate key: the fresh locking read then answers
// that membership instead.
func addMember(ctx context.Context, tx *sql.Tx, by Actor, m *Membership, created *bool, role string, now time.Time) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO group_members (group_id, agent_id, role, joined_at) VALUES (?, ?, ?, ?)", m.GroupID, m.AgentID, role, now)
	if mysql.IsDuplicate(err) {
		var ok bool
		m.Role, m.JoinedAt, ok, err = memberRole(ctx, tx, m.GroupID, m.AgentID)
		if err == nil && !ok {
			err = errors.New("identity: membership vanished after a duplicate key")
		}
		return err
	}
	if err != nil {
		return err
	}
	m.Role, m.JoinedAt, *created = role, now, true
	return Audit(ctx, tx, by, now, AuditGroupMemberAdded, m.AgentID, m.GroupID, auditDetail("%s joined group %s as %s", m.AgentID, m.GroupID, role))
}

// validMembership checks the input of both add-member routes and returns the
// role with its default applied.
func validMembership(groupID, agentID, role string) (string, error) {
	if !ValidGroupID(groupID) {
		return "", errGroupNotFound
	}
	if !mesh.ValidAgentID(agentID) {
		return "", errInvalidAgentID("agent_id")
	}
	return validRole(role)
}
