package main

import (
	"context"
	"errors"
	"fmt"
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
		Use:   "check <source> --max-age D",
		Short: "exit 0 if a source succeeded within an age: a dead man's switch",
		Long: `Tells whether the source's newest succeeded run started within D, by the
database's clock, and prints one line saying why: the last success and its
age, whether a run is running, and whether the source is failing (its newest
finished run failed, expired or was released). For a monitoring system, a
cron job or a Kubernetes probe: an alarm for the run that did not happen,
which hooks and logs cannot give.

D is a Go duration (90m, 26h) or a number of days (1d), or both (1d12h).

It reads at most the source's 1000 newest runs: a source whose 1000 newest
runs all failed counts as overdue.

Examples:
  runclaim check nightly-report --max-age 26h
  runclaim check nightly-report --max-age 26h --json

Exit codes:
  0  the newest succeeded run started within D
  1  it started longer ago, or the source never succeeded
  2  usage error (unknown flag, missing or non-positive --max-age, invalid source)
  3  cannot tell: the database is unreachable or the table is missing

JSON output:
  {"source", "healthy", "max_age_seconds", "checked_at", "last_success_at",
   "last_success_run_id", "last_success_age_seconds", "success_unread",
   "running", "running_run_id", "running_since", "failing",
   "last_finished_status", "last_finished_error", "message", "error"}
where a value that does not apply is null, "message" is the line printed
without --json, and "error" (else null) says why the check could not tell.`,
		Args: maxArgs(1),
	}, runCheck)
	return cmd
}

// checkOptions are check's: the source and --max-age.
type checkOptions struct {
	sourceArg
	age    string
	maxAge time.Duration // parsed by Validate
}

func (o *checkOptions) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.age, "max-age", "", "the oldest a success may be, `D` (required; e.g. 26h or 1d)")
}

// Validate checks that one valid source and a positive --max-age are given.
func (o *checkOptions) Validate() error {
	if err := o.validate("give one source"); err != nil {
		return err
	}
	if o.age == "" {
		return errors.New("--max-age is required")
	}
	d, err := parsePositiveAge("--max-age", o.age)
	o.maxAge = d
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
	MaxAgeSeconds         float64    `json:"max_age_seconds"`
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
	Message               *string    `json:"message"`
	Error                 *string    `json:"error"`
}

func runCheck(ctx context.Context, c *cli, o *checkOptions) int {
	source, maxAge := o.source, o.maxAge
	h, err := c.check(ctx, source, maxAge)
	if err != nil {
		fmt.Fprintf(c.stderr, "runclaim check: cannot tell: %s%s\n", visibleLines(c.redact(describeError("check", err))), hint(err))
		if c.json {
			msg := c.redact(describeError("check", err))
			_ = writeJSON(c.stdout, checkJSON{Source: source, MaxAgeSeconds: seconds(maxAge), Error: &msg})
		}
		return exitCannotTell
	}
	if c.json {
		err = writeJSON(c.stdout, healthJSON(h))
	} else {
		_, err = fmt.Fprintln(c.stdout, visible(h.String()))
	}
	if err != nil {
		c.fail("check", err)
		return exitCannotTell
	}
	if !h.Healthy {
		return exitOverdue
	}
	return exitOK
}

func (c *cli) check(ctx context.Context, source string, maxAge time.Duration) (runclaim.Health, error) {
	store, err := c.store(ctx)
	if err != nil {
		return runclaim.Health{}, err
	}
	return store.Check(ctx, source, maxAge)
}

// healthJSON is h as check --json prints it.
func healthJSON(h runclaim.Health) checkJSON {
	msg := h.String()
	out := checkJSON{
		Source:        h.Source,
		Healthy:       h.Healthy,
		MaxAgeSeconds: seconds(h.MaxAge),
		CheckedAt:     jsonTime(h.CheckedAt),
		SuccessUnread: h.SuccessUnread,
		Failing:       h.Failing(),
		Message:       &msg,
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
	var overdue []runclaim.Health
	for _, st := range states {
		if st.Overdue(maxAge) {
			overdue = append(overdue, runclaim.Health{SourceState: st, MaxAge: maxAge})
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
