// Command samlocal writes what the SAM CLI's local runs need beyond
// template.yaml (see shared/samlocal), for infra/podman.sh and
// infra/sam-local.sh:
//
//	samlocal env -dsn DSN [-brokers B] [-secrets .local/meshlocal/secrets.json]
//	    prints the --env-vars file, with the local mesh's keys (meshlocal's
//	    secrets file, generated when missing);
//	samlocal template -arch x86_64|arm64 -out FILE
//	    writes template.yaml as a local build wants it (the host's
//	    architecture, CodeUri the repository).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentmesh/agentmesh/shared/localstack"
	"github.com/agentmesh/agentmesh/shared/samlocal"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "env":
		fs := flag.NewFlagSet("env", flag.ExitOnError)
		dsn := fs.String("dsn", "", "the database DSN as the containers reach it (required)")
		brokers := fs.String("brokers", "", "Kafka brokers as the containers reach them (optional)")
		secrets := fs.String("secrets", ".local/meshlocal/secrets.json", "the local keys' file (meshlocal's)")
		_ = fs.Parse(os.Args[2:])
		err = env(*dsn, *brokers, *secrets)
	case "template":
		fs := flag.NewFlagSet("template", flag.ExitOnError)
		arch := fs.String("arch", "", "the Lambda architecture to build for: x86_64 or arm64 (required)")
		out := fs.String("out", "", "where to write the template (required)")
		_ = fs.Parse(os.Args[2:])
		err = template(*arch, *out)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "samlocal:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: samlocal env -dsn DSN [-brokers B] [-secrets FILE] | samlocal template -arch ARCH -out FILE")
	os.Exit(2)
}

func env(dsn, brokers, secretsPath string) error {
	s, err := localstack.LoadSecrets(secretsPath, os.Getenv)
	if err != nil {
		return err
	}
	vars, err := samlocal.Vars(s, dsn, brokers)
	if err != nil {
		return err
	}
	b, err := samlocal.EnvFile(vars)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(b)
	return err
}

func template(arch, out string) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	src, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	if err != nil {
		return fmt.Errorf("run from the repository's root: %w", err)
	}
	b, err := samlocal.LocalTemplate(src, root, arch, nil)
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}
