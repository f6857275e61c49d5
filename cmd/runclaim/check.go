package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes of check besides exitOK and exitUsage.
const (
	exitOverdue    = 1 // no success within --max-age
	exitCannotTell = 3 // the database could not be read
)

// newCheckCommand makes 'runclaim check'.
func newCheckCommand(c *cli) *cobra.Command {
	cmd := define(c, &cobra.Command{
		Use:   "check <source> [--max-age D] [--schedule SPEC --max-late D] [--max-run D]",
		Short: "exit 0 if a source is healthy: a dead man's switch, and alarms for late and overrunning runs",
		Long: `Checks a source by the database's clock, and prints one line per alarm
asked for, saying why it fired or not. For a monitoring system, a cron job
or a Kubernetes probe: an alarm for the run that did not happen, which
hooks and logs cannot give. Give one alarm or more:

  --max-age D   overdue: the newest succeeded run started more than D
                ago, or the source never succeeded. The line gives the
                last success and its age, whether a run is running, and
                whether the source is failing (its newest finished run
                failed, expired or was released).
  --max-late D  late, with --schedule SPEC (as 'runclaim ticks' reads it):
                the latest tick's run started more than D after the tick,
                or has not started D after it. A tick younger than D with
                no run yet is not judged: the tick before it is. A tick
                of a paused source is not late.
  --max-run D   overrun: a run of the source has been running longer
                than D.

D is a Go duration (90m, 26h) or a number of days (1d), or both (1d12h).

It reads at most the source's 1000 newest runs: a source whose 1000 newest
runs all failed counts as overdue.

Examples:
  runclaim check nightly-report --max-age 26h
  runclaim check nightly-report --schedule '0 3 * * *' --max-late 10m --max-run 2h
  runclaim check nightly-report --max-age 26h --json

Exit codes:
  0  no alarm fired
  1  an alarm fired (overdue, late or overrun)
  2  usage error (unknown flag, no alarm asked for, a non-positive D, a bad
     --schedule, an invalid source)
  3  cannot tell: the database is unreachable or the table is missing

JSON output:
  {"source", "healthy", "max_age_seconds", "checked_at", "last_success_at",
   "last_success_run_id", "last_success_age_seconds", "success_unread",
   "running", "running_run_id", "running_since", "failing",
   "last_finished_status", "last_finished_error", "alarms", "late_tick",
   "late_run_id", "late_seconds", "max_late_seconds", "overrun_run_id",
   "overrun_seconds", "max_run_seconds", "message", "error"}
where a value that does not apply (or an alarm not asked for) is null,
"healthy" is true when no alarm fired, "alarms" lists those that did
("overdue", "late", "overrun"), "message" is the lines printed without
--json, and "error" (else null) says why the check could not tell.`,
		Args: maxArgs(1),
	}, runCheck)
	return cmd
}

// checkOptions are check's: the source and the alarms.
type checkOptions struct {
	sourceArg
	age, spec, late, run    string
	maxAge, maxLate, maxRun time.Duration     // parsed by Validate
	sched                   runclaim.Schedule // parsed by Validate
}

func (o *checkOptions) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.age, "max-age", "", "overdue if the last success started more than `D` ago (e.g. 26h or 1d)")
	fs.StringVar(&o.spec, "schedule", "", "the source's schedule, `SPEC`, for --max-late (e.g. '0 3 * * *')")
	fs.StringVar(&o.late, "max-late", "", "late if the latest tick's run started more than `D` after it, or not at all")
	fs.StringVar(&o.run, "max-run", "", "overrun if a run has been running longer than `D`")
}

