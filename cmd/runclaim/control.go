package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The operator's controls of a source: pause, resume, trigger and replace,
// and what they share.

// controlTarget is the store the control commands act on, and its clock,
// which a pause's relative --until counts from.
type controlTarget struct {
	ctl runclaim.Controller
	now func(ctx context.Context) (time.Time, error)
	// paused reports whether source is paused now.
	paused func(ctx context.Context, source string) (bool, error)
	// seen reports whether the table knows source: a run of it, or a
	// pause or trigger; nil where the store cannot tell.
	seen func(ctx context.Context, source string) (bool, error)
}

// openControl opens the control commands' store. Tests replace it.
var openControl = (*cli).postgresControl

// postgresControl is the runs table's store as a Controller, with the
// database's clock.
func (c *cli) postgresControl(ctx context.Context) (controlTarget, error) {
	store, err := c.store(ctx)
	if err != nil {
		return controlTarget{}, err
	}
	return controlTarget{ctl: store, now: func(ctx context.Context) (time.Time, error) {
		var now time.Time
		err := c.pool.QueryRow(ctx, `SELECT pg_catalog.clock_timestamp()`).Scan(&now)
		return now, err
	}, paused: func(ctx context.Context, source string) (bool, error) {
		controls, _, err := store.Controls(ctx, source)
		return slices.ContainsFunc(controls, func(k runclaim.SourceControl) bool { return k.Paused }), err
	}, seen: func(ctx context.Context, source string) (bool, error) {
		h, err := store.Check(ctx, source, time.Hour)
		if err != nil || h.Latest != nil {
			return h.Latest != nil, err
		}
		controls, _, err := store.Controls(ctx, source)
		return len(controls) > 0, err
	}}, nil
}

// untilArg is a pause's --until: a duration from now (2h, 1d12h) or a
// time (RFC 3339, 2026-12-24T18:00:00Z). The zero value is "until
// resumed".
type untilArg struct {
	given    string
	relative time.Duration // for a duration
	at       time.Time     // for a time
}

// parseUntil parses --until.
func parseUntil(s string) (untilArg, error) {
	u := untilArg{given: s}
	if s == "" {
		return u, errors.New("empty --until: leave it out to pause until 'runclaim resume'")
	}
	if strings.Contains(s, "T") || strings.Count(s, "-") >= 2 {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return u, fmt.Errorf("--until %s: want a duration (90m, 2h, 1d) or an RFC 3339 time (2026-12-24T18:00:00Z)", s)
		}
		u.at = t
		return u, nil
	}
	d, err := parseAge(s)
	if err != nil {
		return u, fmt.Errorf("--until: %w", err)
	}
	if d <= 0 {
		return u, fmt.Errorf("--until %s: a pause must last longer than that", s)
	}
	u.relative = d
	return u, nil
}

// resolve returns the pause's end: the time given, or the duration from
// the store's clock now; zero for until resumed.
func (u untilArg) resolve(ctx context.Context, t controlTarget) (time.Time, error) {
	switch {
	case u.relative > 0:
		now, err := t.now(ctx)
		if err != nil {
			return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
		}
		return now.Add(u.relative), nil
	case !u.at.IsZero():
		now, err := t.now(ctx)
		if err != nil {
			return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
		}
		if !u.at.After(now) {
			return time.Time{}, pastUntilError{u.given, now}
		}
	}
	return u.at, nil
}

// pastUntilError is a --until time that has passed by the store's clock
// (now): a usage error.
type pastUntilError struct {
	given string
	now   time.Time
}

func (e pastUntilError) Error() string {
	return fmt.Sprintf("--until %s is in the past (the database's clock reads %s): give a time to come (--until 2h, or --until %s), or leave --until out to pause until 'runclaim resume'",
		e.given, e.now.UTC().Format(time.RFC3339), e.now.UTC().Add(24*time.Hour).Truncate(time.Hour).Format(time.RFC3339))
}

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
