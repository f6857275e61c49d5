package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The commands of keys: their limits ('limit set', 'limit rm' and
// 'limits') and cooldowns ('cooldown'). A key names a target that many
// sources share (see docs/protect-a-target.md).

// newLimitCommand makes 'runclaim limit': sets or removes the limit of a key.
func newLimitCommand(c *cli) *cobra.Command {
	return define(c, &cobra.Command{
		Use:   "limit set <key> [--running N] [--starts M --per DURATION] [--min-gap DURATION] | limit rm <key>",
		Short: "set or remove the limit of a key that many sources share",
		Long: `Sets (or replaces) the limit of a key, for every replica at once: at most
--running runs of the sources whose claims name the key at once, and at
most --starts runs started in any window of --per, whatever their outcome,
and at least --min-gap between two starts (by the database clock: a
claim sooner is skipped until the gap has passed; with --wait, sources
that share the key start one by one). 0 (the default) is no bound. 'limit rm' removes the limit; a cooldown of
the key stays (see 'runclaim cooldown'). The limit binds the next claim
that names the key; runs already running and started count.

Claims name keys with runclaim.WithKeys or WithSourceKeys, or
'runclaim exec --key'. Keys need the runs table at schema version 8,
--min-gap version 12 ('runclaim migrate'); replicas of releases before
it do not pace.

Examples:
  runclaim limit set site:avito --running 3 --starts 20 --per 1h
  runclaim limit set site:avito --min-gap 30s
  runclaim limit rm site:avito

JSON output: {"key", "max_running", "max_starts", "per_seconds",
"min_gap_seconds"} for set,
{"key", "removed"} for rm (removed is false for a key that had no limit)`,
		Args:        maxArgs(2),
		Annotations: map[string]string{annotWrites: "true"},
	}, runLimit)
}

// limitOptions are limit's: the action, the key and the bounds.
type limitOptions struct {
	action, key string
	nargs       int
	running     int
	starts      int
	per         string
	minGap      string
	limit       runclaim.Limit // made by Validate
}

func (o *limitOptions) flags(fs *pflag.FlagSet) {
	fs.IntVar(&o.running, "running", 0, "at most `N` runs of the key running at once (0: no bound)")
	fs.IntVar(&o.starts, "starts", 0, "at most `M` runs of the key started in any window of --per (0: no bound)")
	fs.StringVar(&o.per, "per", "", "the window of --starts (`DURATION`: 90s, 1h, 1d)")
	fs.StringVar(&o.minGap, "min-gap", "", "at least `DURATION` between two starts of the key (0: no bound)")
}

func (o *limitOptions) args(args []string) {
	o.nargs = len(args)
	if len(args) > 0 {
		o.action = args[0]
	}
	if len(args) > 1 {
		o.key = args[1]
	}
}

// optionalAge parses the value of flag, a duration (see parseAge), or
// returns 0 if the flag was not given.
func optionalAge(flag, value string) (time.Duration, error) {
	if value == "" {
		return 0, nil
	}
	d, err := parseAge(value)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", flag, err)
	}
	return d, nil
}

// Validate checks the action, the key and the limit.
func (o *limitOptions) Validate() error {
	if o.nargs != 2 || (o.action != "set" && o.action != "rm") {
		return errors.New("give 'set <key>' or 'rm <key>'")
	}
	if err := checkKey(o.key); err != nil {
		return err
	}
	if o.action == "rm" {
		if o.running != 0 || o.starts != 0 || o.per != "" || o.minGap != "" {
			return errors.New("'limit rm' takes no --running, --starts, --per or --min-gap")
		}
		return nil
	}
	per, err := optionalAge("--per", o.per)
	if err != nil {
		return err
	}
	gap, err := optionalAge("--min-gap", o.minGap)
	if err != nil {
		return err
	}
	o.limit = runclaim.Limit{MaxRunning: o.running, MaxStarts: o.starts, Per: per, MinGap: gap}
	if o.limit == (runclaim.Limit{}) {
		return errors.New("give --running, --starts and --per, or --min-gap (to remove the limit, use 'limit rm')")
	}
	if err := o.limit.Validate(); err != nil {
		return limitFlagError(err)
	}
	return nil
}

