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
	"strconv"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

// Handler processes one event for the agent. Run calls it once per event, in
// seq order, never concurrently. A non-nil error means "not handled": Run
// retries the SAME event with backoff and delivers nothing later until it
// succeeds. The envelope's Body is opened (JSON) and Sealed is empty.
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

// CommandHandler runs an external command once per event: the envelope as
// JSON on stdin, its fields in MESH_* environment variables (MESH_EVENT_ID,
// MESH_EVENT_TYPE, MESH_SEQ, MESH_FROM, MESH_TO, MESH_TASK_ID,
// MESH_CONTEXT_ID, MESH_GROUP_ID, MESH_MESSAGE_ID, MESH_OCCURRED_AT). Exit
// status 0 means handled; anything else (or a timeout) is a failure that Run
// retries.
type CommandHandler struct {
	// Command is the program and its arguments, e.g. {"sh", "-c", line}.
	Command []string
	// Timeout bounds one run; the command's whole process group is killed
	// when it passes. 0 means no limit.
	Timeout time.Duration
	// Env is added to the inherited environment.
	Env []string
	// Dir is the working directory ("" = meshd's).
	Dir string
	// Stdout and Stderr receive the command's output (nil discards it).
	Stdout, Stderr io.Writer
}

// Handle runs the command for env.
func (h CommandHandler) Handle(ctx context.Context, env mesh.Envelope) error {
	if len(h.Command) == 0 || h.Command[0] == "" {
		return errors.New("meshd: CommandHandler has no command")
	}
	if h.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.Timeout)
		defer cancel()
	}
	payload, err := json.Marshal(env)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, h.Command[0], h.Command[1:]...)
	cmd.Dir = h.Dir
	cmd.Stdin = bytes.NewReader(append(payload, '\n'))
	cmd.Stdout, cmd.Stderr = h.Stdout, h.Stderr
	cmd.Env = append(append(os.Environ(), h.Env...), EventEnv(env)...)
	// A killed shell can leave children holding its output pipes; stop
	// waiting for them shortly after the kill.
	cmd.WaitDelay = 5 * time.Second
	killGroup(cmd)
	err = cmd.Run()
	if ctx.Err() == context.DeadlineExceeded && h.Timeout > 0 {
		return fmt.Errorf("handler timed out after %v", h.Timeout)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("handler exited with status %d", ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("handler: %w", err)
	}
	return nil
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
