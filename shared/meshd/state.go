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
// completed and the Kafka position it had consumed. It is made durable
// after every handled event (one write and one fdatasync of a checksummed
// slot, see stateFile), so a crash never runs a handler twice for an event
// it had marked.
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
	// Lost is the latest loss: events that expired from the outbox (and
	// from Kafka) before they were handled. Zero when none was ever lost.
	Lost LostEvents `json:"lost,omitzero"`
}

// LostEvents says which events the agent can never get: seqs FromSeq to
// ToSeq of its stream expired from the mesh's retention before meshd
// handled them. meshd logs it, keeps it in the state (meshd status), and
// reports it in its heartbeats (the console).
type LostEvents struct {
	FromSeq int64 `json:"from_seq"`
	ToSeq   int64 `json:"to_seq"`
	// Total counts every event lost so far, this loss included.
	Total int64     `json:"total"`
	At    time.Time `json:"at"`
}

// Count is the number of events of the latest loss.
func (l LostEvents) Count() int64 {
	if l.FromSeq <= 0 || l.ToSeq < l.FromSeq { // none (seqs start at 1)
		return 0
	}
	return l.ToSeq - l.FromSeq + 1
}

// StatePath is where the state of agentID lives under dir. The old JSON
// state (<agent>.state.json) is converted into it on the first run.
func StatePath(dir, agentID string) string {
	return filepath.Join(dir, agentID+".state")
}

// StateExists reports whether dir holds a state of agentID, in either
// format.
func StateExists(dir, agentID string) (bool, error) {
	for _, p := range []string{StatePath(dir, agentID), legacyStatePath(dir, agentID)} {
		_, err := os.Stat(p)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
	}
	return false, nil
}

// LoadState reads the state of agentID from dir without changing anything
// (meshd status reads it while a run holds the lock). A missing file is a
// fresh state (nothing handled yet); a file that is unreadable, corrupt in
// both slots or belongs to another agent is an error, never silently reset,
// because resetting would run the handler again for everything. An
// old-format file is read as it is; the next run converts it.
func LoadState(dir, agentID string) (State, error) {
	if !mesh.ValidAgentID(agentID) {
		return State{}, fmt.Errorf("meshd: invalid agent id %q", agentID)
	}
	path := StatePath(dir, agentID)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		s, _, err := loadLegacyState(dir, agentID)
		return s, err
	}
	if err != nil {
		return State{}, fmt.Errorf("meshd: read state: %w", err)
	}
	defer f.Close()
	s, _, _, err := readStateSlots(f, path, agentID)
	return s, err
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

// SaveState writes s into dir durably: opened (an old-format file
// converted), saved, closed. For the CLI, which changes the state once; a run
// keeps its stateFile open instead. The caller must not race a run (the
// run's state lock).
func SaveState(dir string, s State) error {
	sf, _, err := openStateFile(dir, s.AgentID)
	if err != nil {
		return err
	}
	if err := sf.Save(s); err != nil {
		_ = sf.Close()
		return err
	}
	return sf.Close()
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