func runLimit(ctx context.Context, c *cli, o *limitOptions) int {
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("limit", err)
	}
	if o.action == "rm" {
		had, err := hasLimit(ctx, store, o.key)
		if err != nil {
			return c.fail("limit", err)
		}
		if err := store.DeleteLimit(ctx, o.key); err != nil {
			return c.fail("limit", err)
		}
		switch {
		case c.json:
			err = writeJSON(c.stdout, struct {
				Key     string `json:"key"`
				Removed bool   `json:"removed"`
			}{o.key, had})
		case had:
			_, err = fmt.Fprintf(c.stdout, "removed the limit of key %q; its cooldown, if any, stays\n", o.key)
		default:
			_, err = fmt.Fprintf(c.stdout, "key %q had no limit: nothing to remove\n", o.key)
		}
		if err != nil {
			return c.fail("limit", err)
		}
		return exitOK
	}
	if err := store.SetLimit(ctx, o.key, o.limit); err != nil {
		return c.fail("limit", err)
	}
	if c.json {
		err = writeJSON(c.stdout, struct {
			Key        string  `json:"key"`
			MaxRunning int     `json:"max_running"`
			MaxStarts  int     `json:"max_starts"`
			PerSeconds float64 `json:"per_seconds"`
			MinGap     float64 `json:"min_gap_seconds"`
		}{o.key, o.limit.MaxRunning, o.limit.MaxStarts, seconds(o.limit.Per), seconds(o.limit.MinGap)})
	} else {
		_, err = fmt.Fprintf(c.stdout, "key %q: %s\n", o.key, describeLimit(o.limit))
	}
	if err != nil {
		return c.fail("limit", err)
	}
	return exitOK
}

// describeLimit says a limit in words.
func describeLimit(l runclaim.Limit) string {
	running, starts := "no bound on running runs", "no bound on starts"
	if l.MaxRunning > 0 {
		running = "at most " + strconv.Itoa(l.MaxRunning) + " running"
	}
	if l.MaxStarts > 0 {
		starts = "at most " + strconv.Itoa(l.MaxStarts) + " starts per " + formatDuration(l.Per)
	}
	out := running + ", " + starts
	if l.MinGap > 0 {
		out += ", at least " + formatDuration(l.MinGap) + " between starts"
	}
	return out
}

// newLimitsCommand makes 'runclaim limits': lists the keys' limits and cooldowns.
func newLimitsCommand(c *cli) *cobra.Command {
	return define(c, &cobra.Command{
		Use:   "limits",
		Short: "list the keys with a limit or a cooldown: running runs, starts, cooldown",
		Long: `Lists every key that has a limit or a cooldown in force: its limit, how
many runs that named it are running now, how many started in the limit's
window (counted up to the limit), its least gap between starts and when
the next start may come, and its cooldown's end and note.

Examples:
  runclaim limits
  runclaim limits --json | jq '.[] | select(.cooling_until)'

At most 10000 keys (runclaim.MaxKeyStates) are listed: the first by name.
When more have a limit or a cooldown, a warning says so on stderr.

JSON output: an array of {"key", "max_running", "max_starts",
"per_seconds", "min_gap_seconds", "running", "starts", "next_start" (null:
no gap in force), "cooling_until" (null: none), "note", "checked_at"}`,
		Args: maxArgs(0),
	}, runLimits)
}

// limitsOptions are limits': none.
type limitsOptions struct{ noArgs }

func (*limitsOptions) flags(*pflag.FlagSet) {}

// Validate has nothing to check.
func (*limitsOptions) Validate() error { return nil }