// Validate checks that one valid source and at least one alarm are given,
// each with a positive D.
func (o *checkOptions) Validate() error {
	if err := o.validate("give one source"); err != nil {
		return err
	}
	if o.age == "" && o.late == "" && o.run == "" {
		return errors.New("give an alarm: --max-age D, --schedule SPEC --max-late D, or --max-run D")
	}
	var err error
	for _, f := range []struct {
		name, arg string
		d         *time.Duration
	}{{"--max-age", o.age, &o.maxAge}, {"--max-late", o.late, &o.maxLate}, {"--max-run", o.run, &o.maxRun}} {
		if f.arg != "" {
			if *f.d, err = parsePositiveAge(f.name, f.arg); err != nil {
				return err
			}
		}
	}
	switch {
	case o.late != "" && o.spec == "":
		return errors.New("--max-late needs --schedule SPEC, the source's schedule")
	case o.spec != "" && o.late == "":
		return errors.New("--schedule is for --max-late: give --max-late D too")
	case o.spec != "":
		o.sched, err = parseSchedule(o.spec)
	}
	return err
}

// parsePositiveAge parses the value of the flag called name, an age, which must be positive.
func parsePositiveAge(name, arg string) (time.Duration, error) {
	d, err := parseAge(arg)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", name, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s must be positive, got %s", name, arg)
	}
	return d, nil
}

// checkJSON is check's answer as --json prints it.
type checkJSON struct {
	Source                string     `json:"source"`
	Healthy               bool       `json:"healthy"`
	MaxAgeSeconds         *float64   `json:"max_age_seconds"`
	CheckedAt             *time.Time `json:"checked_at"`
	LastSuccessAt         *time.Time `json:"last_success_at"`
	LastSuccessRunID      *int64     `json:"last_success_run_id"`
	LastSuccessAgeSeconds *float64   `json:"last_success_age_seconds"`
	SuccessUnread         bool       `json:"success_unread"`
	Running               bool       `json:"running"`
	RunningRunID          *int64     `json:"running_run_id"`
	RunningSince          *time.Time `json:"running_since"`
	Failing               bool       `json:"failing"`
	LastFinishedStatus    *string    `json:"last_finished_status"`
	LastFinishedError     *string    `json:"last_finished_error"`
	Alarms                []string   `json:"alarms"`
	LateTick              *time.Time `json:"late_tick"`
	LateRunID             *int64     `json:"late_run_id"`
	LateSeconds           *float64   `json:"late_seconds"`
	MaxLateSeconds        *float64   `json:"max_late_seconds"`
	OverrunRunID          *int64     `json:"overrun_run_id"`
	OverrunSeconds        *float64   `json:"overrun_seconds"`
	MaxRunSeconds         *float64   `json:"max_run_seconds"`
	Message               *string    `json:"message"`
	Error                 *string    `json:"error"`
}

func runCheck(ctx context.Context, c *cli, o *checkOptions) int {
	out, lines, err := c.check(ctx, o)
	if err != nil {
		msg := c.redact(describeError("check", err))
		fmt.Fprintf(c.stderr, "runclaim check: cannot tell: %s%s\n", visibleLines(msg), hint(err))
		if c.json {
			_ = writeJSON(c.stdout, checkJSON{Source: o.source, MaxAgeSeconds: optSeconds(o.maxAge),
				MaxLateSeconds: optSeconds(o.maxLate), MaxRunSeconds: optSeconds(o.maxRun), Alarms: []string{}, Error: &msg})
		}
		return exitCannotTell
	}
	if c.json {
		err = writeJSON(c.stdout, out)
	} else {
		_, err = fmt.Fprintln(c.stdout, visible(strings.Join(lines, "\n")))
	}
	if err != nil {
		c.fail("check", err)
		return exitCannotTell
	}
	if !out.Healthy {
		return exitOverdue
	}
	return exitOK
}

// optSeconds is d in seconds, nil for zero: an alarm not asked for.
func optSeconds(d time.Duration) *float64 {
	if d == 0 {
		return nil
	}
	v := seconds(d)
	return &v
}

