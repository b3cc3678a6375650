package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/agentmesh/agentmesh/shared/statedir"
)

// The demo agents' API keys are kept in the local state directory between
// runs of one local mesh (mode 0600, like secrets.json), so the keys a
// developer exported or put in an MCP config keep working after a restart
// of make run. A stored key the mesh no longer accepts (another database,
// a revoked key) is replaced by a fresh one.

const demoKeysFile = "demo-keys.json"

// loadDemoKeys reads the stored keys (agent id → API key); a missing or
// unreadable file is no keys: the demo then rotates them as before.
func loadDemoKeys(dir string) map[string]string {
	keys := map[string]string{}
	b, err := os.ReadFile(filepath.Join(dir, demoKeysFile))
	if err != nil || json.Unmarshal(b, &keys) != nil {
		return map[string]string{}
	}
	return keys
}

// saveDemoKeys stores keys with mode 0600 from the first byte.
func saveDemoKeys(dir string, keys map[string]string) error {
	b, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	if err := statedir.WriteFile(filepath.Join(dir, demoKeysFile), b, 0o600); err != nil {
		return fmt.Errorf("storing the demo keys: %w", err)
	}
	return nil
}

// keyWorks reports whether the mesh exchanges key for a token of agent.
func (d *demo) keyWorks(ctx context.Context, agent, key string) bool {
	if key == "" {
		return false
	}
	b, _ := json.Marshal(map[string]string{"api_key": key})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+"/v1/auth/token", bytes.NewReader(b))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.http.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var tok struct {
		AgentID string `json:"agent_id"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&tok) == nil && tok.AgentID == agent
}
