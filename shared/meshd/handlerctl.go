package meshd

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
)

// The handler's control channel. The handler never sees the agent's API key
// (an LLM-driven handler can be talked into printing its environment).
// Instead meshd serves a Unix socket and, for each handler run, mints a
// random capability that is valid only while that run lasts and only for
// the event's own task. The handler's `meshd reply`, `meshd tasks status`
// and `meshd artifact add` present it on the socket, and meshd makes the
// API call with its own credentials.

// Environment variables of a handler run that carry the control channel.
const (
	// EnvHandlerSocket is the path of meshd's control socket.
	EnvHandlerSocket = "MESH_HANDLER_SOCKET"
	// EnvHandlerToken is the capability of the current handler run.
	EnvHandlerToken = "MESH_HANDLER_TOKEN"
)

// Control-channel refusals, as the Code of the *meshclient.APIError the
// HandlerClient returns.
const (
	CodeCapabilityInvalid = "handler_capability_invalid" // 401: wrong token, or its handler run ended
	CodeTaskNotThisEvent  = "task_not_this_event"        // 403: another task than the event's
)

// grant is the capability of one handler run.
type grant struct {
	token   []byte // hex, as the handler presents it
	taskID  string
	eventID string
	// more are the tasks of a batch run's other events: a batch may act
	// on each of its events' tasks, on no other.
	more map[string]bool
}

// covers reports whether the grant's run may act on taskID.
func (g grant) covers(taskID string) bool {
	return taskID != "" && (taskID == g.taskID || g.more[taskID])
}

type grantKey struct{}

// grantEnv is the control channel's environment for the handler run of ctx
// (nil outside one).
func grantEnv(ctx context.Context) []string {
	g, ok := ctx.Value(grantKey{}).(grantCtx)
	if !ok {
		return nil
	}
	return []string{EnvHandlerSocket + "=" + g.socket, EnvHandlerToken + "=" + g.token}
}

// grantCtx is what a handler run's context carries about its capability.
type grantCtx struct{ socket, token string }

// HandlerControl serves the control channel of one agent's handler runs.
// At most one capability is live at a time: handler runs never overlap.
type HandlerControl struct {
	api     *meshclient.Client
	dir     string
	agentID string
	log     *slog.Logger

	mu      sync.Mutex
	cur     *grant
	path    string      // the socket, once listening
	tmpDir  string      // a private directory holding it, when dir's path was too long
	sock    os.FileInfo // the socket file this process made
	srv     *http.Server
	closed  bool
	serveWG sync.WaitGroup
}

// NewHandlerControl returns the control channel for agentID's handler runs,
// acting through api. The socket is created in stateDir at the first
// handler run (by then the caller holds the agent's state lock, so a stale
// socket left by a crash can be replaced safely). Close removes it.
func NewHandlerControl(api *meshclient.Client, stateDir, agentID string, log *slog.Logger) *HandlerControl {
	if log == nil {
		log = slog.Default()
	}
	return &HandlerControl{api: api, dir: stateDir, agentID: agentID, log: log}
}

// maxSocketPath keeps under the smallest sun_path (104 bytes on macOS and
// the BSDs, 108 on Linux).
const maxSocketPath = 100

