// compose-check loads docker-compose files with compose-go, the loader of `docker compose` v2:
// the Compose Specification's schema, `.env` interpolation, merging of several -f files and
// normalisation. It prints the resulting project as JSON, or the loader's error and exits 1.
// No Docker engine is needed; tests/integration/test_deploy_compose.py builds and runs it.
//
//	compose-check -C DIR [-profile NAME]... FILE...   (FILE paths are relative to the current directory)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/compose-spec/compose-go/v2/cli"
)

type profiles []string

func (p *profiles) String() string     { return fmt.Sprint(*p) }
func (p *profiles) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	dir := flag.String("C", ".", "project directory (where .env is read)")
	var enabled profiles
	flag.Var(&enabled, "profile", "enable a profile (repeatable)")
	flag.Parse()
	opts, err := cli.NewProjectOptions(flag.Args(),
		cli.WithWorkingDirectory(*dir),
		cli.WithEnvFiles(),
		cli.WithDotEnv,
		cli.WithName("borg"),
		cli.WithProfiles(enabled),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-check:", err)
		os.Exit(1)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-check:", err)
		os.Exit(1)
	}
	out, err := project.MarshalJSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-check:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