// check runs the alarms o asks for: the answer for --json, and a line
// for each.
func (c *cli) check(ctx context.Context, o *checkOptions) (checkJSON, []string, error) {
	out := checkJSON{Source: o.source, Healthy: true, Alarms: []string{},
		MaxLateSeconds: optSeconds(o.maxLate), MaxRunSeconds: optSeconds(o.maxRun)}
	store, err := c.store(ctx)
	if err != nil {
		return out, nil, err
	}
	var lines []string
	fire := func(alarm string) { out.Healthy, out.Alarms = false, append(out.Alarms, alarm) }
	if o.maxAge > 0 {
		h, err := store.Check(ctx, o.source, o.maxAge)
		if err != nil {
			return out, nil, err
		}
		hj := healthJSON(h) // its alarms: overdue, or none
		hj.MaxLateSeconds, hj.MaxRunSeconds = out.MaxLateSeconds, out.MaxRunSeconds
		out = hj
		lines = append(lines, h.String())
	}
	if o.maxLate > 0 {
		line, late, err := checkLate(ctx, store, o)
		if err != nil {
			return out, nil, err
		}
		if late.tick != nil {
			out.LateTick, out.LateRunID, out.LateSeconds = jsonTime(late.tick.Tick), late.runID, late.seconds
		}
		if late.fired {
			fire("late")
		}
		lines = append(lines, line)
	}
	if o.maxRun > 0 {
		runs, now, err := store.Running(ctx, o.source)
		if err != nil {
			return out, nil, err
		}
		line := fmt.Sprintf("ok: %q: no run running", o.source)
		for _, r := range runs {
			age := now.Sub(r.StartedAt)
			v := seconds(age)
			out.OverrunRunID, out.OverrunSeconds = &r.ID, &v
			if age > o.maxRun {
				fire("overrun")
				line = fmt.Sprintf("overrun: %q: run %d (%s) has been running for %s, more than %s", o.source, r.ID, r.Owner, formatDuration(age), formatDuration(o.maxRun))
			} else {
				line = fmt.Sprintf("ok: %q: run %d (%s) has been running for %s, within %s", o.source, r.ID, r.Owner, formatDuration(age), formatDuration(o.maxRun))
			}
		}
		lines = append(lines, line)
	}
	msg := strings.Join(lines, "\n")
	out.Message = &msg
	return out, lines, nil
}

// lateCheck is what --max-late found: the tick judged, if any, its run
// and how late it started, and whether the alarm fired.
type lateCheck struct {
	tick    *tickRow
	runID   *int64
	seconds *float64
	fired   bool
}

// checkLate judges the latest tick of o's schedule that is old enough to
// be judged: one with a run, or one at least --max-late old.
func checkLate(ctx context.Context, store *runclaim.PostgresStore, o *checkOptions) (string, lateCheck, error) {
	// Enough of the schedule to hold two ticks before the alarm's bound,
	// by the local clock; readTicks reads the database's.
	now := time.Now()
	from := runclaim.LatestTick(o.sched, now.Add(-o.maxLate-time.Minute))
	from = runclaim.LatestTick(o.sched, from.Add(-time.Nanosecond))
	since := now.Sub(from) + time.Minute
	if from.IsZero() || since > 400*24*time.Hour {
		since = 400 * 24 * time.Hour
	}
	rows, dbNow, err := readTicks(ctx, store, o.source, o.sched, since)
	if err != nil {
		return "", lateCheck{}, err
	}
	for i := len(rows) - 1; i >= 0; i-- {
		r := &rows[i]
		tick := r.Tick.UTC().Format(time.RFC3339)
		switch {
		case r.Outcome == tickRan:
			late := seconds(r.Late)
			lc := lateCheck{tick: r, runID: &r.Run.ID, seconds: &late, fired: r.Late > o.maxLate}
			verdict, bound := "ok", "within"
			if lc.fired {
				verdict, bound = "late", "more than"
			}
			return fmt.Sprintf("%s: %q: tick %s: run %d started %s after it, %s %s", verdict, o.source, tick, r.Run.ID, formatDuration(r.Late), bound, formatDuration(o.maxLate)), lc, nil
		case r.Outcome == tickPaused:
			return fmt.Sprintf("ok: %q: tick %s: the source is paused", o.source, tick), lateCheck{tick: r}, nil
		case dbNow.Sub(r.Tick) >= o.maxLate:
			why := "no run started"
			if r.Outcome == tickOverlapped {
				why = fmt.Sprintf("no run started (run %d was still running at it)", r.OverlappedBy)
			}
			return fmt.Sprintf("late: %q: tick %s: %s within %s of it", o.source, tick, why, formatDuration(o.maxLate)), lateCheck{tick: r, fired: true}, nil
		}
	}
	return fmt.Sprintf("ok: %q: no tick of the schedule to judge yet", o.source), lateCheck{}, nil
}

