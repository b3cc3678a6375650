// Command meshlocal runs the whole mesh on this machine: a private MariaDB
// (or MYSQL_DSN), an embedded Kafka broker (or KAFKA_BROKERS), the schema
// migrations, every route and schedule of template.yaml served by the same
// handlers the Lambda functions use, and two demo agents that exchange a
// message. `make run` builds and starts it; Ctrl-C stops it.
//
// Credentials are printed to the terminal only; the structured log goes to
// .local/meshlocal/meshlocal.log (warnings and errors also to stderr), or
// all of it to stderr with MESH_LOG=stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	demo := flag.Bool("demo", true, "create the demo agents alice and bob and run the demo exchange")
	partial := flag.Bool("partial", false, "serve even if some template functions have no handler yet (their routes answer 501)")
	addr := flag.String("addr", "", "listen address (default $MESH_HTTP_ADDR or "+DefaultHTTPAddr+")")
	flag.Parse()

	getenv := os.Getenv
	if *addr != "" {
		getenv = func(k string) string {
			if k == "MESH_HTTP_ADDR" {
				return *addr
			}
			return os.Getenv(k)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first Ctrl-C starts the clean shutdown, a second one kills
	// the process the default way.
	go func() { <-ctx.Done(); stop() }()
	wd, _ := os.Getwd()
	err := Run(ctx, Options{Dir: wd, Getenv: getenv, Demo: *demo, Partial: *partial})
	if err != nil {
		// One line that says what failed and what to do.
		fmt.Fprintln(os.Stderr, "meshlocal: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		os.Exit(1)
	}
}
