package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newResumeCommand makes 'runclaim resume', which ends a source's pause.
func newResumeCommand(c *cli) *cobra.Command {
	cmd := define(c, &cobra.Command{
		Use:   "resume <source>",
		Short: "end a source's pause",
		Long: `Ends the pause of a source that 'runclaim pause' paused: its next claim
goes ahead as usual (the minimum interval still applies; see 'runclaim
trigger'). A source that is not paused is left as it is, and resume
succeeds, saying that it was not paused (was_paused is false in JSON): a
mistyped source name shows.

Examples:
  runclaim resume scraper-avito
  runclaim resume scraper-avito && runclaim trigger scraper-avito

JSON output: {"source", "was_paused"}, where was_paused says whether the
source was paused when resume read it, just before it resumed it.`,
		Args:        maxArgs(1),
		Annotations: map[string]string{annotWrites: "true"},
	}, runResume)
	return cmd
}

// resumeOptions are resume's: the source.
type resumeOptions struct {
	sourceArg
}

func runResume(ctx context.Context, c *cli, o *resumeOptions) int {
	target, err := openControl(c, ctx)
	if err != nil {
		return c.fail("resume", err)
	}
	wasPaused, err := target.paused(ctx, o.source)
	if err != nil {
		return c.fail("resume", err)
	}
	if err := target.ctl.Resume(ctx, o.source); err != nil {
		return c.fail("resume", err)
	}
	switch {
	case c.json:
		err = writeJSON(c.stdout, struct {
			Source    string `json:"source"`
			WasPaused bool   `json:"was_paused"`
		}{o.source, wasPaused})
	case wasPaused:
		_, err = fmt.Fprintf(c.stdout, "resumed %q: it is not paused\n", o.source)
	default:
		_, err = fmt.Fprintf(c.stdout, "%q was not paused: nothing to resume\n", o.source)
	}
	if err != nil {
		return c.fail("resume", err)
	}
	return exitOK
}

// sourceArg is the options of a command whose one argument is a source.
type sourceArg struct {
	source    string
	hasSource bool
}

func (o *sourceArg) flags(*pflag.FlagSet) {}

func (o *sourceArg) args(args []string) {
	if len(args) == 1 {
		o.source, o.hasSource = args[0], true
	}
}

// Validate checks the source.
func (o *sourceArg) Validate() error { return o.validate("give a source") }

// validate checks that a valid source was given; missing says what to do
// when none was.
func (o *sourceArg) validate(missing string) error {
	if !o.hasSource {
		return errors.New(missing)
	}
	return runclaim.ValidateSource(o.source)
}