// Listen creates the socket, mode 0600, once, and returns its path. Run
// calls it at start, so a state dir that cannot hold a socket stops meshd
// with a clear error instead of failing every event's handler.
func (c *HandlerControl) Listen() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", errors.New("meshd: the handler control channel is closed")
	}
	if c.path != "" {
		return c.path, nil
	}
	path := filepath.Join(c.dir, c.agentID+".handler.sock")
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if len(path) > maxSocketPath {
		tmp, err := os.MkdirTemp("", "meshd-") // 0700
		if err != nil {
			return "", fmt.Errorf("meshd: handler control socket: %w", err)
		}
		c.tmpDir, path = tmp, filepath.Join(tmp, "handler.sock")
	} else if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return "", fmt.Errorf("meshd: state dir: %w", err)
	}
	_ = os.Remove(path) // a crashed meshd's socket
	ln, err := net.Listen("unix", path)
	if err != nil {
		return "", fmt.Errorf("meshd: handler control socket: %w", err)
	}
	// Close removes the file itself, and only while it is ours: Go's own
	// unlink on close would take a socket a later meshd made at this path.
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	// Only this user may connect; the capability guards each call anyway.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return "", fmt.Errorf("meshd: handler control socket: %w", err)
	}
	// Remember which file is ours: Close removes the path only while it is
	// still this socket, never one a later meshd made in its place.
	if fi, err := os.Lstat(path); err == nil {
		c.sock = fi
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/reply", c.serveReply)
	mux.HandleFunc("POST /v1/status", c.serveStatus)
	mux.HandleFunc("POST /v1/artifact", c.serveArtifact)
	// Bounded like any server: a process the handler leaves behind cannot
	// hold connections open.
	c.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: controlCallTimeout + 15*time.Second, IdleTimeout: time.Minute}
	c.path = path
	c.serveWG.Add(1)
	go func() {
		defer c.serveWG.Done()
		_ = c.srv.Serve(ln)
	}()
	return path, nil
}

// Close revokes any capability, stops serving and removes the socket.
func (c *HandlerControl) Close() error {
	c.mu.Lock()
	c.closed, c.cur = true, nil
	srv, path, tmp, sock := c.srv, c.path, c.tmpDir, c.sock
	c.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	c.serveWG.Wait()
	if fi, err := os.Lstat(path); err == nil && sock != nil && os.SameFile(fi, sock) {
		_ = os.Remove(path)
	}
	if tmp != "" {
		_ = os.RemoveAll(tmp)
	}
	return err
}

// Wrap returns h run with a capability: each Handle call mints one for its
// event, passes it in the context (CommandHandler puts it in the handler's
// environment) and revokes it when the call returns.
func (c *HandlerControl) Wrap(h Handler) Handler { return &grantingHandler{c: c, h: h} }

type grantingHandler struct {
	c *HandlerControl
	h Handler
}

// Check is the wrapped handler's, so Run and RetryDeadLetter still refuse
// a handler that cannot start.
func (g *grantingHandler) Check() error {
	if c, ok := g.h.(Checker); ok {
		return c.Check()
	}
	return nil
}

func (g *grantingHandler) Handle(ctx context.Context, env mesh.Envelope) error {
	gctx, revoke, err := g.c.mint(ctx, grant{taskID: env.TaskID, eventID: env.EventID})
	if err != nil {
		return err
	}
	defer revoke()
	return g.h.Handle(gctx, env)
}

// HandleBatch runs a batch with one capability for every task of its
// events. A wrapped handler that takes no batches fails it (nothing
// handled), and Run gives each event to Handle instead.
func (g *grantingHandler) HandleBatch(ctx context.Context, envs []mesh.Envelope) error {
	bh, ok := g.h.(BatchHandler)
	if !ok || len(envs) == 0 {
		return errors.New("meshd: the handler takes no batches")
	}
	gr := grant{taskID: envs[0].TaskID, eventID: envs[0].EventID, more: map[string]bool{}}
	for _, env := range envs[1:] {
		if env.TaskID != "" {
			gr.more[env.TaskID] = true
		}
	}
	gctx, revoke, err := g.c.mint(ctx, gr)
	if err != nil {
		return err
	}
	defer revoke()
	return bh.HandleBatch(gctx, envs)
}

// takesBatches reports whether the wrapped handler takes batches.
func (g *grantingHandler) takesBatches() bool {
	_, ok := g.h.(BatchHandler)
	return ok
}

