package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// maxTicks bounds the ticks 'ticks' lists: a schedule of every second over
// a week is a mistake to say, not six hundred thousand rows to print.
const maxTicks = 10000

// newTicksCommand makes 'runclaim ticks': what became of each tick of a
// schedule.
func newTicksCommand(c *cli) *cobra.Command {
	return define(c, &cobra.Command{
		Use:   "ticks <source> --schedule SPEC [--since D]",
		Short: "list each tick of a schedule with what became of it: ran, overlapped, paused or not run",
		Long: `Lists each tick of the schedule SPEC within the last D (default 24h), by the
database's clock, oldest first, with what became of it:

  ran         a run served it: the run that named the tick (ForTick,
              exec --tick), else the first run that started between the
              tick and the next one; with its status and how late it
              started after the tick
  overlapped  no run: a run that started before the tick was still
              running at it (the claim was skipped as already running)
  paused      no run: the source's current pause covers the tick
  not run     no run and none of the above: no replica claimed it (the
              scheduler was down, or the claim failed)

A skip writes nothing, so the reason is derived from the runs and the
pause, not read from a log. Only the current pause is known (the table
keeps one per source): a tick skipped under a pause that has since been
resumed shows as not run. A tick that has just come may show as not run
because its claim has not been made yet.

SPEC is a cron schedule as robfig/cron's ParseStandard reads it: five
fields ("*/5 * * * *"), a descriptor ("@hourly"), and an optional
"CRON_TZ=Europe/Moscow " prefix; without one, the ticks are in UTC.
"@every D" ticks at the multiples of D on the wall clock, as
runclaim.Every(D) does.
Use the schedule the jobs run on. At most 10000 ticks are listed.

Examples:
  runclaim ticks nightly-report --schedule '0 3 * * *' --since 7d
  runclaim ticks sweep --schedule '@every 5m' --json

JSON output: an array of {"tick", "outcome" ("ran", "overlapped",
"paused" or "not run"), "run_id", "status", "late_seconds",
"overlapped_by"}, where a value that does not apply is null.`,
		Args: maxArgs(1),
	}, runTicks)
}

// ticksOptions are ticks': the source, the schedule and --since.
type ticksOptions struct {
	sourceArg
	spec, sinceArg string
	sched          runclaim.Schedule // parsed by Validate
	since          time.Duration
}

func (o *ticksOptions) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.spec, "schedule", "", "the schedule's `SPEC` (required; e.g. '*/5 * * * *' or '@every 10m')")
	fs.StringVar(&o.sinceArg, "since", "24h", "list the ticks of the last `D` (e.g. 90m, 7d)")
}

// Validate checks the source, the schedule and --since.
func (o *ticksOptions) Validate() error {
	if err := o.validate("give a source"); err != nil {
		return err
	}
	sched, err := parseSchedule(o.spec)
	if err != nil {
		return err
	}
	o.sched = sched
	o.since, err = parsePositiveAge("--since", o.sinceArg)
	return err
}

// parseSchedule parses --schedule: "@every D" is runclaim.Every(D), whose
// ticks are the multiples of D on the wall clock, the same on every
// replica (robfig/cron's counts from the moment it is asked, which no
// two replicas share); any other spec is robfig/cron's.
func parseSchedule(spec string) (runclaim.Schedule, error) {
	if spec == "" {
		return nil, errors.New("--schedule is required (e.g. --schedule '*/5 * * * *' or '@every 10m')")
	}
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || every < time.Second {
			return nil, fmt.Errorf("--schedule %q: @every takes a duration of a second or more (e.g. '@every 10m')", spec)
		}
		return runclaim.Every(every), nil
	}
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("--schedule %q: %v (e.g. '*/5 * * * *', '0 3 * * *' or '@every 10m')", spec, err)
	}
	return sched, nil
}

