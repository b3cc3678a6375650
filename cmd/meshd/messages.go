package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

func messageCommands() []*command {
	return []*command{
		{name: "send", args: "--to AGENT TEXT...", summary: "send a message to a friend or group mate (TEXT from stdin when omitted)",
			long: `Starts a new task unless --task continues one. Prints {task_id, message_id,
context_id, status} as JSON. Retrying with the same --message-id sends once.`,
			examples: `  meshd send --to bob "can you summarise the report?"
  meshd send "the text first" --to bob
  git diff | meshd send --to reviewer
  meshd send --to bob --task "$TASK" --message-id retry-1 "more"`,
			setup: setupSend},
		{name: "reply", args: "TEXT...", summary: "reply in a task (MESH_TASK_ID inside a handler)",
			long: `The task is --task, else MESH_TASK_ID (set for each event by meshd run).
Exits 65 when the mesh refuses the reply for good (e.g. 409 task_terminal).
Inside a handler it needs no API key: it goes through meshd run's control
socket, for the event's task only (see meshd run --help).`,
			examples: `  meshd reply --task 01J0ABC "done"
  # inside a handler: idempotent across redeliveries
  meshd reply --message-id "reply-$MESH_EVENT_ID" "on it"`,
			setup: setupReply},
		{name: "inbox", summary: "show inbox events (readable; --json for one JSON object per line)",
			long: `Reads the inbox without moving meshd run's position. The cursor to pass as
--after next time is printed on stderr.`,
			examples: `  meshd inbox
  meshd inbox --after 41 --limit 10
  meshd inbox --json --wait 20s | jq .body`,
			setup: setupInbox},
		{name: "groups send", args: "GROUP_ID TEXT...", summary: "send a message to every other member of a group",
			examples: `  meshd groups send grp_01J0ABC "standup in 5 minutes"
  echo "report attached" | meshd groups send grp_01J0ABC`,
			setup: setupGroupSend},
		{name: "artifact add", args: "NAME [TEXT...]", summary: "add a named artifact to a task you received (MESH_TASK_ID in a handler)",
			long: `The artifact's content is TEXT, else stdin. The task is --task, else
MESH_TASK_ID. Inside a handler it needs no API key: it goes through meshd
run's control socket, for the event's task only (see meshd run --help).`,
			examples: `  meshd artifact add summary.md < summary.md
  meshd artifact add --task 01J0ABC result "42"`,
			setup: setupArtifact},
	}
}

// call runs one API call of a one-shot command, bounded by callTimeout
// (plus wait for a long-poll), with the unreachable-API notices on stderr.
func (e *cliEnv) call(ctx context.Context, extra func() error, do func(context.Context, *meshclient.Client) error) error {
	s, err := e.settings()
	if err != nil {
		return err
	}
	if extra != nil {
		if err := extra(); err != nil {
			return err
		}
	}
	c, done := e.client(s)
	defer done()
	ctx, cancel := context.WithTimeout(ctx, callTimeout+meshclient.MaxInboxWait)
	defer cancel()
	return do(ctx, c)
}

// inHandler runs one call of reply, tasks status or artifact add through
// meshd's control channel when the command runs inside a handler run (its
// environment names the socket and the run's capability): the handler has
// no API key, meshd makes the call with its own. ok is false outside a
// handler run; the command then calls the API itself.
func (e *cliEnv) inHandler(ctx context.Context, extra func() error, do func(context.Context, *meshd.HandlerClient) error) (ok bool, err error) {
	hc, ok := meshd.HandlerClientFromEnv(e.getenv)
	if !ok {
		return false, nil
	}
	if extra != nil {
		if err := extra(); err != nil {
			return true, err
		}
	}
	// meshd bounds its own API call (retries included); this bounds a
	// meshd that stopped answering.
	ctx, cancel := context.WithTimeout(ctx, 2*callTimeout)
	defer cancel()
	return true, do(ctx, hc)
}

// printed prints the answer res of a call as JSON, or returns the call's
// error.
func (e *cliEnv) printed(res any, err error) error {
	if err != nil {
		return err
	}
	return printJSON(e.stdout, res)
}

// taskWriter is what reply, tasks status and artifact add call: meshd's
// control channel (*meshd.HandlerClient) inside a handler run, the API
// (*meshclient.Client) outside one.
type taskWriter interface {
	Reply(ctx context.Context, taskID string, req meshclient.ReplyRequest) (meshclient.SendResult, error)
	UpdateStatus(ctx context.Context, taskID string, req meshclient.StatusRequest) (meshclient.StatusResult, error)
	AddArtifact(ctx context.Context, taskID, name string, parts []mesh.Part, messageID string) (meshclient.ArtifactResult, error)
}

// writeTask runs do through meshd inside a handler run (inHandler), else
// against the API with the command's own key (call), so each of those
// commands states its call once.
func (e *cliEnv) writeTask(ctx context.Context, extra func() error, do func(context.Context, taskWriter) error) error {
	if ok, err := e.inHandler(ctx, extra, func(ctx context.Context, c *meshd.HandlerClient) error { return do(ctx, c) }); ok {
		return err
	}
	return e.call(ctx, extra, func(ctx context.Context, c *meshclient.Client) error { return do(ctx, c) })
}

