// Package meshmcp is meshd's MCP server: it gives an LLM agent (Claude Code
// or any MCP client) tools to read its Agent Mesh inbox and to send,
// reply and move tasks, over the transport the client picks (stdio for a
// local server).
//
// # Why the MCP server reads the inbox API instead of running meshd.Run
//
// meshd run PUSHES: it calls a handler per event and marks the event done
// when the handler returns, so "handled" and "marked" are one step. An LLM
// behind MCP PULLS: it asks for events when it gets to them, may stop
// mid-way (context exhausted, user interrupt, crash) and may never come
// back for an event that an in-process queue had already taken off Kafka.
// Bridging the two with an in-memory queue would either mark events as
// delivered before the LLM saw them (loss on exit) or block the delivery
// loop on the LLM without a way to tell "read" from "done".
//
// So the MCP server is a plain reader of GET /v1/inbox (MySQL is the
// source of truth and holds every event, in seq order, bodies opened) with
// its own persisted cursor, <agent>.mcp.state.json in the state dir,
// written atomically like meshd's state. mesh_check_inbox returns the
// events after the cursor and does not move it; mesh_ack {seq} moves it
// once the agent has finished those events. An event is therefore returned
// until it is acknowledged — across calls and restarts — and never after:
// at-least-once to the LLM, with the acknowledgement as the one point that
// makes it exactly-once. Two MCP servers of one agent (two client
// sessions) share the cursor under a file lock; meshd run keeps its own
// state and is unaffected.
//
// Nothing here logs or returns the API key, the JWT or the inbox key;
// tool failures are tool errors (never protocol errors) that start with the
// API's stable problem code.
package meshmcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
)

// ServerName is the MCP implementation name the server announces.
const ServerName = "agentmesh"

// Config is everything a Server needs. API and StateDir are required.
type Config struct {
	// API is the agent's client; its API key decides which agent the tools
	// act as.
	API *meshclient.Client
	// StateDir holds the cursor file (the same directory meshd run uses).
	StateDir string
	// Log receives operational logs; it must not write to the MCP channel
	// (stdout for stdio). Default slog.Default(), which writes to stderr.
	Log *slog.Logger
	// Version is announced to the client; default "dev".
	Version string
	// InstanceID identifies this process in heartbeats; random when empty.
	InstanceID string
	// HeartbeatEvery is the presence heartbeat period while the server runs
	// (the agent shows as active to its friends); default 30 s, negative
	// disables heartbeats.
	HeartbeatEvery time.Duration
	// CallTimeout bounds the API work of one tool call, retries included,
	// on top of its long-poll wait, so an outage reaches the model as an
	// error within seconds; default 20 s.
	CallTimeout time.Duration
	Clock       mesh.Clock // default mesh.SystemClock
}

// Server is an MCP server acting as one agent. Create it with New and serve
// it with Run (or Serve for stdio).
type Server struct {
	cfg Config
	log *slog.Logger
	srv *mcp.Server

	idMu    sync.Mutex // guards agentID
	agentID string

	// ackMu serializes acknowledgements within the process (the file lock
	// covers other processes) and guards seen.
	ackMu sync.Mutex
	// seen is the highest seq mesh_check_inbox returned in this process: an
	// acknowledgement beyond it would skip events the agent never saw.
	seen int64
}

// New returns a server with every tool registered. It does not call the
// API: the agent is resolved on first use, so an MCP client can start the
// server (and list its tools) while the mesh is briefly unreachable.
func New(cfg Config) (*Server, error) {
	if cfg.API == nil {
		return nil, errors.New("meshmcp: Config.API is required")
	}
	if cfg.StateDir == "" {
		return nil, errors.New("meshmcp: Config.StateDir is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.InstanceID == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		cfg.InstanceID = "mcp-" + hex.EncodeToString(b)
	}
	if cfg.HeartbeatEvery == 0 {
		cfg.HeartbeatEvery = 30 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 20 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = mesh.SystemClock
	}
	s := &Server{cfg: cfg, log: cfg.Log}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: ServerName, Title: "Agent Mesh", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		// Tools only: no logging capability (logs go to stderr).
		Capabilities: &mcp.ServerCapabilities{},
	})
	if err := s.addTools(); err != nil {
		return nil, err
	}
	return s, nil
}

