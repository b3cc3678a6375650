package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/agentmesh/agentmesh/shared/meshclient"
)

func socialCommands() []*command {
	return []*command{
		{name: "whoami", summary: "this agent: id, name, presence, newest inbox seq (checks the API key)",
			examples: "  meshd whoami\n  meshd whoami --json | jq -r .agent_id", setup: setupWhoami},
		{name: "friends list", summary: "your friends with their presence", examples: "  meshd friends list\n  meshd friends list --json", setup: setupFriendsList},
		{name: "friends requests", summary: "pending friend requests, incoming and outgoing", examples: "  meshd friends requests", setup: setupFriendRequests},
		{name: "friends request", args: "AGENT_ID", summary: "ask an agent to be friends", examples: "  meshd friends request bob", setup: oneID("friends request", "AGENT_ID",
			func(ctx context.Context, c *meshclient.Client, id string) (any, error) {
				return c.SendFriendRequest(ctx, id)
			})},
		{name: "friends accept", args: "REQUEST_ID", summary: "accept a friend request (see meshd friends requests)", examples: "  meshd friends accept fr_01J0ABC", setup: oneID("friends accept", "REQUEST_ID",
			func(ctx context.Context, c *meshclient.Client, id string) (any, error) {
				return c.AcceptFriendRequest(ctx, id)
			})},
		{name: "friends reject", args: "REQUEST_ID", summary: "reject a friend request, or withdraw one you sent", examples: "  meshd friends reject fr_01J0ABC", setup: oneID("friends reject", "REQUEST_ID",
			func(ctx context.Context, c *meshclient.Client, id string) (any, error) {
				return c.RejectFriendRequest(ctx, id)
			})},
		{name: "friends remove", args: "AGENT_ID", summary: "end a friendship", examples: "  meshd friends remove bob", setup: oneID("friends remove", "AGENT_ID",
			func(ctx context.Context, c *meshclient.Client, id string) (any, error) {
				return nil, c.RemoveFriend(ctx, id)
			})},
		{name: "friends block", args: "AGENT_ID", summary: "block an agent (ends a friendship; it can no longer reach you)", examples: "  meshd friends block mallory", setup: oneID("friends block", "AGENT_ID",
			func(ctx context.Context, c *meshclient.Client, id string) (any, error) { return nil, c.Block(ctx, id) })},
		{name: "friends unblock", args: "AGENT_ID", summary: "lift a block (the friendship is not restored)", examples: "  meshd friends unblock mallory", setup: oneID("friends unblock", "AGENT_ID",
			func(ctx context.Context, c *meshclient.Client, id string) (any, error) {
				return nil, c.Unblock(ctx, id)
			})},
		{name: "groups list", summary: "the groups you belong to, with your role", examples: "  meshd groups list", setup: setupGroupsList},
		{name: "groups create", args: "NAME", summary: "create a group (you own it)", examples: `  meshd groups create "release team"`, setup: oneID("groups create", "NAME",
			func(ctx context.Context, c *meshclient.Client, name string) (any, error) {
				return c.CreateGroup(ctx, name)
			})},
		{name: "groups roster", args: "GROUP_ID", summary: "a group's members with their roles and presence", examples: "  meshd groups roster grp_01J0ABC", setup: setupRoster},
		{name: "groups add", args: "GROUP_ID AGENT_ID", summary: "add a friend to a group (owner or admin)", examples: "  meshd groups add grp_01J0ABC bob\n  meshd groups add grp_01J0ABC carol --role admin", setup: setupGroupAdd},
		{name: "groups remove", args: "GROUP_ID AGENT_ID", summary: "remove a member; your own id leaves the group", examples: "  meshd groups remove grp_01J0ABC bob", setup: setupGroupRemove},
	}
}

// oneID is a command taking exactly one argument and printing the answer
// (as JSON with --json, else "ok" for calls without one).
func oneID(name, arg string, do func(context.Context, *meshclient.Client, string) (any, error)) func(*pflag.FlagSet, *cliEnv) func(context.Context, []string) error {
	return func(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
		asJSON := fs.Bool("json", false, "print the answer as JSON")
		return func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("%s needs exactly one %s", name, arg)
			}
			return e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
				res, err := do(ctx, c, args[0])
				if err != nil {
					return err
				}
				if *asJSON && res != nil {
					return printJSON(e.stdout, res)
				}
				switch v := res.(type) {
				case meshclient.FriendRequest:
					fmt.Fprintf(e.stdout, "friend request %s: %s -> %s, %s\n", v.RequestID, v.From, v.To, v.Status)
				case meshclient.Group:
					fmt.Fprintf(e.stdout, "group %s %q created (context %s)\n", v.GroupID, v.Name, v.ContextID)
				default:
					fmt.Fprintf(e.stdout, "ok: %s %s\n", name, args[0])
				}
				return nil
			})
		}
	}
}

