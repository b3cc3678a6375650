package meshd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	cmd := exec.CommandContext(ctx, h.Command[0], h.Command[1:]...)
	cmd.Dir = h.Dir
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout = h.Stdout
	cmd.Stderr = tail
	if h.Stderr != nil {
		cmd.Stderr = io.MultiWriter(h.Stderr, tail)
	}
	// The handler gets no credential: it acts through the control channel
	// whose capability (grantEnv) dies with this run.
	cmd.Env = append(append(HandlerEnviron(append(os.Environ(), h.Env...)), eventEnv...), grantEnv(ctx)...)
	// A killed shell can leave children holding its output pipes; stop
	// waiting for them shortly after the kill.
	cmd.WaitDelay = 5 * time.Second
	killGroup(cmd)
	err := cmd.Run()
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
