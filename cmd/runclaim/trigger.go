package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// newTriggerCommand makes 'runclaim trigger', which lets a source's next claim in.
func newTriggerCommand(c *cli) *cobra.Command {
	cmd := define(c, &cobra.Command{
		Use:   "trigger <source>",
		Short: "let a source's next claim win despite its minimum interval or a done tick, once",
		Long: `Starts one run of a source by hand, as soon as a replica next claims it: that
claim wins despite the minimum interval since the last run, or a tick
already served ('runclaim exec --tick'). The trigger is used by that one
claim; triggering again before it changes nothing. Pauses and triggers
need the runs table at schema version 5 ('runclaim migrate').

It does not break in: while a run holds the source, or the source is
paused, claims are skipped as usual and the trigger waits, to be used by
the first claim after the run ends or the pause does. 'runclaim status'
shows the triggers that wait.

Examples:
  # check by hand that a ban has lifted, then let the schedule go on
  runclaim resume scraper-avito
  runclaim trigger scraper-avito

JSON output: {"source", "seen"}, where seen is false for a source that
never ran and was never paused or triggered (a note says so in text).`,
		Args:        maxArgs(1),
		Annotations: map[string]string{annotWrites: "true"},
	}, runTrigger)
	return cmd
}

// triggerOptions are trigger's: the source.
type triggerOptions struct {
	sourceArg
}

func runTrigger(ctx context.Context, c *cli, o *triggerOptions) int {
	target, err := openControl(c, ctx)
	if err != nil {
		return c.fail("trigger", err)
	}
	seen := true
	if target.seen != nil {
		if seen, err = target.seen(ctx, o.source); err != nil {
			return c.fail("trigger", err)
		}
	}
	if err := target.ctl.Trigger(ctx, o.source); err != nil {
		return c.fail("trigger", err)
	}
	if !seen && !c.json {
		fmt.Fprintf(c.stderr, "runclaim trigger: note: %q has never run here, and was never paused or triggered: check the name (the trigger is set, for its first claim)\n", o.source)
	}
	if c.json {
		err = writeJSON(c.stdout, struct {
			Source string `json:"source"`
			Seen   bool   `json:"seen"`
		}{o.source, seen})
	} else {
		_, err = fmt.Fprintf(c.stdout, "triggered %q: its next claim wins despite the minimum interval, once no run holds it and it is not paused\n", o.source)
	}
	if err != nil {
		return c.fail("trigger", err)
	}
	return exitOK
}
