package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// command is one meshd command. setup declares its flags on fs and returns
// what runs once they are parsed (args are the positional arguments, flags
// may stand before or after them).
type command struct {
	name     string // "send", or "tasks status" for a subcommand
	args     string // positional arguments for the usage line
	summary  string // one line for the command list
	long     string // the help text
	examples string
	setup    func(fs *pflag.FlagSet, e *cliEnv) func(ctx context.Context, args []string) error
}

// commands is every command, in the order `meshd help` lists them.
func commands() []*command {
	var all []*command
	for _, group := range [][]*command{daemonCommands(), lifecycleCommands(), messageCommands(), taskCommands(), socialCommands(), conformanceCommands()} {
		all = append(all, group...)
	}
	return all
}

// errUsage marks command-line mistakes (exit status 2).
var errUsage = errors.New("usage")

// usageError is a command-line mistake with the line that says it.
func usageError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

func usage() string {
	var b strings.Builder
	b.WriteString("usage: meshd <command> [flags] [arguments]   (flags may come before or after the arguments)\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-22s %s\n", c.name, c.summary)
	}
	b.WriteString(`  version                print the version

Every command takes --help (its flags and examples) and --config FILE.
Settings come from the environment over the config file (meshd init writes
~/.config/meshd/config.toml, mode 0600; MESH_CONFIG names another):
  MESH_API_URL   mesh API base URL (default http://127.0.0.1:8080)   config: api_url
  MESH_API_KEY   this agent's API key                                 config: api_key
  MESH_STATE_DIR delivery progress, logs, pid (default ~/.local/state/meshd)
  MESH_HANDLER   the handler command line of meshd run/start          config: handler
  any MESH_* variable can be set in the config file as its lower-case name without MESH_.
See meshd run --help for the handler contract.
`)
	return b.String()
}

// find returns the command args name and the arguments after its name.
func find(args []string) (*command, []string) {
	all := commands()
	if len(args) > 1 {
		for _, c := range all {
			if c.name == args[0]+" "+args[1] {
				return c, args[2:]
			}
		}
	}
	for _, c := range all {
		if c.name == args[0] {
			return c, args[1:]
		}
	}
	return nil, nil
}

// subcommands lists the subcommands of group ("tasks"), for its help.
func subcommands(group string) string {
	var names []string
	for _, c := range commands() {
		if strings.HasPrefix(c.name, group+" ") {
			names = append(names, fmt.Sprintf("  %-22s %s", c.name, c.summary))
		}
	}
	sort.Strings(names)
	return strings.Join(names, "\n")
}

// cli runs one command and returns the exit status.
func cli(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	switch args[0] {
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "meshd %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	case "help", "--help", "-h":
		if len(args) > 1 {
			return cli(ctx, append(args[1:], "--help"), getenv, stdin, stdout, stderr)
		}
		fmt.Fprint(stdout, usage())
		return 0
	}
	c, rest := find(args)
	if c == nil {
		if subs := subcommands(args[0]); subs != "" {
			if len(args) == 1 || args[1] == "--help" || args[1] == "-h" {
				fmt.Fprintf(stdout, "usage: meshd %s <subcommand> [flags]\n\n%s\n", args[0], subs)
				return 0
			}
			fmt.Fprintf(stderr, "meshd: unknown command %q\n%s\n", args[0]+" "+args[1], subs)
			return 2
		}
		fmt.Fprintf(stderr, "meshd: unknown command %q\n%s", args[0], usage())
		return 2
	}
	e := &cliEnv{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	fs := pflag.NewFlagSet("meshd "+c.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&e.configPath, "config", "", "config file (default MESH_CONFIG, else ~/.config/meshd/config.toml)")
	run := c.setup(fs, e)
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, help(c, fs))
			return 0
		}
		fmt.Fprintf(stderr, "meshd %s: %v (see meshd %s --help)\n", c.name, err, c.name)
		return 2
	}
	e.dashAt = fs.ArgsLenAtDash()
	return exitCode(run(ctx, fs.Args()), c, stderr)
}

// help is the --help text of c.
func help(c *command, fs *pflag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: meshd %s [flags] %s\n\n%s\n", c.name, c.args, c.summary)
	if c.long != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(c.long, "\n"))
	}
	fmt.Fprintf(&b, "\nflags (before or after the arguments):\n%s", fs.FlagUsages())
	if c.examples != "" {
		fmt.Fprintf(&b, "\nexamples:\n%s\n", strings.TrimRight(c.examples, "\n"))
	}
	return b.String()
}

// exitCode prints err as one line a person can act on and maps it to the
// exit status: 2 for a usage mistake, 65 when the mesh refused the call for
// good (the handler contract's permanent failure, so "exec meshd reply"
// passes it on), 1 otherwise.
func exitCode(err error, c *command, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	msg := strings.TrimPrefix(strings.SplitN(err.Error(), "\n", 2)[0], "meshd: ")
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "meshd %s: %s (see meshd %s --help)\n", c.name, strings.TrimPrefix(msg, "usage: "), c.name)
		return 2
	case meshclient.IsStatus(err, 401):
		fmt.Fprintf(stderr, "meshd: %s: the mesh refused the API key: check MESH_API_KEY (or api_key in the config file; meshd whoami tests it)\n", msg)
		return meshd.ExitPermanent
	case meshd.IsPermanent(err):
		fmt.Fprintf(stderr, "meshd: %s\n", msg)
		return meshd.ExitPermanent
	default:
		fmt.Fprintf(stderr, "meshd: %s\n", msg)
		return 1
	}
}