// Outcomes of a tick.
const (
	tickRan        = "ran"
	tickOverlapped = "overlapped"
	tickPaused     = "paused"
	tickNotRun     = "not run"
)

// tickRow is what became of one tick.
type tickRow struct {
	Tick         time.Time
	Outcome      string
	Run          *runclaim.RunRecord // the run that served it (ran) or overlapped it
	Late         time.Duration       // the run's start after the tick (ran)
	OverlappedBy int64               // the run that was running at the tick (overlapped)
}

// ticksOf returns the ticks of sched in [from, now], oldest first, or an
// error if there are more than maxTicks.
func ticksOf(sched runclaim.Schedule, from, now time.Time) ([]time.Time, error) {
	var out []time.Time
	for t := sched.Next(from.Add(-time.Nanosecond)); !t.IsZero() && !t.After(now); t = sched.Next(t) {
		if len(out) == maxTicks {
			return nil, fmt.Errorf("the schedule has more than %d ticks in the range: give a shorter --since", maxTicks)
		}
		out = append(out, t)
	}
	return out, nil
}

// heldUntil is when a run stopped holding its source: its finish, or,
// for an expired run, its lease's end (a later claim expired it after
// that); for a running run, its lease's end, or the far future while it
// is live at now.
func heldUntil(r runclaim.RunRecord, now time.Time) time.Time {
	switch {
	case r.Status == runclaim.StatusRunning && r.LeaseUntil.After(now):
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	case r.Status == runclaim.StatusRunning, r.Status == runclaim.StatusExpired && (r.FinishedAt.IsZero() || r.LeaseUntil.Before(r.FinishedAt)):
		return r.LeaseUntil
	}
	return r.FinishedAt
}

// describeTicks says what became of each tick in ticks (ascending, in
// the range the runs were read for), from runs (the source's runs that
// started in that range, and the one before it, any order) and its
// current pause (ctl, nil for none).
func describeTicks(sched runclaim.Schedule, ticks []time.Time, runs []runclaim.RunRecord, ctl *runclaim.SourceControl, now time.Time) []tickRow {
	out := make([]tickRow, len(ticks))
	at := make(map[time.Time]int, len(ticks))
	for i, t := range ticks {
		out[i] = tickRow{Tick: t, Outcome: tickNotRun}
		at[t.UTC()] = i
	}
	serve := func(i int, r *runclaim.RunRecord) {
		if out[i].Run == nil || r.StartedAt.Before(out[i].Run.StartedAt) {
			out[i].Outcome, out[i].Run, out[i].Late = tickRan, r, r.StartedAt.Sub(out[i].Tick)
		}
	}
	// The runs that named a tick of the schedule serve it; the others,
	// the tick they started after (before the next one).
	for j := range runs {
		r := &runs[j]
		if i, ok := at[r.Tick.UTC()]; ok && !r.Tick.IsZero() {
			serve(i, r)
		}
	}
	// The ticks are consecutive ticks of the schedule, so a run started
	// between a tick and the next one is found by a search, as is, for a
	// tick no run served, the latest run started before it: the only one
	// that can have held the source then, a source having one running run
	// at a time.
	byStart := make([]*runclaim.RunRecord, len(runs))
	for j := range runs {
		byStart[j] = &runs[j]
	}
	slices.SortFunc(byStart, func(a, b *runclaim.RunRecord) int { return a.StartedAt.Compare(b.StartedAt) })
	for _, r := range byStart {
		if _, ok := at[r.Tick.UTC()]; ok && !r.Tick.IsZero() {
			continue
		}
		// The latest tick at or before the start.
		i, found := slices.BinarySearchFunc(ticks, r.StartedAt, time.Time.Compare)
		if !found {
			i--
		}
		if i >= 0 && r.StartedAt.Before(sched.Next(ticks[i])) && out[i].Run == nil {
			serve(i, r)
		}
	}
	for i, t := range ticks {
		if out[i].Outcome == tickRan {
			continue
		}
		// The latest run started before the tick.
		j, _ := slices.BinarySearchFunc(byStart, t, func(r *runclaim.RunRecord, t time.Time) int { return r.StartedAt.Compare(t) })
		if j--; j >= 0 && heldUntil(*byStart[j], now).After(t) {
			out[i].Outcome, out[i].OverlappedBy, out[i].Run = tickOverlapped, byStart[j].ID, byStart[j]
		}
		if out[i].Outcome == tickNotRun && ctl != nil && !ctl.PausedAt.IsZero() && !ctl.PausedAt.After(t) &&
			(ctl.PausedUntil.IsZero() || ctl.PausedUntil.After(t)) {
			out[i].Outcome = tickPaused
		}
	}
	return out
}

