package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/runclaim/runclaim"
)

// pruneCommand deletes old finished runs.
var pruneCommand = command{
	name:    "prune",
	summary: "delete finished runs older than a given age",
	usage:   "prune --older-than D",
	help: `Deletes finished runs (succeeded, failed, expired, released) that finished
more than D ago. It never deletes a running run, nor the newest run of any
source, which the minimum interval between runs is measured from. It deletes
in small batches, each its own short transaction, so it never holds up
claims; Ctrl-C stops it between batches.

D is a Go duration (90m, 720h) or a number of days (30d), or both (1d12h).
Under an hour (0 deletes every finished run but each source's newest), prune
asks first, as release does: it reads the answer from stdin, and refuses
when stdin is not a terminal; --yes prunes without asking.

Examples:
  runclaim prune --older-than 30d
  runclaim prune --older-than 720h --json
  runclaim prune --older-than 0 --yes

JSON output: {"deleted": 123, "older_than_seconds": 2592000}`,
}

// pruneOptions are prune's: --older-than.
type pruneOptions struct {
	noArgs
	olderThanArg string        // as given
	olderThan    time.Duration // parsed by Validate
	yes          bool
}

// pruneAskBelow is the age under which prune asks before deleting: such a
// prune removes the history of runs that have only just finished.
const pruneAskBelow = time.Hour

func (o *pruneOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.olderThanArg, "older-than", "", "delete runs that finished more than `D` ago (required; e.g. 720h or 30d)")
	fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation when D is under an hour")
}

// Validate checks and parses --older-than.
func (o *pruneOptions) Validate() error {
	if o.olderThanArg == "" {
		return errors.New("--older-than is required")
	}
	d, err := parseAge(o.olderThanArg)
	if err != nil {
		return fmt.Errorf("--older-than: %w", err)
	}
	o.olderThan = d
	return nil
}

func runPrune(ctx context.Context, c *cli, o *pruneOptions) int {
	arg, olderThan := o.olderThanArg, o.olderThan
	ask := olderThan < pruneAskBelow && !o.yes
	if ask && !isTerminal(c.stdin) {
		return c.badUsage("--older-than %s deletes the runs that have just finished, and stdin is not a terminal, so there is no one to confirm; add --yes to prune without asking", arg)
	}
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("prune", err)
	}
	if ask {
		ok, err := c.confirm(fmt.Sprintf("Delete every finished run that finished more than %s ago (but each source's newest) from %s? [y/N] ", arg, store.Table()))
		if err != nil {
			return c.fail("prune", fmt.Errorf("read the answer: %w", err))
		}
		if !ok {
			fmt.Fprintf(c.stderr, "runclaim prune: nothing deleted\n")
			return exitError
		}
	}
	ctx, stop := interruptible(ctx)
	defer stop()
	deleted, err := store.Prune(ctx, olderThan)
	if err != nil {
		if deleted > 0 {
			fmt.Fprintf(c.stderr, "runclaim prune: deleted %d runs before stopping\n", deleted)
		}
		return c.fail("prune", err)
	}
	if c.json {
		err = writeJSON(c.stdout, struct {
			Deleted          int64   `json:"deleted"`
			OlderThanSeconds float64 `json:"older_than_seconds"`
		}{deleted, seconds(olderThan)})
	} else {
		_, err = fmt.Fprintf(c.stdout, "deleted %d runs that finished more than %s ago (the newest run of each source is kept)\n",
			deleted, arg)
	}
	if err != nil {
		return c.fail("prune", err)
	}
	return exitOK
}

// decimal is a non-negative decimal number of days: "30", "1.5", ".5".
var decimal = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)$`)

// parseAge parses a non-negative Go duration with an optional leading
// number of days: "720h", "30d", "1d12h", "1.5d".
func parseAge(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("empty duration")
	}
	var days float64
	rest := s
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		// Decimal digits only: ParseFloat alone would take "NaN", "Inf",
		// exponents, hex and underscores.
		if !decimal.MatchString(s[:i]) {
			return 0, fmt.Errorf("invalid duration %q: want e.g. 720h, 30d or 1d12h", s)
		}
		n, err := strconv.ParseFloat(s[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: want e.g. 720h, 30d or 1d12h", s)
		}
		days, rest = n, s[i+1:]
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil {
			return 0, fmt.Errorf("invalid duration %q: want e.g. 720h, 30d or 1d12h", s)
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q is negative", s)
	}
	const maxDays = float64(runclaim.MaxLease/(24*time.Hour)) * 100
	if days > maxDays {
		return 0, errors.New("duration too long")
	}
	return d + time.Duration(days*float64(24*time.Hour)), nil
}
