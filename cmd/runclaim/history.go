package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// defaultHistoryLimit is how many runs history shows unless --limit says.
const defaultHistoryLimit = 20

// newHistoryCommand makes 'runclaim history', which lists a source's latest runs.
func newHistoryCommand(c *cli) *cobra.Command {
	cmd := define(c, &cobra.Command{
		Use:   "history <source> [--limit N]",
		Short: "list a source's latest runs, newest first",
		Long: `Lists the latest runs of a source, newest first: running, succeeded, failed
(with the error, such as "exit status 3" from exec), expired (its holder
stopped heartbeating and a later claim took over) or released (by an
operator).

Runs are printed as they are read, so a long history (--limit 1000000)
takes no more memory than a short one; the table's columns are sized on
each block of 1000 rows.

Examples:
  runclaim history nightly-report
  runclaim history nightly-report --limit 100 --json

JSON output: an array of
  {"run_id", "source", "status", "owner", "started_at", "lease_until",
   "heartbeat_at", "finished_at", "tick", "duration_seconds", "error"}
where finished_at and duration_seconds are null while the run is running,
tick is the scheduled tick the run serves (ForTick, exec --tick) or null,
and error is "" when there is none. An expired run's duration runs to its
last heartbeat (heartbeat_at), the last time its holder was known to be at
work, not to its finished_at, when a later claim found its lease over; the
table shows it as "≥" that.`,
		Args: maxArgs(1),
	}, runHistory)
	return cmd
}

// historyOptions are history's: a source and --limit.
type historyOptions struct {
	source    string
	hasSource bool
	limit     int
}

func (o *historyOptions) flags(fs *pflag.FlagSet) {
	fs.IntVar(&o.limit, "limit", defaultHistoryLimit, "show at most `N` runs")
}

func (o *historyOptions) args(args []string) {
	if len(args) == 1 {
		o.source, o.hasSource = args[0], true
	}
}

// Validate checks that a valid source is given and --limit is positive.
func (o *historyOptions) Validate() error {
	if !o.hasSource {
		return errors.New("give a source")
	}
	if err := runclaim.ValidateSource(o.source); err != nil {
		return err
	}
	if o.limit <= 0 {
		return fmt.Errorf("--limit must be positive, got %d", o.limit)
	}
	return nil
}

func runHistory(ctx context.Context, c *cli, o *historyOptions) int {
	source, limit := o.source, o.limit
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("history", err)
	}
	// The runs are printed as they are read, so that a long history takes
	// no more memory than a short one.
	list := c.newRunList()
	if err := store.HistoryFunc(ctx, source, limit, list.add); err != nil {
		return c.fail("history", err)
	}
	if list.runs == 0 && !c.json {
		fmt.Fprintf(c.stdout, "no runs of %q\n", source)
		return exitOK
	}
	if err := list.close(); err != nil {
		return c.fail("history", err)
	}
	return exitOK
}