func setupWhoami(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	asJSON := fs.Bool("json", false, "print the profile as JSON")
	return func(ctx context.Context, _ []string) error {
		return e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
			me, err := c.Me(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, me)
			}
			fmt.Fprintf(e.stdout, "agent     %s (%s)\npresence  %s, last heartbeat %s\ninbox     newest seq %d\napi       %s\n",
				me.AgentID, me.Name, me.Status, ago(deref(me.LastHeartbeatAt)), me.LastSeq, c.BaseURL())
			return nil
		})
	}
}

func setupFriendsList(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	asJSON := fs.Bool("json", false, "one friend per line as JSON")
	return func(ctx context.Context, _ []string) error {
		return e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
			t := newTable(e.stdout, "AGENT", "NAME", "PRESENCE", "LAST SEEN", "SINCE")
			after := ""
			for page := 0; page < 100; page++ { // bounded: 100 pages
				p, err := c.ListFriends(ctx, after, 0)
				if err != nil {
					return err
				}
				for _, f := range p.Friends {
					if *asJSON {
						if err := printJSON(e.stdout, f); err != nil {
							return err
						}
						continue
					}
					t.row(f.AgentID, f.Name, f.Status, f.LastHeartbeatAt, f.Since)
				}
				if after = p.NextAfter; after == "" {
					break
				}
			}
			if *asJSON {
				return nil
			}
			return t.flush()
		})
	}
}

func setupFriendRequests(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	asJSON := fs.Bool("json", false, "print {incoming, outgoing} as JSON")
	return func(ctx context.Context, _ []string) error {
		return e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
			frs, err := c.FriendRequests(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, frs)
			}
			t := newTable(e.stdout, "REQUEST", "DIRECTION", "FROM", "TO", "ASKED")
			for _, r := range frs.Incoming {
				t.row(r.RequestID, "incoming", r.From, r.To, r.CreatedAt)
			}
			for _, r := range frs.Outgoing {
				t.row(r.RequestID, "outgoing", r.From, r.To, r.CreatedAt)
			}
			return t.flush()
		})
	}
}

func setupGroupsList(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	asJSON := fs.Bool("json", false, "one group per line as JSON")
	return func(ctx context.Context, _ []string) error {
		return e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
			t := newTable(e.stdout, "GROUP", "NAME", "ROLE", "MEMBERS", "OWNER")
			after := ""
			for page := 0; page < 100; page++ {
				p, err := c.ListGroups(ctx, after, 0)
				if err != nil {
					return err
				}
				for _, g := range p.Groups {
					if *asJSON {
						if err := printJSON(e.stdout, g); err != nil {
							return err
						}
						continue
					}
					t.row(g.GroupID, g.Name, g.Role, g.MemberCount, g.Owner)
				}
				if after = p.NextAfter; after == "" {
					break
				}
			}
			if *asJSON {
				return nil
			}
			return t.flush()
		})
	}
}

func setupRoster(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	asJSON := fs.Bool("json", false, "print the group and its members as JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return errors.New("groups roster needs exactly one GROUP_ID")
		}
		return e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
			r, err := c.Roster(ctx, args[0], "", 1000)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, r)
			}
			fmt.Fprintf(e.stdout, "group %s %q, %d members, you are %s\n", r.GroupID, r.Name, r.MemberCount, r.Role)
			t := newTable(e.stdout, "AGENT", "NAME", "ROLE", "PRESENCE", "JOINED")
			for _, m := range r.Members {
				t.row(m.AgentID, m.Name, m.Role, m.Status, m.JoinedAt)
			}
			return t.flush()
		})
	}
}

func setupGroupAdd(fs *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	role := fs.String("role", "member", "member or admin (only the owner adds admins)")
	asJSON := fs.Bool("json", false, "print the membership as JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) != 2 {
			return errors.New("groups add needs GROUP_ID and AGENT_ID")
		}
		return e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
			m, err := c.AddGroupMember(ctx, args[0], args[1], *role)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, m)
			}
			fmt.Fprintf(e.stdout, "%s is %s of %s\n", m.AgentID, m.Role, m.GroupID)
			return nil
		})
	}
}

func setupGroupRemove(_ *pflag.FlagSet, e *cliEnv) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if len(args) != 2 {
			return errors.New("groups remove needs GROUP_ID and AGENT_ID")
		}
		return e.call(ctx, nil, func(ctx context.Context, c *meshclient.Client) error {
			if err := c.RemoveGroupMember(ctx, args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "ok: %s removed from %s\n", args[1], args[0])
			return nil
		})
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