// mint makes gr the live capability with a fresh token and returns the
// context carrying it, and the revoke to call when the run returns.
func (c *HandlerControl) mint(ctx context.Context, gr grant) (context.Context, func(), error) {
	path, err := c.Listen()
	if err != nil {
		return nil, nil, err // transient: the socket may be creatable at the next attempt
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, nil, err
	}
	token := hex.EncodeToString(b)
	gr.token = []byte(token)
	c.mu.Lock()
	c.cur = &gr
	c.mu.Unlock()
	revoke := func() {
		c.mu.Lock()
		c.cur = nil
		c.mu.Unlock()
	}
	return context.WithValue(ctx, grantKey{}, grantCtx{socket: path, token: token}), revoke, nil
}

// authorize returns the live grant the request's bearer token presents, or
// answers the refusal itself. It runs before the body is read: an unknown
// caller gets nothing but the refusal.
func (c *HandlerControl) authorize(w http.ResponseWriter, r *http.Request) (grant, bool) {
	presented, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	c.mu.Lock()
	cur := c.cur
	c.mu.Unlock()
	if cur == nil || subtle.ConstantTimeCompare([]byte(presented), cur.token) != 1 {
		writeProblem(w, &meshclient.APIError{Status: http.StatusUnauthorized, Code: CodeCapabilityInvalid,
			Detail: "the handler capability is unknown or its event's handler run has ended"})
		return grant{}, false
	}
	return *cur, true
}

// forTask refuses a request for another task than the grant's event.
func forTask(w http.ResponseWriter, g grant, taskID string) bool {
	if !g.covers(taskID) {
		detail := fmt.Sprintf("a handler may act only on its event's task (%q)", g.taskID)
		if len(g.more) > 0 {
			detail = "a batch run may act only on its events' tasks"
		}
		writeProblem(w, &meshclient.APIError{Status: http.StatusForbidden, Code: CodeTaskNotThisEvent, Detail: detail})
		return false
	}
	return true
}

// maxControlBody bounds a control request: a reply, status note or artifact
// is at most the API's message size (256 KiB by default) once sent on.
const maxControlBody = 8 << 20

// controlCallTimeout bounds the API call made for one control request.
const controlCallTimeout = 30 * time.Second

// serve checks the capability, decodes the request into req, checks it is
// for the grant's task (taskOf names it), runs do with meshd's client and writes its result.
func serve[Req any](c *HandlerControl, w http.ResponseWriter, r *http.Request, taskOf func(Req) string, do func(context.Context, Req) (any, error)) {
	g, ok := c.authorize(w, r)
	if !ok {
		return
	}
	var req Req
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBody)).Decode(&req); err != nil {
		writeProblem(w, &meshclient.APIError{Status: http.StatusBadRequest, Code: "invalid_request", Detail: err.Error()})
		return
	}
	if !forTask(w, g, taskOf(req)) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), controlCallTimeout)
	defer cancel()
	res, err := do(ctx, req)
	if err != nil {
		c.log.Warn("a handler's call through the control channel failed", "event_id", g.eventID, "task_id", g.taskID, "path", r.URL.Path, "err", err)
		var ae *meshclient.APIError
		if !errors.As(err, &ae) {
			// Not an answer of the mesh: transient for the handler.
			ae = &meshclient.APIError{Status: http.StatusBadGateway, Code: "mesh_unreachable", Detail: err.Error()}
		}
		writeProblem(w, ae)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}

// ControlReply is a reply through the control channel.
type ControlReply struct {
	TaskID string `json:"task_id"`
	meshclient.ReplyRequest
}

// ControlStatus is a status move through the control channel.
type ControlStatus struct {
	TaskID string `json:"task_id"`
	meshclient.StatusRequest
}

// ControlArtifact is an artifact added through the control channel.
type ControlArtifact struct {
	TaskID    string      `json:"task_id"`
	Name      string      `json:"name"`
	Parts     []mesh.Part `json:"parts"`
	MessageID string      `json:"message_id,omitempty"`
}

func (c *HandlerControl) serveReply(w http.ResponseWriter, r *http.Request) {
	serve(c, w, r, func(q ControlReply) string { return q.TaskID }, func(ctx context.Context, q ControlReply) (any, error) {
		return c.api.Reply(ctx, q.TaskID, q.ReplyRequest)
	})
}

