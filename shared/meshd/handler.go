package meshd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/textlimit"
)

// Handler processes one event for the agent. Run calls it once per event, in
// seq order, never concurrently. A non-nil error means "not handled": Run
// retries the SAME event with backoff (later events wait) up to
// Config.HandlerAttempts, then parks it. An error for which IsPermanent is
// true (wrap it with Permanent, or return the mesh API's 4xx as is) parks
// the event at once. The envelope's Body is opened (JSON) and Sealed is empty.
//
// The context is not canceled when Run is asked to stop: the current
// handler is allowed to finish so its event can be marked. Bound long
// handlers yourself (CommandHandler.Timeout does).
type Handler interface {
	Handle(ctx context.Context, env mesh.Envelope) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, env mesh.Envelope) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, env mesh.Envelope) error { return f(ctx, env) }

// ExitPermanent is the exit status by which a handler command says "this
// event can never be handled": meshd parks it at once instead of retrying.
// `meshd send` and `meshd reply` exit with it when the mesh refuses the call
// for good (a 4xx other than 408 and 429, e.g. 409 task_terminal), so a
// handler that ends with `exec meshd reply ...` (or runs under `set -e`)
// passes the verdict on. 65 is EX_DATAERR of sysexits.h.
const ExitPermanent = 65

// CommandHandler runs an external command once per event: the envelope as
// JSON on stdin, its fields in MESH_* environment variables (MESH_EVENT_ID,
// MESH_EVENT_TYPE, MESH_SEQ, MESH_FROM, MESH_TO, MESH_TASK_ID,
// MESH_CONTEXT_ID, MESH_GROUP_ID, MESH_MESSAGE_ID, MESH_OCCURRED_AT).
// Under Run it also gets EnvHandlerSocket and EnvHandlerToken, the control
// channel through which it replies; never MESH_API_KEY or another secret.
//
// Exit status 0 means handled. ExitPermanent (65), 126 and 127 (the
// shell's "cannot execute" and "not found"), and a command that cannot be
// started at all are permanent failures: the event is parked at once. Any
// other status, or a timeout, is a transient failure that Run retries. The
// error carries the last line the command wrote to stderr.
type CommandHandler struct {
	// Command is the program and its arguments, e.g. {"sh", "-c", line}.
	Command []string
	// Timeout bounds one run; the command's whole process group is killed
	// when it passes. 0 means no limit.
	Timeout time.Duration
	// Env is added to the inherited environment. Credentials are removed
	// from both (see HandlerEnviron).
	Env []string
	// Dir is the working directory ("" = meshd's).
	Dir string
	// Stdout and Stderr receive the command's output (nil discards it).
	Stdout, Stderr io.Writer
}

// Check reports a command that cannot run (missing, not executable), so
// meshd fails at start naming it instead of parking every event.
func (h CommandHandler) Check() error {
	if len(h.Command) == 0 || h.Command[0] == "" {
		return errors.New("meshd: the handler has no command")
	}
	name := h.Command[0]
	if h.Dir != "" && strings.ContainsRune(name, filepath.Separator) && !filepath.IsAbs(name) {
		name = filepath.Join(h.Dir, name)
	}
	if _, err := exec.LookPath(name); err != nil {
		return fmt.Errorf("meshd: handler command %q cannot be run: %w", h.Command[0], errors.Unwrap(err))
	}
	return nil
}

// shellWord is a first word that names a program (no quoting, expansion
// or redirection), the only kind CheckShellLine looks up.
var shellWord = regexp.MustCompile(`^[A-Za-z0-9_./+-]+$`)

// shellBuiltins are first words a shell runs itself.
var shellBuiltins = map[string]bool{
	".": true, "alias": true, "case": true, "cd": true, "command": true, "eval": true, "exec": true, "exit": true,
	"export": true, "for": true, "if": true, "read": true, "set": true, "source": true, "trap": true, "umask": true,
	"ulimit": true, "unset": true, "until": true, "wait": true, "while": true,
}

// CheckShellLine reports a handler command line (MESH_HANDLER, run with
// sh -c) whose first word is a program that cannot be found: the shell
// would exit 127 for every event and each would be parked. Lines that start
// with shell syntax, a builtin or an assignment are not checked.
func CheckShellLine(line string) error {
	f := strings.Fields(line)
	if len(f) == 0 {
		return errors.New("meshd: the handler command line is empty")
	}
	if !shellWord.MatchString(f[0]) || shellBuiltins[f[0]] {
		return nil
	}
	return CommandHandler{Command: f[:1]}.Check()
}

