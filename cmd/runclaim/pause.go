package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newPauseCommand makes 'runclaim pause', which pauses a source.
func newPauseCommand(c *cli) *cobra.Command {
	cmd := define(c, &cobra.Command{
		Use:   "pause <source> [--until DURATION|TIME] [--note TEXT]",
		Short: "skip every claim of a source until it is resumed, or for a while",
		Long: `Pauses a source on every replica at once, without a deploy: every claim of
it is skipped (runclaim.ErrPaused; 'runclaim exec' exits with its
--skip-exit-code) until 'runclaim resume', or until the pause's end. The
note is shown with every skip and in 'runclaim status'. Pausing a paused
source replaces its pause, note included.

A pause never stops a running run: it goes on, heartbeats and records its
outcome. To stop it now, 'runclaim release' it as well: its holder's
context is cancelled at its next heartbeat.

--until is a duration from now by the database's clock (90m, 2h, 1d12h) or
a time (RFC 3339: 2026-12-24T18:00:00Z). A time that has passed is refused.
Without --until the pause lasts until 'runclaim resume'.

The note is at most 1024 bytes of UTF-8 without NUL bytes. Pauses need
the runs table at schema version 5 ('runclaim migrate').

Examples:
  runclaim pause scraper-avito --note "banned; ticket 42"
  runclaim pause nightly-report --until 6h --note "db maintenance"
  runclaim pause sync --until 2026-12-27T08:00:00Z --json

JSON output: {"source", "paused_until" (null: until resumed), "note"}`,
		Args:        maxArgs(1),
		Annotations: map[string]string{annotWrites: "true"},
	}, runPause)
	return cmd
}

// pauseOptions are pause's: the source, --until and --note.
type pauseOptions struct {
	sourceArg
	untilArg string
	untilSet bool // --until was given, perhaps empty
	note     string
	until    untilArg // parsed by Validate
}

func (o *pauseOptions) flags(fs *pflag.FlagSet) {
	fs.Func("until", "pause for `DURATION` (2h, 1d) or until a TIME (RFC 3339); default: until resumed", func(s string) error {
		o.untilArg, o.untilSet = s, true
		return nil
	})
	fs.StringVar(&o.note, "note", "", "why the source is paused, shown with every skip (at most 1024 bytes)")
}

// Validate checks the source, the note and --until.
func (o *pauseOptions) Validate() error {
	if err := o.validate("give the source to pause"); err != nil {
		return err
	}
	if err := checkNote("pause", o.note); err != nil {
		return fmt.Errorf("--note: %w", err)
	}
	if o.untilSet {
		u, err := parseUntil(o.untilArg)
		if err != nil {
			return err
		}
		o.until = u
	}
	return nil
}

func runPause(ctx context.Context, c *cli, o *pauseOptions) int {
	target, err := openControl(c, ctx)
	if err != nil {
		return c.fail("pause", err)
	}
	until, err := o.until.resolve(ctx, target)
	if pe := (pastUntilError{}); errors.As(err, &pe) {
		return c.badUsage("%v", pe)
	}
	if err != nil {
		return c.fail("pause", err)
	}
	if err := target.ctl.Pause(ctx, o.source, until, o.note); err != nil {
		return c.fail("pause", err)
	}
	if c.json {
		var end *time.Time
		if !until.IsZero() {
			end = &until
		}
		err = writeJSON(c.stdout, struct {
			Source      string     `json:"source"`
			PausedUntil *time.Time `json:"paused_until"`
			Note        string     `json:"note"`
		}{o.source, end, o.note})
	} else {
		end := "until 'runclaim resume'"
		if !until.IsZero() {
			end = "until " + formatTime(until)
		}
		note := ""
		if o.note != "" {
			note = " (note: " + visible(o.note) + ")"
		}
		_, err = fmt.Fprintf(c.stdout, "paused %q %s%s; a running run goes on (see 'runclaim release')\n", o.source, end, note)
	}
	if err != nil {
		return c.fail("pause", err)
	}
	return exitOK
}
