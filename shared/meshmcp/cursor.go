package meshmcp

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/statedir"
)

// Cursor is the MCP reader's persisted position in the agent's inbox: every
// event with seq ≤ AckedSeq was acknowledged by the agent (mesh_ack) and is
// never returned by mesh_check_inbox again. It lives next to meshd run's
// state but in its own file, so the two readers never move each other.
type Cursor struct {
	AgentID   string    `json:"agent_id"`
	AckedSeq  int64     `json:"acked_seq"`
	UpdatedAt time.Time `json:"updated_at"`
}

// CursorPath is where the MCP cursor of agentID lives under dir.
func CursorPath(dir, agentID string) string {
	return filepath.Join(dir, agentID+".mcp.state.json")
}

// LoadCursor reads the cursor of agentID from dir. A missing file is a fresh
// cursor (nothing acknowledged); a corrupt file or one of another agent is
// an error, never silently reset, because resetting would hand the agent
// everything again.
func LoadCursor(dir, agentID string) (Cursor, error) {
	var c Cursor
	path := CursorPath(dir, agentID)
	found, err := meshd.ReadAgentFile("meshmcp", "cursor", path, agentID, &c, func() string { return c.AgentID })
	if err != nil {
		return Cursor{}, err
	}
	if !found {
		return Cursor{AgentID: agentID}, nil
	}
	if c.AckedSeq < 0 {
		return Cursor{}, fmt.Errorf("meshmcp: cursor file %s holds an impossible acked_seq %d", path, c.AckedSeq)
	}
	return c, nil
}

// SaveCursor writes c to dir atomically (temp file, fsync, rename, fsync
// the directory), like meshd's state: a crash leaves the old or the new
// cursor, never a torn one.
func SaveCursor(dir string, c Cursor) error {
	if !mesh.ValidAgentID(c.AgentID) {
		return fmt.Errorf("meshmcp: invalid agent id %q", c.AgentID)
	}
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return statedir.Put(dir, filepath.Base(CursorPath(dir, c.AgentID)), data)
}

// advanceCursor moves the persisted cursor of agentID to seq unless it is
// already there or beyond, and returns the cursor now on disk. It holds the
// cursor's file lock across read-modify-write, so two MCP servers of one
// agent (two client sessions) share one cursor and it never moves back.
func advanceCursor(dir, agentID string, seq int64, now time.Time) (Cursor, error) {
	if !mesh.ValidAgentID(agentID) { // it names the lock file
		return Cursor{}, fmt.Errorf("meshmcp: invalid agent id %q", agentID)
	}
	// Waiting is right here: another holder keeps the lock for one
	// read-modify-write only. The OS drops it if that process dies.
	unlock, err := statedir.LockWait(filepath.Join(dir, agentID+".mcp.lock"))
	if err != nil {
		return Cursor{}, fmt.Errorf("meshmcp: %w", err)
	}
	defer unlock()
	c, err := LoadCursor(dir, agentID)
	if err != nil {
		return Cursor{}, err
	}
	if seq <= c.AckedSeq {
		return c, nil
	}
	c.AckedSeq, c.UpdatedAt = seq, now.UTC()
	if err := SaveCursor(dir, c); err != nil {
		return Cursor{}, err
	}
	return c, nil
}