// Handle runs the command for env.
func (h CommandHandler) Handle(ctx context.Context, env mesh.Envelope) error {
	payload, err := json.Marshal(env)
	if err != nil {
		return err
	}
	return h.run(ctx, append(payload, '\n'), EventEnv(env))
}

// BatchHandler is a Handler that can also take several events in one run
// (Config.Batch). HandleBatch gets at least two events, in seq order, and
// returns nil only when it handled all of them; any error means none of
// them counts as handled: Run then gives each to Handle, one by one.
type BatchHandler interface {
	Handler
	HandleBatch(ctx context.Context, envs []mesh.Envelope) error
}

// EnvBatch is set, to the number of events, for a batch run of a
// CommandHandler; a single-event run does not have it.
const EnvBatch = "MESH_BATCH"

// BatchLine is an event as a batch run's stdin carries it: the envelope
// JSON the single-event run gets, one line.
func BatchLine(env mesh.Envelope) ([]byte, error) {
	b, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// HandleBatch runs the command once for envs: one envelope JSON per line on
// stdin, in seq order, and MESH_BATCH=len(envs) in the environment instead
// of the per-event MESH_* variables (each line carries its event's fields).
// Exit 0 means every event was handled; anything else fails the whole batch.
func (h CommandHandler) HandleBatch(ctx context.Context, envs []mesh.Envelope) error {
	var stdin []byte
	for _, env := range envs {
		line, err := BatchLine(env)
		if err != nil {
			return err
		}
		stdin = append(stdin, line...)
	}
	return h.run(ctx, stdin, []string{EnvBatch + "=" + strconv.Itoa(len(envs))})
}

// run starts the command once with stdin and the event environment.
//
// Little besides the process start is left per event (a handler as small
// as `true` starts in under a millisecond): PATH and the inherited
// environment come from caches, and no goroutine is started: a small stdin
// is written into its pipe before the start, stderr is read here after the
// exit (waitCopying), and the kill at the timeout or Config.Interrupt is a
// context callback instead of exec.CommandContext's watching goroutine.
func (h CommandHandler) run(ctx context.Context, stdin []byte, eventEnv []string) error {
	if len(h.Command) == 0 || h.Command[0] == "" {
		return Permanent(errors.New("meshd: CommandHandler has no command"))
	}
	if h.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.Timeout)
		defer cancel()
	}
	tail := &tailBuffer{max: 4 << 10}
	var errOut io.Writer = tail
	if h.Stderr != nil {
		errOut = io.MultiWriter(h.Stderr, tail)
	}
	// The handler gets no credential: it acts through the control channel
	// whose capability (grantEnv) dies with this run.
	grant := grantEnv(ctx)
	base := inheritedEnv(h.Env)
	env := make([]string, 0, len(base)+len(eventEnv)+len(grant))
	env = append(append(append(env, base...), eventEnv...), grant...)
	in, err := stdinPipe(stdin)
	if err != nil {
		return fmt.Errorf("handler: stdin: %w", err)
	}
	// The child's stderr is a pipe this goroutine reads (waitCopying), so
	// os/exec adds no copying goroutine to wait for. That needs read
	// deadlines on the pipe; without them, os/exec copies it.
	errR, errW, err := os.Pipe()
	if err != nil {
		if in != nil {
			in.Close()
		}
		return fmt.Errorf("handler: stderr: %w", err)
	}
	defer errR.Close()
	var stderr io.Writer = errW
	if errR.SetReadDeadline(time.Time{}) != nil {
		stderr = errOut
	}
	cmd, kill, cached, err := h.start(ctx, in, stdin, stderr, env, true)
	if err != nil && cached && errors.Is(err, fs.ErrNotExist) {
		// The program moved since its path was cached: look it up again.
		forgetPath(h.Command[0])
		cmd, kill, _, err = h.start(ctx, in, stdin, stderr, env, false)
	}
	errW.Close() // the child holds its own: EOF comes when it (and what it left) closes it
	if in != nil {
		// At once, not after the run: while this process holds the read
		// end, the runtime's poller is woken as the child reads it.
		in.Close()
	}
	if err == nil {
		// The timeout or Config.Interrupt kills the whole process group.
		stop := context.AfterFunc(ctx, func() { _ = kill() })
		if stderr == errW {
			err = waitCopying(cmd, errR, errOut)
		} else {
			err = cmd.Wait()
		}
		stop()
	}
	if ctx.Err() == context.DeadlineExceeded && h.Timeout > 0 {
		return fmt.Errorf("handler timed out after %v%s", h.Timeout, tail.lastLine())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		herr := fmt.Errorf("handler exited with status %d%s", ee.ExitCode(), tail.lastLine())
		switch ee.ExitCode() {
		case ExitPermanent, 126, 127:
			return Permanent(herr)
		}
		return herr
	}
	if err != nil && cmd.Process == nil {
		return Permanent(fmt.Errorf("handler %q cannot be started: %w", h.Command[0], err))
	}
	if err != nil {
		return fmt.Errorf("handler: %w", err)
	}
	return nil
}

