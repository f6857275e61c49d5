package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// newReleaseCommand makes 'runclaim release', which ends a stuck running run.
func newReleaseCommand(c *cli) *cobra.Command {
	cmd := define(c, &cobra.Command{
		Use:   "release <source|run-id> [--yes] | release --source S | release --id N",
		Short: "end a stuck running run so that its source can be claimed again",
		Long: `Ends a running run as "released", so that the next claim of its source
succeeds without waiting for the lease to pass. Its holder, if it is still
alive, learns at its next heartbeat that the run is no longer its own: under
Claimer.Do (and 'runclaim exec') its work is cancelled.

A numeric argument is a run ID, anything else a source; use --source for a
source whose name is a number, or --id to be explicit.

It shows the run and asks "Release run 42 of "x" held by y? [y/N]" on the
terminal; only y or yes releases. Without a terminal on stdin (cron, CI,
pipes) it refuses unless --yes is given. The run released is exactly the
one shown, never one that started after the question.

Examples:
  runclaim release nightly-report
  runclaim release 4211 --yes
  runclaim release --source 2024 --yes --json

Exit codes: 0 released; 1 no such running run, declined, or a database
error; 2 bad usage, or confirmation needed but stdin is not a terminal.

JSON output: an array with the released run, shaped as in 'runclaim history'.`,
		Args:        maxArgs(1),
		Annotations: map[string]string{annotWrites: "true"},
	}, runRelease)
	return cmd
}

// releaseOptions are release's: the run, by source or ID, and --yes.
type releaseOptions struct {
	yes    bool
	source string
	id     int64
	arg    string // the source or run ID argument
	hasArg bool
}

func (o *releaseOptions) flags(fs *pflag.FlagSet) {
	fs.BoolVarP(&o.yes, "yes", "y", false, "release without asking")
	fs.StringVar(&o.source, "source", "", "release the running run of `source`")
	fs.Int64Var(&o.id, "id", 0, "release the run with this `ID`")
}

func (o *releaseOptions) args(args []string) {
	if len(args) == 1 {
		o.arg, o.hasArg = args[0], true
	}
}

// Validate checks that exactly one run is named, and sets source or id
// from the argument: a number is a run ID, anything else a source.
func (o *releaseOptions) Validate() error {
	given := 0
	for _, set := range []bool{o.hasArg, o.source != "", o.id != 0} {
		if set {
			given++
		}
	}
	if given != 1 {
		return errors.New("give exactly one of a source or run ID argument, --source or --id")
	}
	if o.hasArg {
		if id, err := strconv.ParseInt(o.arg, 10, 64); err == nil {
			o.id = id
		} else {
			o.source = o.arg
		}
	}
	if o.source != "" {
		return runclaim.ValidateSource(o.source)
	}
	if o.id <= 0 {
		return fmt.Errorf("a run ID must be positive, got %d", o.id)
	}
	return nil
}

func runRelease(ctx context.Context, c *cli, o *releaseOptions) int {
	if !o.yes && !isTerminal(c.stdin) {
		return c.badUsage("stdin is not a terminal, so there is no one to confirm; add --yes to release without asking")
	}

	store, err := c.store(ctx)
	if err != nil {
		return c.fail("release", err)
	}
	target, err := findRunning(ctx, store, o.id, o.source)
	if err != nil {
		return c.fail("release", err)
	}
	if !o.yes {
		ok, err := c.confirm(fmt.Sprintf("Release run %d of %q held by %s? [y/N] ", target.ID, target.Source, visible(target.Owner)))
		if err != nil {
			return c.fail("release", fmt.Errorf("read the answer: %w", err))
		}
		if !ok {
			fmt.Fprintf(c.stderr, "runclaim release: not released\n")
			return exitError
		}
	}
	// By ID: the run confirmed, even if the source was given.
	released, err := store.Release(ctx, target.ID, "")
	if errors.Is(err, runclaim.ErrNotRunning) {
		return c.fail("release", fmt.Errorf("run %d of %q is no longer running: it finished or was released or expired meanwhile", target.ID, target.Source))
	}
	if err != nil {
		return c.fail("release", err)
	}
	if c.json {
		list := c.newRunList()
		if err = list.add(released); err == nil {
			err = list.close()
		}
	} else {
		_, err = fmt.Fprintf(c.stdout, "released run %d of %q (held by %s since %s)\n",
			released.ID, released.Source, visible(released.Owner), formatTime(released.StartedAt))
	}
	if err != nil {
		return c.fail("release", err)
	}
	return exitOK
}

// findRunning returns the running run with ID id, or, if id is 0, the
// running run of source.
func findRunning(ctx context.Context, store *runclaim.PostgresStore, id int64, source string) (runclaim.RunRecord, error) {
	// Running has no filter by ID; the running runs are few.
	runs, _, err := store.Running(ctx, source)
	if err != nil {
		return runclaim.RunRecord{}, err
	}
	for _, r := range runs {
		if id == 0 || r.ID == id {
			return r, nil
		}
	}
	if id == 0 {
		return runclaim.RunRecord{}, fmt.Errorf("no running run of %q", source)
	}
	return runclaim.RunRecord{}, fmt.Errorf("run %d is not running (finished runs are in 'runclaim history')", id)
}

// confirm asks question on stderr and reads one line of answer from stdin.
// Only "y" or "yes", in any case, is a yes; end of input is a no.
func (c *cli) confirm(question string) (bool, error) {
	fmt.Fprint(c.stderr, question)
	line, err := bufio.NewReader(c.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	if errors.Is(err, io.EOF) && line == "" {
		fmt.Fprintln(c.stderr)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

// isTerminal reports whether r can be an operator answering a question: a
// terminal. A nil reader is not. A reader that is not an *os.File (a
// program embedding run, a test) is taken as the answers it supplies.
func isTerminal(r io.Reader) bool {
	if r == nil {
		return false
	}
	f, ok := r.(*os.File)
	return !ok || term.IsTerminal(int(f.Fd()))
}
