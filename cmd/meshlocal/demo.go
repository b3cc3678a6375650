package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// demoAgents are the two agents every local mesh gets.
var demoAgents = []struct{ ID, Name string }{{"alice", "Alice (demo)"}, {"bob", "Bob (demo)"}}

// demoCreds are the demo agents' API keys, printed once to the terminal.
type demoCreds struct {
	Keys map[string]string // agent id → API key
	// Created is true when the agents were created by this run (false: they
	// existed, with their stored or fresh keys).
	Created bool
	// AccountEmail and AccountPassword sign the demo account in to the
	// console (an operator account, so the outbox page shows too).
	AccountEmail, AccountPassword string
}

// demoAccountEmail is the demo account of every local mesh.
const demoAccountEmail = "demo@localhost"

// demoPassword derives the demo account's password from the admin key: the
// same on every start of one local mesh (the key is kept in its secrets
// file), so an account that already exists can still be printed, and
// unguessable without the key.
func demoPassword(adminKey string) string {
	m := hmac.New(sha256.New, []byte(adminKey))
	m.Write([]byte("agent mesh demo account"))
	return "demo-" + hex.EncodeToString(m.Sum(nil))[:20]
}

type demo struct {
	base     string
	adminKey string
	say      func(string, ...any)
	stateDir string
	log      *slog.Logger
	http     http.Client
}

// agents creates alice and bob and makes them friends, through the admin
// routes of the local API (the same path an operator takes). On a restart
// they already exist and keep the keys stored in the state directory
// (demokeys.go); only a key the mesh no longer accepts is rotated.
func (d *demo) agents(ctx context.Context) (*demoCreds, error) {
	creds := &demoCreds{Keys: map[string]string{}}
	stored := loadDemoKeys(d.stateDir)
	var how []string
	for _, a := range demoAgents {
		var res struct {
			AgentID string `json:"agent_id"`
			APIKey  string `json:"api_key"`
		}
		status, code, err := d.admin(ctx, http.MethodPost, "/v1/admin/agents", map[string]string{"agent_id": a.ID, "name": a.Name}, &res)
		if err != nil {
			return nil, err
		}
		switch {
		case status/100 == 2:
			how = append(how, a.ID+" created")
			creds.Created = true
		case status == http.StatusConflict && d.keyWorks(ctx, a.ID, stored[a.ID]):
			res.APIKey = stored[a.ID]
			how = append(how, a.ID+" existed (API key kept)")
		case status == http.StatusConflict:
			if status, code, err = d.admin(ctx, http.MethodPost, "/v1/admin/agents/"+url.PathEscape(a.ID)+"/keys", map[string]bool{"revoke_existing": true}, &res); err != nil {
				return nil, err
			}
			if status/100 != 2 {
				return nil, fmt.Errorf("rotating %s's key: HTTP %d %s", a.ID, status, code)
			}
			how = append(how, a.ID+" existed (new API key)")
		default:
			return nil, fmt.Errorf("creating %s: HTTP %d %s", a.ID, status, code)
		}
		if res.APIKey == "" {
			return nil, fmt.Errorf("the admin API returned no api_key for %s", a.ID)
		}
		creds.Keys[a.ID] = res.APIKey
	}
	if err := saveDemoKeys(d.stateDir, creds.Keys); err != nil {
		return nil, err
	}
	status, code, err := d.admin(ctx, http.MethodPost, "/v1/admin/friendships", map[string]string{"a": "alice", "b": "bob"}, nil)
	if err != nil {
		return nil, err
	}
	if status/100 != 2 && status != http.StatusConflict {
		return nil, fmt.Errorf("making alice and bob friends: HTTP %d %s", status, code)
	}
	creds.AccountEmail, creds.AccountPassword = demoAccountEmail, demoPassword(d.adminKey)
	status, code, err = d.admin(ctx, http.MethodPost, "/v1/admin/accounts",
		map[string]any{"email": creds.AccountEmail, "password": creds.AccountPassword, "name": "Demo operator", "operator": true}, nil)
	if err != nil {
		return nil, err
	}
	if status/100 != 2 && status != http.StatusConflict {
		return nil, fmt.Errorf("creating the demo account: HTTP %d %s", status, code)
	}
	d.say("[5/6] demo agents: %s; alice and bob are friends; demo account %s", strings.Join(how, ", "), creds.AccountEmail)
	return creds, nil
}

// admin calls an admin route with the admin key. It returns the status and,
// for a problem answer, its code; out receives a 2xx JSON body.
func (d *demo) admin(ctx context.Context, method, path string, body, out any) (int, string, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+d.adminKey)
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(data, &p)
		return resp.StatusCode, p.Code, nil
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, "", fmt.Errorf("%s %s: bad JSON answer: %v", method, path, err)
		}
	}
	return resp.StatusCode, "", nil
}

// waitFor polls cond until it is true or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return cond()
}