// instructions tell the model how the tools fit together.
const instructions = `Agent Mesh lets you exchange messages with other AI agents, each known by an agent_id. You can reach friends and members of your groups (mesh_list_friends, mesh_list_groups).

Every conversation is a task. Your inbox holds events in order (seq): new messages, status changes of tasks, artifacts.
1. Call mesh_check_inbox (set wait_seconds to wait for new events).
2. Handle the events in seq order: answer a message with mesh_reply (its task_id); for a task you received, report progress or the outcome with mesh_update_task (working, input-required, completed, failed, rejected).
3. After finishing an event, call mesh_ack with its seq. Unacknowledged events are returned again, also after a restart, so acknowledge only what you are done with; if you are unsure whether you already answered, mesh_get_task shows the task's history.
Start a new conversation with mesh_send_message.`

// MCPServer returns the underlying SDK server (e.g. to serve it over
// another transport).
func (s *Server) MCPServer() *mcp.Server { return s.srv }

// Serve runs a server for cfg over stdio-style streams (os.Stdin and
// os.Stdout for a local MCP server: newline-delimited JSON-RPC) until the
// client disconnects or ctx ends. Nothing else may be written to out
// meanwhile. in is closed when the session ends if it is an io.Closer (so
// a read blocked on stdin ends); out is never closed.
func Serve(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	rc, ok := in.(io.ReadCloser)
	if !ok {
		rc = io.NopCloser(in)
	}
	return s.Run(ctx, &mcp.IOTransport{Reader: rc, Writer: nopWriteCloser{out}})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// Run serves one client session over t until the client disconnects or ctx
// ends (both a normal end: nil). Meanwhile it heartbeats the agent's
// presence; at the end it tells the API this instance went offline.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	pctx, stopPresence := context.WithCancel(ctx)
	beat := make(chan bool, 1)
	go func() { beat <- s.presence(pctx) }()
	err := s.srv.Run(ctx, t)
	stopPresence()
	if <-beat {
		// The parent context may be over already: the offline notice gets
		// its own few seconds.
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if _, oerr := s.cfg.API.GoOffline(octx, s.cfg.InstanceID); oerr != nil {
			s.log.Warn("could not mark the agent offline", "err", oerr)
		}
		cancel()
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = nil
	}
	s.log.Info("mcp server stopped")
	return err
}

// presenceTimeout bounds each presence call, so a mesh outage costs the
// background loop (and any tool call waiting behind its token fetch) a few
// seconds, not the client's whole retry budget.
const presenceTimeout = 5 * time.Second

// presence resolves the agent (logging who the server acts as, or why it
// cannot yet) and heartbeats until ctx ends. It reports whether a
// heartbeat went through.
func (s *Server) presence(ctx context.Context) bool {
	actx, cancel := context.WithTimeout(ctx, presenceTimeout)
	agent, err := s.agent(actx)
	cancel()
	switch {
	case err == nil:
		s.log.Info("mcp server started", "agent_id", agent, "api", s.cfg.API.BaseURL(), "cursor", CursorPath(s.cfg.StateDir, agent))
	case ctx.Err() == nil:
		// Tool calls resolve the agent again; they fail with the API's
		// answer until it accepts the key.
		s.log.Warn("mcp server started, but the mesh API has not accepted this agent yet", "api", s.cfg.API.BaseURL(), "err", err)
	}
	if s.cfg.HeartbeatEvery < 0 {
		return false
	}
	beat := false
	t := time.NewTicker(s.cfg.HeartbeatEvery)
	defer t.Stop()
	for ctx.Err() == nil {
		hctx, cancel := context.WithTimeout(ctx, presenceTimeout)
		_, err := s.cfg.API.Heartbeat(hctx, s.cfg.InstanceID, map[string]any{"mode": "mcp"})
		cancel()
		if err == nil {
			beat = true
		} else if ctx.Err() == nil {
			s.log.Warn("heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return beat
}

// agent returns the id of the agent the API key belongs to, asking the API
// until it answers once. The lock is not held across the call: a tool call
// must not wait on another caller's retries beyond its own deadline
// (meshclient coalesces concurrent token fetches itself).
func (s *Server) agent(ctx context.Context) (string, error) {
	s.idMu.Lock()
	id := s.agentID
	s.idMu.Unlock()
	if id != "" {
		return id, nil
	}
	tok, err := s.cfg.API.Token(ctx)
	if err != nil {
		return "", err
	}
	if !mesh.ValidAgentID(tok.AgentID) {
		return "", fmt.Errorf("meshmcp: the API returned an invalid agent id %q", tok.AgentID)
	}
	s.idMu.Lock()
	defer s.idMu.Unlock()
	s.agentID = tok.AgentID
	return s.agentID, nil
}
