package meshd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/statedir"
)

// State is what meshd remembers between runs: the highest seq its handler
// completed and the Kafka position it had consumed. It is written atomically
// after every handled event, so a crash never runs a handler twice for an
// event it had marked.
type State struct {
	AgentID string `json:"agent_id"`
	// LastSeq is the highest seq handled; every seq ≤ LastSeq is done.
	LastSeq int64 `json:"last_seq"`
	// LastAt is the occurred_at of event LastSeq: a restart finds the
	// matching Kafka position from it when Offset does not cover LastSeq
	// (events handled through the inbox API).
	LastAt time.Time `json:"last_at,omitzero"`
	// Offset is the Kafka offset of the last record consumed from
	// Topic/Partition (handled or skipped); -1 when none.
	Offset    int64     `json:"offset"`
	Topic     string    `json:"topic,omitempty"`
	Partition int32     `json:"partition"`
	UpdatedAt time.Time `json:"updated_at"`
}

// StatePath is where the state of agentID lives under dir.
func StatePath(dir, agentID string) string {
	return filepath.Join(dir, agentID+".state.json")
}

// LoadState reads the state of agentID from dir. A missing file is a fresh
// state (nothing handled yet); a file that is unreadable, corrupt or belongs
// to another agent is an error, never silently reset, because resetting
// would run the handler again for everything.
func LoadState(dir, agentID string) (State, error) {
	var s State
	path := StatePath(dir, agentID)
	found, err := ReadAgentFile("meshd", "state", path, agentID, &s, func() string { return s.AgentID })
	if err != nil {
		return State{}, err
	}
	if !found {
		return State{AgentID: agentID, Offset: -1}, nil
	}
	if s.LastSeq < 0 || s.Offset < -1 {
		return State{}, fmt.Errorf("meshd: state file %s holds impossible values (last_seq %d, offset %d)", path, s.LastSeq, s.Offset)
	}
	return s, nil
}

// ReadAgentFile reads the per-agent JSON file at path into v, for meshd's
// state and the MCP cursor alike. A missing file is found=false with no
// error (the caller starts fresh); an unreadable or corrupt file, or one whose
// owner (read from v after decoding) is not agentID, is an error naming the
// file, never a silent reset, because a reset would hand the agent
// everything again. pkg and noun name the caller in errors ("meshd",
// "state"); the caller checks its own fields' ranges afterwards.
func ReadAgentFile(pkg, noun, path, agentID string, v any, owner func() string) (found bool, err error) {
	if !mesh.ValidAgentID(agentID) {
		return false, fmt.Errorf("%s: invalid agent id %q", pkg, agentID)
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: read %s: %w", pkg, noun, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%s: %s file %s is corrupt (%v); move it away to start over", pkg, noun, path, err)
	}
	if got := owner(); got != agentID {
		return false, fmt.Errorf("%s: %s file %s belongs to agent %q, not %q", pkg, noun, path, got, agentID)
	}
	return true, nil
}

// SaveState writes s to dir atomically (statedir.Put): a reader, or
// a restart after a crash at any point, sees either the old or the new
// state, never a torn one.
func SaveState(dir string, s State) error {
	if !mesh.ValidAgentID(s.AgentID) {
		return fmt.Errorf("meshd: invalid agent id %q", s.AgentID)
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := statedir.Put(dir, filepath.Base(StatePath(dir, s.AgentID)), data); err != nil {
		return fmt.Errorf("meshd: %w", err)
	}
	return nil
}

// lockState takes an exclusive lock on the agent's state so two meshd
// processes never consume for one agent from one state dir (each would run
// the handler for the same events). The OS drops the lock if the process
// dies; flock works on every OS meshd builds for. dir is made (0700) when
// missing.
func lockState(dir, agentID string) (func(), error) {
	if !mesh.ValidAgentID(agentID) { // it names the lock file
		return nil, fmt.Errorf("meshd: invalid agent id %q", agentID)
	}
	unlock, err := statedir.Lock(filepath.Join(dir, agentID+".lock"))
	if errors.Is(err, statedir.ErrLocked) {
		return nil, fmt.Errorf("meshd: another meshd is already running for agent %q with state dir %s", agentID, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("meshd: %w", err)
	}
	return unlock, nil
}
