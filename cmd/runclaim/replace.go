package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
)

// newReplaceCommand makes 'runclaim replace', which asks a source's
// running run to stop.
func newReplaceCommand(c *cli) *cobra.Command {
	return define(c, &cobra.Command{
		Use:   "replace <source>",
		Short: "ask a source's running run to stop, so that the next claim takes over",
		Long: `Asks the running run of a source to stop, and returns at once. Its holder
learns at its next heartbeat: under Claimer.Do its function's context is
cancelled (cause runclaim.ErrReplaced), under 'runclaim exec' the command
gets SIGTERM, then SIGKILL after --kill-grace. The run keeps its lease until
it finishes, so nothing else runs meanwhile, and is recorded "replaced";
the next claim after that wins. A holder of a release before schema
version 13 does not hear it, and runs until it ends by itself.

Unlike a claim with Replace, it keeps the source for no one. Unlike
release, it ends nothing itself: no two runs overlap.

Examples:
  runclaim replace nightly-report
  runclaim replace nightly-report --json

Exit codes: 0 asked; 1 no running run with a live lease, or a database
error; 2 bad usage.

JSON output: the run asked, shaped as in 'runclaim history'.`,
		Args:        maxArgs(1),
		Annotations: map[string]string{annotWrites: "true"},
	}, runReplace)
}

// replaceOptions are replace's: the source.
type replaceOptions struct{ sourceArg }

func runReplace(ctx context.Context, c *cli, o *replaceOptions) int {
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("replace", err)
	}
	run, err := store.RequestStop(ctx, o.source)
	if errors.Is(err, runclaim.ErrNotRunning) {
		fmt.Fprintf(c.stderr, "runclaim replace: %q has no running run with a live lease: nothing to stop\n", o.source)
		return exitError
	}
	if err != nil {
		return c.fail("replace", err)
	}
	if c.json {
		err = writeJSON(c.stdout, toRunJSON(run))
	} else {
		_, err = fmt.Fprintf(c.stdout, "asked run %d of %q, held by %s, to stop: its holder learns at its next heartbeat, and the run is recorded replaced when it ends\n",
			run.ID, o.source, run.Owner)
	}
	if err != nil {
		return c.fail("replace", err)
	}
	return exitOK
}