// start starts the command with the prepared stdin pipe (in; nil: stdin
// goes through os/exec's own pipe), stderr and environment, with the
// program's cached PATH lookup when useCache. kill kills its process
// group; cached reports whether the cached lookup was used. The Cmd is
// returned also when it did not start.
func (h CommandHandler) start(ctx context.Context, in *os.File, stdin []byte, stderr io.Writer, env []string, useCache bool) (cmd *exec.Cmd, kill func() error, cached bool, err error) {
	name := h.Command[0]
	if useCache && filepath.Base(name) == name {
		if p, ok := lookPath(name); ok {
			cmd, cached = &exec.Cmd{Path: p, Args: h.Command}, true
		}
	}
	if cmd == nil {
		cmd = exec.Command(name, h.Command[1:]...)
	}
	cmd.Dir = h.Dir
	if in != nil {
		cmd.Stdin = in
	} else {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.Stdout = h.Stdout
	cmd.Stderr = stderr
	cmd.Env = env
	// A killed shell can leave children holding its output pipes; stop
	// waiting for them shortly after it exits.
	cmd.WaitDelay = handlerWaitDelay
	kill = killGroup(cmd)
	if err := ctx.Err(); err != nil {
		return cmd, kill, cached, err // as exec.CommandContext: nothing is started
	}
	return cmd, kill, cached, cmd.Start()
}

// waitCopying waits for the started cmd and copies its stderr (the read
// end r) into dst, in this goroutine where it can: the exit is waited for
// first, as a plain process start is (one wake-up), and a handler that
// exits within stderrQuiet leaves its stderr in the pipe, read at once. A
// handler that runs longer gets a goroutine copying its stderr meanwhile
// (a full pipe would block it). Either way, what it left behind holding
// stderr gets cmd.WaitDelay after the exit to close it (then
// exec.ErrWaitDelay, as os/exec reports it).
func waitCopying(cmd *exec.Cmd, r *os.File, dst io.Writer) error {
	copied := make(chan error, 1)
	t := time.AfterFunc(stderrQuiet, func() { copied <- copyAll(r, dst) })
	err := cmd.Wait()
	_ = r.SetReadDeadline(time.Now().Add(cmd.WaitDelay))
	var cerr error
	if t.Stop() {
		cerr = copyAll(r, dst)
	} else {
		cerr = <-copied
	}
	if err == nil && cerr != nil {
		err = cerr
		if errors.Is(cerr, os.ErrDeadlineExceeded) {
			err = exec.ErrWaitDelay
		}
	}
	return err
}

// copyAll copies r into dst until EOF (nil) or a read error.
func copyAll(r *os.File, dst io.Writer) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	for {
		n, err := r.Read(*bp)
		if n > 0 {
			_, _ = dst.Write((*bp)[:n])
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// handlerWaitDelay is how long a handler's output pipes are waited for
// after it exited (what it left running may hold them); a variable for
// tests.
var handlerWaitDelay = 5 * time.Second

// stderrQuiet is how long a handler runs before a goroutine copies its
// stderr (until then the pipe holds it: 64 KiB by default, at least 4 KiB);
// a variable for tests.
var stderrQuiet = 100 * time.Millisecond

// copyBufs are waitCopying's read buffers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}

// stdinAhead is the largest stdin run writes into the pipe before the
// start: PIPE_BUF, which an empty pipe takes at once however small (4096
// bytes on Linux, at least 512 by POSIX). A larger one is copied by
// os/exec's goroutine while the command reads.
func stdinAhead() int {
	if runtime.GOOS == "linux" {
		return 4096
	}
	return 512
}

// stdinPipe returns the read end of a pipe already holding data, or nil
// when data is too large to be written ahead.
func stdinPipe(data []byte) (*os.File, error) {
	if len(data) > stdinAhead() {
		return nil, nil
	}
	r, w, err := handlerPipe()
	if err != nil {
		return nil, err
	}
	// Nothing reads yet, so the write must not wait: it is one atomic
	// write into an empty pipe.
	_, err = w.Write(data)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// pathTTL bounds how long a PATH lookup is reused: long enough that a
// stream of events looks the program up about once a second instead of at
// every start (a stat per PATH directory), short enough that a program
// installed earlier in PATH is picked up promptly.
const pathTTL = time.Second

type pathEntry struct {
	path string
	at   time.Time
}

var pathCache struct {
	mu sync.Mutex
	m  map[string]pathEntry // by PATH and program name
}

// lookPath is exec.LookPath(name) through pathCache; false when name is
// not found (exec.Command then reports why).
func lookPath(name string) (string, bool) {
	key := os.Getenv("PATH") + "\x00" + name
	now := time.Now()
	pathCache.mu.Lock()
	e, ok := pathCache.m[key]
	pathCache.mu.Unlock()
	if ok && now.Sub(e.at) < pathTTL {
		return e.path, true
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", false
	}
	pathCache.mu.Lock()
	if pathCache.m == nil || len(pathCache.m) > 64 {
		pathCache.m = map[string]pathEntry{} // bounded: PATH values are few
	}
	pathCache.m[key] = pathEntry{path: p, at: now}
	pathCache.mu.Unlock()
	return p, true
}

// forgetPath drops name's cached lookup.
func forgetPath(name string) {
	key := os.Getenv("PATH") + "\x00" + name
	pathCache.mu.Lock()
	delete(pathCache.m, key)
	pathCache.mu.Unlock()
}

// envCache holds HandlerEnviron of the last environment seen: the
// filtering allocates and scans every variable, the environment rarely
// changes. It is keyed by the whole input, so any change (a credential
// set later included) is filtered again.
var envCache struct {
	mu             sync.Mutex
	environ, extra []string // the input
	out            []string // HandlerEnviron(environ + extra); never modified
}

// inheritedEnv is HandlerEnviron(append(os.Environ(), extra...)). The
// result is shared: callers copy it before appending.
func inheritedEnv(extra []string) []string {
	environ := os.Environ()
	envCache.mu.Lock()
	defer envCache.mu.Unlock()
	if envCache.out != nil && slices.Equal(environ, envCache.environ) && slices.Equal(extra, envCache.extra) {
		return envCache.out
	}
	out := HandlerEnviron(append(slices.Clip(environ), extra...))
	envCache.environ, envCache.extra, envCache.out = environ, slices.Clone(extra), slices.Clip(out)
	return envCache.out
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// lastLine is ": <the last non-empty line>" (at most 500 bytes), or "".
func (t *tailBuffer) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return ""
	}
	return ": " + strings.ToValidUTF8(textlimit.Truncate(last, 500), "")
}

// EventEnv is the MESH_* environment describing env, as CommandHandler
// passes it.
func EventEnv(env mesh.Envelope) []string {
	return []string{
		"MESH_EVENT_ID=" + env.EventID,
		"MESH_EVENT_TYPE=" + env.Type,
		"MESH_SEQ=" + strconv.FormatInt(env.Seq, 10),
		"MESH_FROM=" + env.From,
		"MESH_TO=" + env.To,
		"MESH_TASK_ID=" + env.TaskID,
		"MESH_CONTEXT_ID=" + env.ContextID,
		"MESH_GROUP_ID=" + env.GroupID,
		"MESH_MESSAGE_ID=" + env.MessageID,
		"MESH_OCCURRED_AT=" + env.OccurredAt.UTC().Format(time.RFC3339Nano),
	}
}

// HandlerEnviron is environ without what a handler must not see: the
// agent's credentials (MESH_API_KEY and every MESH_* variable named like a
// key, token, secret or password), MESH_CONFIG (the file that holds the
// key) and a control channel inherited from an outer handler run. An
// LLM-driven handler can be talked into printing its environment.
func HandlerEnviron(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !handlerMaySee(name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// handlerMaySee reports whether the variable name may reach a handler.
func handlerMaySee(name string) bool {
	up := strings.ToUpper(name)
	if !strings.HasPrefix(up, "MESH_") {
		return true
	}
	// MESH_BATCH is set only by a batch run: one inherited must not make a
	// single-event run look like a batch.
	if up == "MESH_CONFIG" || up == EnvHandlerSocket || up == EnvHandlerToken || up == EnvBatch {
		return false
	}
	for _, secret := range []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"} {
		if strings.Contains(up, secret) {
			return false
		}
	}
	return true
}
