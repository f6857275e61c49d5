package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newStatusCommand makes 'runclaim status', which lists the running runs.
func newStatusCommand(c *cli) *cobra.Command {
	cmd := define(c, &cobra.Command{
		Use:   "status [source] | status --overdue D",
		Short: "list the running runs, with owner, age and lease left",
		Long: `Lists the running runs of every source, or of one source, with their owner,
age, time since the last heartbeat and lease left. Ages and leases are
computed on the database's clock, not this host's. Then the sources that
are paused ('runclaim pause'), with the pause's end and note, and those
with a pending trigger ('runclaim trigger').

The running runs are printed as they are read, so that many take no more
memory than a few; the table's columns are sized on each block of 1000
rows.

A lease left of "EXPIRED (-12.3s)" means the holder stopped heartbeating: the
next claim of the source marks the run expired and takes over. To free the
source sooner, see 'runclaim release'.

Examples:
  runclaim status
  runclaim status nightly-report
  runclaim status --json | jq -r '.running[] | select(.expired) | .source'
  runclaim status --json | jq -r '.paused[].source'
  runclaim status --overdue 26h || alert "some source is overdue"

JSON output: {"running": [...], "paused": [...], "triggered": [...],
"cooling": [...], "cooling_truncated": false}:
running lists the running runs, each
  {"source", "run_id", "owner", "status", "started_at", "lease_until",
   "heartbeat_at", "tick", "checked_at", "age_seconds", "heartbeat_age_seconds",
   "lease_left_seconds", "expired"}
where status is "running", tick is the scheduled tick the run serves, or
null for a plain claim, checked_at is the database time the ages are
measured at, and lease_left_seconds is negative once the lease has
passed; paused lists the paused sources and triggered the sources with a
pending trigger (a paused source with a pending trigger is in both), each
  {"source", "status", "paused_at", "paused_until", "note",
   "triggered_at", "checked_at"}
where status is "paused" in paused and "triggered" in triggered,
paused_until is null for a pause until 'runclaim resume', and
triggered_at is null without a pending trigger; and, without a source,
cooling lists the keys cooling down ('runclaim cooldown'), each
  {"key", "status": "cooling", "cooling_until", "note", "checked_at"}
Every list is there, empty if need be. cooling_truncated is true when
more than 10000 keys (runclaim.MaxKeyStates) have a limit or a cooldown:
only the first 10000 by name are read, so cooling may lack some, and a
warning says so on stderr (see 'runclaim limits').

With --overdue: an array of check's JSON objects (see 'runclaim check
--help'), and exit code 1 if a source is overdue, as check's, so that
'runclaim status --overdue 26h' can be an alarm for every source at once.

Exit codes: 0 success (with --overdue: no source is overdue); 1 a database
error, or with --overdue a source overdue; 2 bad usage.`,
		Args: maxArgs(1),
	}, runStatus)
	return cmd
}

// statusOptions are status's: an optional source, or --overdue.
type statusOptions struct {
	source    string
	oneSource bool // a source was given; else every source
	overdue   string
	maxAge    time.Duration // --overdue, parsed by Validate
}

func (o *statusOptions) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.overdue, "overdue", "", "list the sources without a success within `D` instead (e.g. 26h or 1d)")
}

func (o *statusOptions) args(args []string) {
	if len(args) == 1 {
		o.source, o.oneSource = args[0], true
	}
}

// Validate checks the source, if one is given, and --overdue.
func (o *statusOptions) Validate() error {
	if o.overdue != "" {
		if o.oneSource {
			return fmt.Errorf("--overdue lists every source; use 'runclaim check %s --max-age %s' for one", o.source, o.overdue)
		}
		d, err := parsePositiveAge("--overdue", o.overdue)
		o.maxAge = d
		return err
	}
	if o.oneSource {
		return runclaim.ValidateSource(o.source)
	}
	return nil
}

// statusJSON is one running run as status prints it.
type statusJSON struct {
	Source              string     `json:"source"`
	RunID               int64      `json:"run_id"`
	Owner               string     `json:"owner"`
	Status              string     `json:"status"`
	StartedAt           *time.Time `json:"started_at"`
	LeaseUntil          *time.Time `json:"lease_until"`
	HeartbeatAt         *time.Time `json:"heartbeat_at"`
	Tick                *time.Time `json:"tick"`
	CheckedAt           *time.Time `json:"checked_at"`
	AgeSeconds          float64    `json:"age_seconds"`
	HeartbeatAgeSeconds float64    `json:"heartbeat_age_seconds"`
	LeaseLeftSeconds    float64    `json:"lease_left_seconds"`
	Expired             bool       `json:"expired"`
}

