package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
)

func taskCommands() []*command {
	return []*command{
		{name: "tasks list", summary: "list your tasks, most recent activity first",
			examples: `  meshd tasks list
  meshd tasks list --status working --role recipient
  meshd tasks list --json | jq -r .task_id`,
			setup: setupTasksList},
		{name: "tasks show", args: "[TASK_ID]", summary: "show a task: state, parties, recent messages, artifacts (MESH_TASK_ID in a handler)",
			examples: `  meshd tasks show 01J0ABC
  meshd tasks show --json 01J0ABC`,
			setup: setupTasksShow},
		{name: "tasks status", args: "STATUS [NOTE...]", summary: "move a task: working, input-required, completed, failed, rejected, canceled",
			long: `The task is --task, else MESH_TASK_ID (set for each event by meshd run).
An illegal move is refused (exit 65) and changes nothing; the note is told to
the other agent (the question of input-required, the reason of a failure).
Inside a handler it needs no API key: it goes through meshd run's control
socket, for the event's task only (see meshd run --help).`,
			examples: `  # inside a handler
  meshd tasks status working
  meshd tasks status --message-id "done-$MESH_EVENT_ID" completed "summary sent"
  meshd tasks status --task 01J0ABC canceled "not needed any more"`,
			setup: setupTasksStatus},
	}
}

func setupTasksList(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	status := fs.String("status", "", "only tasks in this state")
	role := fs.String("role", "", "initiator (you sent the first message) or recipient")
	contextID := fs.String("context", "", "only tasks of this conversation")
	limit := fs.Int("limit", 50, "at most this many tasks (1-200)")
	cursor := fs.String("cursor", "", "the next page (printed on stderr after a full page)")
	asJSON := fs.Bool("json", false, "one task per line as JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("tasks list takes no arguments (got %q)", args[0])
		}
		return e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
			page, err := c.ListTasks(ctx, meshclient.TaskQuery{Status: *status, Role: *role, ContextID: *contextID, Cursor: *cursor, Limit: *limit})
			if err != nil {
				return err
			}
			if *asJSON {
				for _, t := range page.Tasks {
					if err := printJSON(e.stdout, t); err != nil {
						return err
					}
				}
			} else {
				t := newTable(e.stdout, "TASK", "STATUS", "FROM", "TO", "GROUP", "UPDATED")
				for _, task := range page.Tasks {
					t.row(task.TaskID, task.Status, task.Initiator, task.Recipient, task.GroupID, task.UpdatedAt)
				}
				if err := t.flush(); err != nil {
					return err
				}
			}
			if page.NextCursor != "" {
				fmt.Fprintf(e.stderr, "more: --cursor %s\n", page.NextCursor)
			}
			return nil
		})
	}
}

func setupTasksShow(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	asJSON := fs.Bool("json", false, "the task as JSON")
	return func(ctx context.Context, args []string) error {
		id := ""
		if len(args) > 0 {
			id = args[0]
		}
		if id = e.taskID(id); id == "" {
			return errors.New("tasks show needs TASK_ID (or MESH_TASK_ID, which meshd run sets for each event)")
		}
		return e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
			d, err := c.GetTask(ctx, id)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, d)
			}
			fmt.Fprintf(e.stdout, "task     %s\nstatus   %s\nfrom     %s\nto       %s\ncontext  %s\n", d.TaskID, d.Status, d.Initiator, d.Recipient, d.ContextID)
			if d.GroupID != "" {
				fmt.Fprintf(e.stdout, "group    %s\n", d.GroupID)
			}
			fmt.Fprintf(e.stdout, "created  %s, updated %s\n\n", ago(d.CreatedAt), ago(d.UpdatedAt))
			if d.EarlierMessages > 0 {
				fmt.Fprintf(e.stdout, "(%d earlier messages)\n", d.EarlierMessages)
			}
			t := newTable(e.stdout, "WHEN", "FROM", "TEXT")
			for _, m := range d.Messages {
				t.row(m.CreatedAt, m.From, truncate(meshclient.PartsText(m.Parts), 100))
			}
			if err := t.flush(); err != nil {
				return err
			}
			if len(d.Artifacts) > 0 {
				fmt.Fprintln(e.stdout)
				t := newTable(e.stdout, "ARTIFACT", "NAME", "BY", "WHEN")
				for _, a := range d.Artifacts {
					t.row(a.ArtifactID, a.Name, a.CreatedBy, a.CreatedAt)
				}
				return t.flush()
			}
			return nil
		})
	}
}

func setupTasksStatus(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	task := fs.String("task", "", "task id (default MESH_TASK_ID, set in a handler)")
	messageID := fs.String("message-id", "", "idempotency id (minted when empty)")
	return func(ctx context.Context, args []string) error {
		id := e.taskID(*task)
		if id == "" {
			return errors.New("tasks status needs --task ID (or MESH_TASK_ID, which meshd run sets for each event)")
		}
		if len(args) == 0 {
			return errors.New("tasks status needs the new STATUS: working, input-required, completed, failed, rejected or canceled")
		}
		req := meshclient.StatusRequest{Status: args[0], MessageID: *messageID}
		if note := strings.Join(args[1:], " "); note != "" {
			req.Message = &meshclient.StatusMessage{Parts: []mesh.Part{{Kind: "text", Text: note}}}
		}
		return e.writeTask(ctx, nil, func(ctx context.Context, c taskWriter) error {
			return e.printed(c.UpdateStatus(ctx, id, req))
		})
	}
}