func runLimits(ctx context.Context, c *cli, _ *limitsOptions) int {
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("limits", err)
	}
	keys, now, _, err := c.readKeys(ctx, "limits", store)
	if err != nil {
		return c.fail("limits", err)
	}
	if c.json {
		type keyJSON struct {
			Key          string     `json:"key"`
			MaxRunning   int        `json:"max_running"`
			MaxStarts    int        `json:"max_starts"`
			PerSeconds   float64    `json:"per_seconds"`
			MinGap       float64    `json:"min_gap_seconds"`
			Running      int        `json:"running"`
			Starts       int        `json:"starts"`
			NextStart    *time.Time `json:"next_start"`
			CoolingUntil *time.Time `json:"cooling_until"`
			Note         string     `json:"note"`
			CheckedAt    *time.Time `json:"checked_at"`
		}
		out := make([]keyJSON, 0, len(keys))
		for _, k := range keys {
			out = append(out, keyJSON{k.Key, k.Limit.MaxRunning, k.Limit.MaxStarts, seconds(k.Limit.Per), seconds(k.Limit.MinGap),
				k.Running, k.Starts, jsonTime(nextStart(k, now)), jsonTime(k.CoolingUntil), k.Note, jsonTime(now)})
		}
		err = writeJSON(c.stdout, out)
	} else if len(keys) == 0 {
		_, err = fmt.Fprintln(c.stdout, "no key has a limit or a cooldown")
	} else {
		t := newTable(c.stdout, "KEY", "RUNNING", "STARTS", "GAP", "COOLDOWN", "NOTE")
		for _, k := range keys {
			running, starts, gap, cool := strconv.Itoa(k.Running), "-", "-", "-"
			if k.Limit.MaxRunning > 0 {
				running += "/" + strconv.Itoa(k.Limit.MaxRunning)
			}
			if k.Limit.MaxStarts > 0 {
				starts = strconv.Itoa(k.Starts) + "/" + strconv.Itoa(k.Limit.MaxStarts) + " per " + formatDuration(k.Limit.Per)
			}
			if k.Limit.MinGap > 0 {
				gap = formatDuration(k.Limit.MinGap)
				if next := nextStart(k, now); !next.IsZero() {
					gap += " (next in " + formatDuration(next.Sub(now)) + ")"
				}
			}
			if !k.CoolingUntil.IsZero() {
				cool = "until " + formatTime(k.CoolingUntil) + " (" + formatDuration(k.CoolingUntil.Sub(now)) + " left)"
			}
			t.row(k.Key, running, starts, gap, cool, k.Note)
		}
		err = t.flush()
	}
	if err != nil {
		return c.fail("limits", err)
	}
	return exitOK
}

// nextStart is when k's MinGap lets the next start in, if that is after
// now; zero otherwise.
func nextStart(k runclaim.KeyState, now time.Time) time.Time {
	if k.Limit.MinGap <= 0 || k.LastStart.IsZero() {
		return time.Time{}
	}
	if next := k.LastStart.Add(k.Limit.MinGap); next.After(now) {
		return next
	}
	return time.Time{}
}

// hasLimit reports whether key has a limit, as the keys in force say.
func hasLimit(ctx context.Context, store *runclaim.PostgresStore, key string) (bool, error) {
	keys, _, err := store.Keys(ctx)
	if err != nil && !errors.Is(err, runclaim.ErrKeysTruncated) {
		return false, err
	}
	for _, k := range keys {
		if k.Key == key {
			return k.Limit != (runclaim.Limit{}), nil
		}
	}
	// Not among the first MaxKeyStates keys, or none: "removed" is what
	// can be said of a key beyond the list; of one before its end, not.
	return errors.Is(err, runclaim.ErrKeysTruncated) && len(keys) > 0 && key > keys[len(keys)-1].Key, nil
}

// limitFields are Limit's fields, by the flag that sets each.
var limitFields = strings.NewReplacer("Limit.MaxRunning", "--running", "Limit.MaxStarts", "--starts", "Limit.Per", "--per",
	"Limit.MinGap", "--min-gap", "MaxRunning", "--running", "MaxStarts", "--starts")

// limitFlagError is Limit.Validate's error in the flags' names, with an
// example of a valid limit.
func limitFlagError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "runclaim: ")
	return fmt.Errorf("%s (e.g. --running 3, or --starts 20 --per 1h)", limitFields.Replace(msg))
}

// newCooldownCommand makes 'runclaim cooldown': starts or ends the cooldown of a key.
func newCooldownCommand(c *cli) *cobra.Command {
	return define(c, &cobra.Command{
		Use:   "cooldown <key> --for DURATION [--note TEXT] | cooldown <key> --end",
		Short: "skip every claim naming a key for a while (after a 429), or end that",
		Long: `Skips every claim that names the key, on every replica, for --for from
now by the database's clock (runclaim.ErrLimited, with the note): what a
site's 429 with a Retry-After asks for. A cooldown never shortens one in
force: the later end, with its note, stays. --end ends the key's cooldown
at once. Running runs go on.

The note is at most 1024 bytes of UTF-8 without NUL bytes. Keys need the
runs table at schema version 8 ('runclaim migrate').

Examples:
  runclaim cooldown site:avito --for 1h --note "HTTP 429, Retry-After 3600"
  runclaim cooldown site:avito --end

JSON output: {"key", "cooling_until", "note"}: the cooldown in force
afterwards (a later one kept wins over the one asked); cooling_until is
null after --end`,
		Args:        maxArgs(1),
		Annotations: map[string]string{annotWrites: "true"},
	}, runCooldown)
}