// text is the message text: the arguments, else stdin.
func (e *cliEnv) text(args []string) ([]mesh.Part, error) {
	text := strings.Join(args, " ")
	if len(args) == 0 {
		b, err := io.ReadAll(io.LimitReader(e.stdin, 16<<20))
		if err != nil {
			return nil, err
		}
		text = strings.TrimRight(string(b), "\n")
	}
	if text == "" {
		return nil, errors.New("nothing to send: give the text as arguments or on stdin")
	}
	return []mesh.Part{{Kind: "text", Text: text}}, nil
}

// taskID is --task, else MESH_TASK_ID (set by meshd run for each event).
func (e *cliEnv) taskID(flag string) string {
	if flag != "" {
		return flag
	}
	return e.getenv("MESH_TASK_ID")
}

func setupSend(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	to := fs.String("to", "", "recipient agent id (required)")
	task := fs.String("task", "", "continue this task")
	contextID := fs.String("context", "", "context id to group related tasks")
	messageID := fs.String("message-id", "", "idempotency id (minted when empty; reuse it to retry safely)")
	return func(ctx context.Context, args []string) error {
		if *to == "" {
			return errors.New("send needs --to AGENT")
		}
		var parts []mesh.Part
		return e.call(ctx, func() (err error) { parts, err = e.text(args); return err }, func(ctx context.Context, c *meshclient.Client) error {
			return e.printed(c.Send(ctx, meshclient.SendRequest{To: *to, Parts: parts, MessageID: *messageID, TaskID: *task, ContextID: *contextID}))
		})
	}
}

func setupReply(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	task := fs.String("task", "", "task id (default MESH_TASK_ID, set in a handler)")
	messageID := fs.String("message-id", "", "idempotency id (minted when empty); in a handler use reply-$MESH_EVENT_ID")
	return func(ctx context.Context, args []string) error {
		id := e.taskID(*task)
		if id == "" {
			return errors.New("reply needs --task ID (or MESH_TASK_ID, which meshd run sets for each event)")
		}
		var parts []mesh.Part
		readText := func() (err error) { parts, err = e.text(args); return err }
		return e.writeTask(ctx, readText, func(ctx context.Context, c taskWriter) error {
			return e.printed(c.Reply(ctx, id, meshclient.ReplyRequest{Parts: parts, MessageID: *messageID}))
		})
	}
}

func setupInbox(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	after := fs.Int64("after", 0, "show events with seq greater than this")
	limit := fs.Int("limit", 100, "at most this many events (1-500)")
	wait := fs.Duration("wait", 0, "long-poll up to this long (at most 20s) when there is nothing yet")
	asJSON := fs.Bool("json", false, "one event per line as JSON (the envelope, body included)")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("inbox takes no arguments (got %q)", args[0])
		}
		return e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
			page, err := c.Inbox(ctx, *after, *limit, *wait)
			if err != nil {
				return err
			}
			if *asJSON {
				for _, ev := range page.Events {
					if err := printJSON(e.stdout, ev); err != nil {
						return err
					}
				}
			} else {
				t := newTable(e.stdout, "SEQ", "WHEN", "TYPE", "FROM", "TASK", "STATE", "TEXT")
				for _, ev := range page.Events {
					text, other, state := meshclient.EventText(ev)
					if other {
						text += " [+parts]"
					}
					t.row(ev.Seq, ev.OccurredAt, ev.Type, ev.From, ev.TaskID, state, truncate(text, 80))
				}
				if err := t.flush(); err != nil {
					return err
				}
			}
			// The cursor goes to stderr so stdout stays the events.
			fmt.Fprintf(e.stderr, "next_after=%d oldest_seq=%d\n", page.NextAfter, page.OldestSeq)
			return nil
		})
	}
}

func setupGroupSend(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	messageID := fs.String("message-id", "", "idempotency id (minted when empty; reuse it to retry safely)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) == 0 {
			return errors.New("groups send needs GROUP_ID (see meshd groups list)")
		}
		var parts []mesh.Part
		return e.call(ctx, func() (err error) { parts, err = e.text(args[1:]); return err }, func(ctx context.Context, c *meshclient.Client) error {
			res, err := c.SendGroup(ctx, args[0], parts, *messageID)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, res)
			}
			t := newTable(e.stdout, "TO", "TASK")
			for _, task := range res.Tasks {
				t.row(task.To, task.TaskID)
			}
			return t.flush()
		})
	}
}

func setupArtifact(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	task := fs.String("task", "", "task id (default MESH_TASK_ID, set in a handler)")
	messageID := fs.String("message-id", "", "idempotency id (minted when empty); in a handler use artifact-$MESH_EVENT_ID")
	return func(ctx context.Context, args []string) error {
		id := e.taskID(*task)
		if id == "" {
			return errors.New("artifact add needs --task ID (or MESH_TASK_ID, which meshd run sets for each event)")
		}
		if len(args) == 0 {
			return errors.New("artifact add needs a NAME")
		}
		var parts []mesh.Part
		readText := func() (err error) { parts, err = e.text(args[1:]); return err }
		return e.writeTask(ctx, readText, func(ctx context.Context, c taskWriter) error {
			return e.printed(c.AddArtifact(ctx, id, args[0], parts, *messageID))
		})
	}
}