func runStatus(ctx context.Context, c *cli, o *statusOptions) int {
	if o.overdue != "" {
		return runOverdue(ctx, c, o.overdue, o.maxAge)
	}
	source := o.source
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("status", err)
	}
	// The runs are printed as they are read, so that many running runs
	// take no more memory than a few; then the pauses, triggers and keys
	// cooling down.
	list := c.newStatusList(source)
	if _, err := store.RunningFunc(ctx, source, list.add); err != nil {
		return c.fail("status", err)
	}
	if err := list.close(); err != nil {
		return c.fail("status", err)
	}
	controls, ctlNow, err := store.Controls(ctx, source)
	if err != nil {
		return c.fail("status", err)
	}
	var (
		cools     []runclaim.KeyState
		coolNow   time.Time
		truncated bool // more keys have a limit or a cooldown than were read
	)
	if source == "" {
		if cools, coolNow, truncated, err = c.coolingKeys(ctx, store); err != nil {
			return c.fail("status", err)
		}
	}
	if c.json {
		err = c.writeStatusRestJSON(controls, ctlNow, cools, coolNow, truncated)
	} else {
		err = c.writeControls(controls, ctlNow)
		if err == nil {
			err = c.writeCooldowns(cools, coolNow)
		}
	}
	if err != nil {
		return c.fail("status", err)
	}
	return exitOK
}

// controlJSON is a source's pause or pending trigger as status prints it.
type controlJSON struct {
	Source      string     `json:"source"`
	Status      string     `json:"status"`
	PausedAt    *time.Time `json:"paused_at"`
	PausedUntil *time.Time `json:"paused_until"`
	Note        string     `json:"note"`
	TriggeredAt *time.Time `json:"triggered_at"`
	CheckedAt   *time.Time `json:"checked_at"`
}

// writeControls prints the pauses and pending triggers, after the runs.
func (c *cli) writeControls(controls []runclaim.SourceControl, now time.Time) error {
	if len(controls) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(c.stdout); err != nil {
		return err
	}
	t := newTable(c.stdout, "SOURCE", "PAUSED", "TRIGGER", "NOTE")
	for _, k := range controls {
		paused, trigger := "-", "-"
		switch {
		case k.Paused && k.PausedUntil.IsZero():
			paused = "until resumed"
		case k.Paused:
			paused = "until " + formatTime(k.PausedUntil) + " (" + formatDuration(k.PausedUntil.Sub(now)) + " left)"
		}
		if !k.TriggeredAt.IsZero() {
			trigger = "pending since " + formatTime(k.TriggeredAt)
		}
		t.row(k.Source, paused, trigger, k.Note)
	}
	return t.flush()
}

// coolingKeys returns the keys cooling down, and the database clock; none
// on a table before keys (schema version 8). Of more than MaxKeyStates
// keys with a limit or a cooldown, it reads the first MaxKeyStates by name,
// warns on stderr and reports them truncated.
func (c *cli) coolingKeys(ctx context.Context, store *runclaim.PostgresStore) ([]runclaim.KeyState, time.Time, bool, error) {
	keys, now, truncated, err := c.readKeys(ctx, "status", store)
	if err != nil {
		if have, _, verr := store.SchemaVersion(ctx); verr == nil && have < 8 {
			return nil, time.Time{}, false, nil
		}
		return nil, time.Time{}, false, err
	}
	out := keys[:0]
	for _, k := range keys {
		if !k.CoolingUntil.IsZero() {
			out = append(out, k)
		}
	}
	return out, now, truncated, nil
}

// readKeys is store.Keys for cmd: of more than MaxKeyStates keys with a
// limit or a cooldown, it returns the first MaxKeyStates by name, reports
// them truncated and warns on stderr, rather than failing.
func (c *cli) readKeys(ctx context.Context, cmd string, store *runclaim.PostgresStore) ([]runclaim.KeyState, time.Time, bool, error) {
	keys, now, err := store.Keys(ctx)
	if errors.Is(err, runclaim.ErrKeysTruncated) {
		fmt.Fprintf(c.stderr, "runclaim %s: warning: more than %d keys have a limit or a cooldown; only the first %d by name are listed\n",
			cmd, runclaim.MaxKeyStates, runclaim.MaxKeyStates)
		return keys, now, true, nil
	}
	return keys, now, false, err
}

// writeCooldowns prints the keys cooling down, after the pauses.
func (c *cli) writeCooldowns(keys []runclaim.KeyState, now time.Time) error {
	if len(keys) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(c.stdout); err != nil {
		return err
	}
	t := newTable(c.stdout, "KEY", "COOLDOWN", "NOTE")
	for _, k := range keys {
		t.row(k.Key, "until "+formatTime(k.CoolingUntil)+" ("+formatDuration(k.CoolingUntil.Sub(now))+" left)", k.Note)
	}
	return t.flush()
}

// cooldownJSON is status --json's object of a key cooling down.
type cooldownJSON struct {
	Key          string     `json:"key"`
	Status       string     `json:"status"`
	CoolingUntil *time.Time `json:"cooling_until"`
	Note         string     `json:"note"`
	CheckedAt    *time.Time `json:"checked_at"`
}

