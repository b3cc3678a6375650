package meshd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/statedir"
	"github.com/agentmesh/agentmesh/shared/textlimit"
)

// DeadLetter is a parked event: one the handler failed for good (or that
// the mesh could only send as an undeliverable placeholder). It lives in
// its own file under DeadLetterDir until `meshd retry` handles it.
type DeadLetter struct {
	AgentID string `json:"agent_id"`
	Seq     int64  `json:"seq"`
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	From    string `json:"from"`
	TaskID  string `json:"task_id,omitempty"`
	// Reason is ReasonPermanent, ReasonExhausted or ReasonUndeliverable.
	Reason   string    `json:"reason"`
	Attempts int       `json:"attempts"`
	Error    string    `json:"error"`
	ParkedAt time.Time `json:"parked_at"`
	// Event is the envelope as the handler got it (body opened), so a retry
	// works after the inbox retention too.
	Event mesh.Envelope `json:"event"`
}

// DeadLetterDir is where agentID's parked events live under dir: one file
// per event, named by its seq.
func DeadLetterDir(dir, agentID string) string {
	return filepath.Join(dir, agentID+".deadletters")
}

func deadLetterName(seq int64) string { return fmt.Sprintf("%020d.json", seq) }

// saveDeadLetter writes dl atomically (one file, so parking costs the same
// however many are parked) and keeps at most max files, dropping the lowest
// seqs; it returns the seqs it dropped.
func saveDeadLetter(dir string, dl DeadLetter, max int) ([]int64, error) {
	if !mesh.ValidAgentID(dl.AgentID) {
		return nil, fmt.Errorf("meshd: invalid agent id %q", dl.AgentID)
	}
	data, err := json.Marshal(dl)
	if err != nil {
		return nil, err
	}
	ddir := DeadLetterDir(dir, dl.AgentID)
	if err := statedir.Put(ddir, deadLetterName(dl.Seq), data); err != nil {
		return nil, err
	}
	seqs, err := deadLetterSeqs(ddir)
	if err != nil || len(seqs) <= max {
		return nil, err
	}
	dropped := seqs[:len(seqs)-max]
	for _, seq := range dropped {
		if err := os.Remove(filepath.Join(ddir, deadLetterName(seq))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("meshd: drop dead letter %d: %w", seq, err)
		}
	}
	return dropped, nil
}

// deadLetterSeqs lists the parked seqs in ddir, ascending.
func deadLetterSeqs(ddir string) ([]int64, error) {
	entries, err := os.ReadDir(ddir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("meshd: read dead letters: %w", err)
	}
	var seqs []int64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(name, ".") {
			continue // temp files of an interrupted write
		}
		if seq, err := strconv.ParseInt(name, 10, 64); err == nil && seq > 0 {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}

// ListDeadLetters returns agentID's parked events under dir, by seq.
func ListDeadLetters(dir, agentID string) ([]DeadLetter, error) {
	if !mesh.ValidAgentID(agentID) {
		return nil, fmt.Errorf("meshd: invalid agent id %q", agentID)
	}
	seqs, err := deadLetterSeqs(DeadLetterDir(dir, agentID))
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, 0, len(seqs))
	for _, seq := range seqs {
		dl, err := LoadDeadLetter(dir, agentID, seq)
		if err != nil {
			return nil, err
		}
		out = append(out, dl)
	}
	return out, nil
}

// LoadDeadLetter reads agentID's parked event seq.
func LoadDeadLetter(dir, agentID string, seq int64) (DeadLetter, error) {
	var dl DeadLetter
	path := filepath.Join(DeadLetterDir(dir, agentID), deadLetterName(seq))
	found, err := ReadAgentFile("meshd", "dead letter", path, agentID, &dl, func() string { return dl.AgentID })
	if err != nil {
		return DeadLetter{}, err
	}
	if !found {
		return DeadLetter{}, fmt.Errorf("meshd: no parked event with seq %d for agent %q (see meshd deadletters)", seq, agentID)
	}
	if dl.Seq != seq {
		return DeadLetter{}, fmt.Errorf("meshd: dead letter %s holds seq %d", path, dl.Seq)
	}
	return dl, nil
}