// errEnough stops a history read that has read what it needs.
var errEnough = errors.New("enough")

// readTicks reads what became of the ticks of sched in the last since.
func readTicks(ctx context.Context, store *runclaim.PostgresStore, source string, sched runclaim.Schedule, since time.Duration) ([]tickRow, time.Time, error) {
	ctls, now, err := store.Controls(ctx, source)
	if err != nil {
		return nil, time.Time{}, err
	}
	var ctl *runclaim.SourceControl
	if len(ctls) == 1 {
		ctl = &ctls[0]
	}
	ticks, err := ticksOf(sched, now.Add(-since), now)
	if err != nil {
		return nil, now, err
	}
	if len(ticks) == 0 {
		return nil, now, nil
	}
	// The runs that started since the first tick, newest first, and the
	// one before them, which may have been running at it: a source has
	// one running run at a time.
	var runs []runclaim.RunRecord
	err = store.HistoryFunc(ctx, source, 1<<30, func(r runclaim.RunRecord) error {
		runs = append(runs, r)
		if r.StartedAt.Before(ticks[0]) {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, now, err
	}
	return describeTicks(sched, ticks, runs, ctl, now), now, nil
}

func runTicks(ctx context.Context, c *cli, o *ticksOptions) int {
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("ticks", err)
	}
	rows, _, err := readTicks(ctx, store, o.source, o.sched, o.since)
	if err != nil {
		return c.fail("ticks", err)
	}
	if c.json {
		type tickJSON struct {
			Tick         time.Time `json:"tick"`
			Outcome      string    `json:"outcome"`
			RunID        *int64    `json:"run_id"`
			Status       *string   `json:"status"`
			LateSeconds  *float64  `json:"late_seconds"`
			OverlappedBy *int64    `json:"overlapped_by"`
		}
		out := make([]tickJSON, 0, len(rows))
		for _, r := range rows {
			j := tickJSON{Tick: r.Tick.UTC(), Outcome: r.Outcome}
			switch r.Outcome {
			case tickRan:
				status, late := string(r.Run.Status), seconds(r.Late)
				j.RunID, j.Status, j.LateSeconds = &r.Run.ID, &status, &late
			case tickOverlapped:
				j.OverlappedBy = &r.OverlappedBy
			}
			out = append(out, j)
		}
		err = writeJSON(c.stdout, out)
	} else if len(rows) == 0 {
		_, err = fmt.Fprintf(c.stdout, "the schedule has no tick in the last %s\n", o.sinceArg)
	} else {
		t := newTable(c.stdout, "TICK", "OUTCOME", "RUN", "STATUS", "LATE")
		for _, r := range rows {
			run, status, late := "-", "-", "-"
			switch r.Outcome {
			case tickRan:
				run, status, late = strconv.FormatInt(r.Run.ID, 10), string(r.Run.Status), formatDuration(r.Late)
			case tickOverlapped:
				run = "by run " + strconv.FormatInt(r.OverlappedBy, 10)
			}
			t.row(formatTime(r.Tick), r.Outcome, run, status, late)
		}
		err = t.flush()
	}
	if err != nil {
		return c.fail("ticks", err)
	}
	return exitOK
}