// healthJSON is h as check --json prints it.
func healthJSON(h runclaim.SourceState) checkJSON {
	msg := h.String()
	out := checkJSON{
		Source:        h.Source,
		Healthy:       h.Healthy,
		MaxAgeSeconds: optSeconds(h.MaxAge),
		CheckedAt:     jsonTime(h.CheckedAt),
		SuccessUnread: h.SuccessUnread,
		Failing:       h.Failing(),
		Alarms:        []string{},
		Message:       &msg,
	}
	if !h.Healthy {
		out.Alarms = append(out.Alarms, "overdue")
	}
	if s := h.LastSuccess; s != nil {
		age := seconds(h.CheckedAt.Sub(s.StartedAt))
		out.LastSuccessAt, out.LastSuccessRunID, out.LastSuccessAgeSeconds = jsonTime(s.StartedAt), &s.ID, &age
	}
	if r := h.Running(); r != nil {
		out.Running, out.RunningRunID, out.RunningSince = true, &r.ID, jsonTime(r.StartedAt)
	}
	if f := h.LastFinished; f != nil {
		status := string(f.Status)
		out.LastFinishedStatus = &status
		if f.Error != "" {
			out.LastFinishedError = &f.Error
		}
	}
	return out
}

// runOverdue is 'status --overdue D': every source without a success
// within D, with check's line for each.
func runOverdue(ctx context.Context, c *cli, arg string, maxAge time.Duration) int {
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("status", err)
	}
	states, err := store.SourceStates(ctx)
	if err != nil {
		return c.fail("status", err)
	}
	var overdue []runclaim.SourceState
	for _, st := range states {
		if st.Overdue(maxAge) {
			st.MaxAge = maxAge // Healthy stays false: overdue
			overdue = append(overdue, st)
		}
	}
	if c.json {
		out := make([]checkJSON, 0, len(overdue))
		for _, h := range overdue {
			out = append(out, healthJSON(h))
		}
		err = writeJSON(c.stdout, out)
	} else if len(overdue) == 0 {
		_, err = fmt.Fprintf(c.stdout, "no source overdue: each of the %d sources succeeded within %s\n", len(states), arg)
	} else {
		t := newTable(c.stdout, "SOURCE", "LAST SUCCESS", "AGE", "RUNNING", "FAILING", "WHY")
		for _, h := range overdue {
			last, age := "never", "-"
			if a, ok := h.SuccessAge(); ok {
				last, age = formatTime(h.LastSuccess.StartedAt), formatDuration(a)
			} else if h.SuccessUnread {
				last = fmt.Sprintf("none in %d runs", runclaim.CheckScanLimit)
			}
			running, failing := "no", "no"
			if r := h.Running(); r != nil {
				running = fmt.Sprintf("run %d", r.ID)
			}
			if h.Failing() {
				failing = string(h.LastFinished.Status)
			}
			t.row(h.Source, last, age, running, failing, h.String())
		}
		err = t.flush()
	}
	if err != nil {
		return c.fail("status", err)
	}
	if len(overdue) > 0 {
		return exitOverdue
	}
	return exitOK
}