// removeDeadLetter deletes a parked event; a missing one is not an error.
func removeDeadLetter(dir, agentID string, seq int64) error {
	err := os.Remove(filepath.Join(DeadLetterDir(dir, agentID), deadLetterName(seq)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("meshd: remove dead letter %d: %w", seq, err)
	}
	return nil
}

// StateAgents lists the agents with a state file or parked events under
// dir, so the CLI can pick the only one without asking the API.
func StateAgents(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("meshd: read state dir: %w", err)
	}
	var ids []string
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".state")
		if !ok {
			id, ok = strings.CutSuffix(e.Name(), ".state.json") // the old format, before its first run converts it
		}
		if !ok {
			id, ok = strings.CutSuffix(e.Name(), ".deadletters")
		}
		if ok && mesh.ValidAgentID(id) && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// RetryConfig is what RetryDeadLetter needs.
type RetryConfig struct {
	StateDir string
	AgentID  string
	Handler  Handler
	// API is optional: with it an undeliverable placeholder is read again
	// from the inbox API (the mesh may serve the event now).
	API   *meshclient.Client
	Log   *slog.Logger // default slog.Default()
	Clock mesh.Clock   // default mesh.SystemClock
}

// RetryDeadLetter runs parked event seq through the handler once. On
// success the dead letter is removed; on failure it stays, with the attempt
// counted and the new error. It holds the agent's state lock, so it never
// runs beside `meshd run` on the same state dir (the handler is never run
// concurrently). The task a park moved to failed stays failed.
func RetryDeadLetter(ctx context.Context, cfg RetryConfig, seq int64) error {
	if cfg.Handler == nil || cfg.StateDir == "" {
		return errors.New("meshd: RetryConfig needs Handler and StateDir")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = mesh.SystemClock
	}
	if c, ok := cfg.Handler.(Checker); ok {
		if err := c.Check(); err != nil {
			return err
		}
	}
	if _, err := LoadDeadLetter(cfg.StateDir, cfg.AgentID, seq); err != nil {
		return err // before the lock: "not parked" beats "meshd is running"
	}
	unlock, err := lockState(cfg.StateDir, cfg.AgentID)
	if err != nil {
		return fmt.Errorf("%w; stop it before retrying a parked event", err)
	}
	defer unlock()
	dl, err := LoadDeadLetter(cfg.StateDir, cfg.AgentID, seq) // as of now, under the lock
	if err != nil {
		return err
	}
	env := dl.Event
	if env.Type == mesh.EventUndeliverable {
		if cfg.API == nil {
			return fmt.Errorf("meshd: seq %d was undeliverable; retrying it reads it again from the inbox API, which needs MESH_API_KEY", seq)
		}
		page, err := cfg.API.Inbox(ctx, seq-1, 1, 0)
		if err != nil {
			return fmt.Errorf("meshd: read seq %d from the inbox API: %w", seq, err)
		}
		if len(page.Events) == 0 || page.Events[0].Seq != seq {
			return fmt.Errorf("meshd: the inbox API no longer holds seq %d", seq)
		}
		if env = page.Events[0]; env.Type == mesh.EventUndeliverable {
			return fmt.Errorf("meshd: the mesh still cannot serve seq %d", seq)
		}
	}
	began := cfg.Clock()
	herr := callHandler(context.WithoutCancel(ctx), cfg.Handler, env)
	log := cfg.Log.With("agent_id", cfg.AgentID, "seq", seq, "task_id", env.TaskID)
	if herr == nil {
		if err := removeDeadLetter(cfg.StateDir, cfg.AgentID, seq); err != nil {
			return err
		}
		log.Info("parked event handled", "duration_ms", cfg.Clock().Sub(began).Milliseconds())
		return nil
	}
	dl.Attempts++
	dl.Error = textlimit.Truncate(herr.Error(), maxErrorText)
	data, err := json.Marshal(dl)
	if err != nil {
		return err
	}
	if err := statedir.Put(DeadLetterDir(cfg.StateDir, cfg.AgentID), deadLetterName(seq), data); err != nil {
		return err
	}
	return fmt.Errorf("meshd: seq %d failed again (it stays parked): %w", seq, herr)
}