// cooldownOptions are cooldown's: the key, --for, --note and --end.
type cooldownOptions struct {
	key    string
	nargs  int
	forArg string
	note   string
	end    bool
	d      time.Duration // parsed by Validate
}

func (o *cooldownOptions) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.forArg, "for", "", "cool down for `DURATION` from now (90s, 1h, 1d)")
	fs.StringVar(&o.note, "note", "", "why, shown with every skip (at most 1024 bytes)")
	fs.BoolVar(&o.end, "end", false, "end the key's cooldown now")
}

func (o *cooldownOptions) args(args []string) {
	o.nargs = len(args)
	if len(args) == 1 {
		o.key = args[0]
	}
}

// Validate checks the key, and that exactly one of --for and --end is
// given.
func (o *cooldownOptions) Validate() error {
	if o.nargs != 1 {
		return errors.New("give the key")
	}
	if err := checkKey(o.key); err != nil {
		return err
	}
	switch {
	case o.end && (o.forArg != "" || o.note != ""):
		return errors.New("--end takes no --for or --note")
	case o.end:
		return nil
	case o.forArg == "":
		return errors.New("give --for DURATION, or --end")
	}
	d, err := parseAge(o.forArg)
	if err != nil {
		return fmt.Errorf("--for: %w", err)
	}
	if d <= 0 || d > runclaim.MaxLease {
		return fmt.Errorf("--for %s: give a duration between 0 and %v", o.forArg, runclaim.MaxLease)
	}
	o.d = d
	return checkNote("cooldown", o.note)
}

func runCooldown(ctx context.Context, c *cli, o *cooldownOptions) int {
	target, err := openControl(c, ctx)
	if err != nil {
		return c.fail("cooldown", err)
	}
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("cooldown", err)
	}
	var until time.Time
	wasCooling := false
	if o.end {
		k, _ := keyState(ctx, store, o.key)
		wasCooling = !k.CoolingUntil.IsZero()
		err = store.EndCooldown(ctx, o.key)
	} else {
		var now time.Time
		if now, err = target.now(ctx); err == nil {
			until = now.Add(o.d)
			err = store.Cooldown(ctx, o.key, until, o.note)
		}
	}
	if err != nil {
		return c.fail("cooldown", err)
	}
	// A cooldown never shortens one in force: report the one in force,
	// which a later end asked before may have kept.
	note, kept := o.note, false
	if !o.end {
		if k, ok := keyState(ctx, store, o.key); ok && !k.CoolingUntil.IsZero() {
			kept = k.CoolingUntil.After(until)
			until, note = k.CoolingUntil, k.Note
		}
	}
	if c.json {
		err = writeJSON(c.stdout, struct {
			Key          string     `json:"key"`
			CoolingUntil *time.Time `json:"cooling_until"`
			Note         string     `json:"note"`
		}{o.key, jsonTime(until), note})
	} else if o.end && wasCooling {
		_, err = fmt.Fprintf(c.stdout, "ended the cooldown of key %q\n", o.key)
	} else if o.end {
		_, err = fmt.Fprintf(c.stdout, "key %q was not cooling down: nothing to end\n", o.key)
	} else if kept {
		_, err = fmt.Fprintf(c.stdout, "key %q already cools down until %s, later than asked, with note \"%s\": kept\n", o.key, formatTime(until), visible(note))
	} else {
		_, err = fmt.Fprintf(c.stdout, "key %q cools down until %s\n", o.key, formatTime(until))
	}
	if err != nil {
		return c.fail("cooldown", err)
	}
	return exitOK
}

// keyState returns what the store reports of key now, if it can tell.
func keyState(ctx context.Context, store *runclaim.PostgresStore, key string) (runclaim.KeyState, bool) {
	keys, _, err := store.Keys(ctx)
	if err != nil && !errors.Is(err, runclaim.ErrKeysTruncated) {
		return runclaim.KeyState{}, false
	}
	for _, k := range keys {
		if k.Key == key {
			return k, true
		}
	}
	return runclaim.KeyState{}, false
}