func (c *HandlerControl) serveStatus(w http.ResponseWriter, r *http.Request) {
	serve(c, w, r, func(q ControlStatus) string { return q.TaskID }, func(ctx context.Context, q ControlStatus) (any, error) {
		return c.api.UpdateStatus(ctx, q.TaskID, q.StatusRequest)
	})
}

func (c *HandlerControl) serveArtifact(w http.ResponseWriter, r *http.Request) {
	serve(c, w, r, func(q ControlArtifact) string { return q.TaskID }, func(ctx context.Context, q ControlArtifact) (any, error) {
		return c.api.AddArtifact(ctx, q.TaskID, q.Name, q.Parts, q.MessageID)
	})
}

// problem is the wire form of a refusal.
type problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail,omitempty"`
}

func writeProblem(w http.ResponseWriter, ae *meshclient.APIError) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(ae.Status)
	_ = json.NewEncoder(w).Encode(problem{Status: ae.Status, Code: ae.Code, Detail: ae.Detail})
}

// HandlerClient is the handler's side of the control channel: what `meshd
// reply`, `meshd tasks status` and `meshd artifact add` use inside a
// handler run. Refusals are *meshclient.APIError, so meshclient.IsPermanent
// tells a refusal for good (exit 65) from a transient failure.
type HandlerClient struct {
	socket, token string
	hc            *http.Client
}

// HandlerClientFromEnv is the control channel named by the handler run's
// environment (EnvHandlerSocket and EnvHandlerToken); ok is false when it
// is not set (not inside a handler run of meshd).
func HandlerClientFromEnv(getenv func(string) string) (c *HandlerClient, ok bool) {
	socket, token := getenv(EnvHandlerSocket), getenv(EnvHandlerToken)
	if socket == "" || token == "" {
		return nil, false
	}
	return NewHandlerClient(socket, token), true
}

// NewHandlerClient talks to the control socket with the capability token.
func NewHandlerClient(socket, token string) *HandlerClient {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &HandlerClient{socket: socket, token: token, hc: &http.Client{Transport: tr}}
}

// Reply adds a message to the event's task.
func (c *HandlerClient) Reply(ctx context.Context, taskID string, req meshclient.ReplyRequest) (meshclient.SendResult, error) {
	var res meshclient.SendResult
	err := c.call(ctx, "/v1/reply", ControlReply{TaskID: taskID, ReplyRequest: req}, &res)
	return res, err
}

// UpdateStatus moves the event's task.
func (c *HandlerClient) UpdateStatus(ctx context.Context, taskID string, req meshclient.StatusRequest) (meshclient.StatusResult, error) {
	var res meshclient.StatusResult
	err := c.call(ctx, "/v1/status", ControlStatus{TaskID: taskID, StatusRequest: req}, &res)
	return res, err
}

// AddArtifact adds a named artifact to the event's task.
func (c *HandlerClient) AddArtifact(ctx context.Context, taskID, name string, parts []mesh.Part, messageID string) (meshclient.ArtifactResult, error) {
	var res meshclient.ArtifactResult
	err := c.call(ctx, "/v1/artifact", ControlArtifact{TaskID: taskID, Name: name, Parts: parts, MessageID: messageID}, &res)
	return res, err
}

// call is one request; meshd itself retries the API call, so none here
// (a retry with the same message id would be harmless, but meshd being
// gone is not something retrying fixes within a handler run).
func (c *HandlerClient) call(ctx context.Context, path string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://meshd"+path, strings.NewReader(string(data)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("meshd control socket %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var p problem
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&p)
		if p.Code == "" {
			p.Code = fmt.Sprintf("http_%d", resp.StatusCode)
		}
		return &meshclient.APIError{Status: resp.StatusCode, Code: p.Code, Detail: p.Detail}
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