// statusList prints status's running runs one at a time, as they are
// read: a table, or with --json the start of status's object and its
// running list. Nothing is printed before the first run, so that a read
// that fails at once prints nothing.
type statusList struct {
	c      *cli
	source string     // the one source asked for, or ""
	tab    *table     // once a run is added, without --json
	arr    *jsonArray // with --json
}

func (c *cli) newStatusList(source string) *statusList {
	l := &statusList{c: c, source: source}
	if c.json {
		l.arr = &jsonArray{w: c.stdout, indent: "  "}
	}
	return l
}

// statusJSONStart is how status --json begins, before the running list.
const statusJSONStart = "{\n  \"running\": "

// add prints r, read at the database time now, or holds it in the table's
// current block.
func (l *statusList) add(r runclaim.RunRecord, now time.Time) error {
	left := r.LeaseUntil.Sub(now)
	if l.arr != nil {
		if l.arr.n == 0 {
			if _, err := io.WriteString(l.c.stdout, statusJSONStart); err != nil {
				return err
			}
		}
		return l.arr.add(statusJSON{
			Source:              r.Source,
			RunID:               r.ID,
			Owner:               r.Owner,
			Status:              string(r.Status),
			StartedAt:           jsonTime(r.StartedAt),
			LeaseUntil:          jsonTime(r.LeaseUntil),
			HeartbeatAt:         jsonTime(r.HeartbeatAt),
			Tick:                jsonTime(r.Tick),
			CheckedAt:           jsonTime(now),
			AgeSeconds:          seconds(now.Sub(r.StartedAt)),
			HeartbeatAgeSeconds: seconds(now.Sub(r.HeartbeatAt)),
			LeaseLeftSeconds:    seconds(left),
			Expired:             left <= 0,
		})
	}
	if l.tab == nil {
		l.tab = newTable(l.c.stdout, "SOURCE", "RUN", "OWNER", "STARTED", "TICK", "AGE", "HEARTBEAT", "LEASE LEFT")
	}
	l.tab.row(r.Source, fmt.Sprint(r.ID), r.Owner, formatTime(r.StartedAt), formatTick(r.Tick),
		formatDuration(now.Sub(r.StartedAt)), formatDuration(now.Sub(r.HeartbeatAt))+" ago",
		leaseLeft(left))
	return l.tab.err // stop reading once stdout is gone ("| head")
}

// close prints what is held: the table's last block, or that no run is
// running; with --json, the end of the running list (an empty one if no
// run was added), which writeStatusRestJSON follows.
func (l *statusList) close() error {
	switch {
	case l.arr != nil:
		if l.arr.n == 0 {
			if _, err := io.WriteString(l.c.stdout, statusJSONStart); err != nil {
				return err
			}
		}
		return l.arr.close()
	case l.tab != nil:
		return l.tab.flush()
	case l.source != "":
		_, err := fmt.Fprintf(l.c.stdout, "no running run of %q\n", l.source)
		return err
	}
	_, err := fmt.Fprintln(l.c.stdout, "no running runs")
	return err
}

// writeStatusRestJSON prints the rest of status's object after the
// running list: the pauses, the pending triggers and the keys cooling
// down, each in a list of its own, and whether that last list is
// truncated.
func (c *cli) writeStatusRestJSON(controls []runclaim.SourceControl, ctlNow time.Time, cools []runclaim.KeyState, coolNow time.Time, truncated bool) error {
	out := struct {
		Paused           []controlJSON  `json:"paused"`
		Triggered        []controlJSON  `json:"triggered"`
		Cooling          []cooldownJSON `json:"cooling"`
		CoolingTruncated bool           `json:"cooling_truncated"`
	}{[]controlJSON{}, []controlJSON{}, []cooldownJSON{}, truncated}
	for _, k := range controls {
		j := controlJSON{
			Source:      k.Source,
			PausedAt:    jsonTime(k.PausedAt),
			PausedUntil: jsonTime(k.PausedUntil),
			Note:        k.Note,
			TriggeredAt: jsonTime(k.TriggeredAt),
			CheckedAt:   jsonTime(ctlNow),
		}
		if k.Paused {
			j.Status = "paused"
			out.Paused = append(out.Paused, j)
		}
		if !k.TriggeredAt.IsZero() {
			j.Status = "triggered"
			out.Triggered = append(out.Triggered, j)
		}
	}
	for _, k := range cools {
		out.Cooling = append(out.Cooling, cooldownJSON{Key: k.Key, Status: "cooling", CoolingUntil: jsonTime(k.CoolingUntil), Note: k.Note, CheckedAt: jsonTime(coolNow)})
	}
	// The object's fields after the running list: its "{" becomes the
	// comma after that list.
	if _, err := io.WriteString(c.stdout, ","); err != nil {
		return err
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = c.stdout.Write(append(jsonEscape(b[1:]), '\n'))
	return err
}

// leaseLeft is the lease left for a table, flagged once it has passed.
func leaseLeft(d time.Duration) string {
	if d <= 0 {
		return "EXPIRED (" + formatDuration(d) + ")"
	}
	return formatDuration(d)
}
