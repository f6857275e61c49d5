package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newPruneCommand makes 'runclaim prune', which deletes old finished runs.
func newPruneCommand(c *cli) *cobra.Command {
	cmd := define(c, &cobra.Command{
		Use:   "prune [--older-than D] [--keep-last N] [--yes]",
		Short: "delete finished runs older than a given age, or all but the last N of each source",
		Long: `Deletes finished runs (succeeded, failed, expired, released): with
--older-than D, those that finished more than D ago; with --keep-last N,
all but the N runs of each source that started last, whatever their age;
with both, only runs that both select. It never deletes a running run, nor
the newest run of any source, which the minimum interval between runs is
measured from. It goes through the table in small batches, each its own
short transaction, so it never holds up claims; Ctrl-C stops it between
batches.

D is a Go duration (90m, 720h) or a number of days (30d), or both (1d12h).
N is between 1 and 100000.
Under an hour of age and without a --keep-last above 1 (so that only each
source's newest run is sure to stay; 0 deletes every finished run but
those), prune asks first, as release does: it reads the answer from stdin,
and refuses when stdin is not a terminal; --yes prunes without asking.

Examples:
  runclaim prune --older-than 30d
  runclaim prune --keep-last 100
  # a month of history, and never fewer than the last 10 runs of a source
  runclaim prune --older-than 30d --keep-last 10
  runclaim prune --older-than 720h --json
  runclaim prune --older-than 0 --yes

JSON output: {"deleted": 123, "older_than_seconds": 2592000, "keep_last": 10}
(older_than_seconds is 0 without --older-than; keep_last is 1 without
--keep-last, since the newest run of each source is always kept).`,
		Annotations: map[string]string{annotWrites: "true"},
	}, runPrune)
	return cmd
}

// pruneOptions are prune's: --older-than and --keep-last.
type pruneOptions struct {
	noArgs
	olderThanArg string // as given
	keepLast     int
	yes          bool
	opts         runclaim.PruneOptions // set by Validate
}

// pruneAskBelow is the age under which prune asks before deleting: such a
// prune removes the history of runs that have only just finished.
const pruneAskBelow = time.Hour

func (o *pruneOptions) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.olderThanArg, "older-than", "", "delete runs that finished more than `D` ago (e.g. 720h or 30d)")
	fs.IntVar(&o.keepLast, "keep-last", 0, "keep the last `N` runs of each source, whatever their age")
	fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation when D is under an hour (or not given) and --keep-last is not above 1")
}

// Validate checks and parses --older-than and --keep-last; at least one is
// needed.
func (o *pruneOptions) Validate() error {
	if o.olderThanArg == "" && o.keepLast == 0 {
		return errors.New("give --older-than, --keep-last or both")
	}
	if o.olderThanArg != "" {
		d, err := parseAge(o.olderThanArg)
		if err != nil {
			return fmt.Errorf("--older-than: %w", err)
		}
		o.opts.OlderThan = d
	}
	if o.keepLast < 0 || o.keepLast > runclaim.MaxKeepLast || o.olderThanArg == "" && o.keepLast < 1 {
		return fmt.Errorf("--keep-last must be between 1 and %d, got %d", runclaim.MaxKeepLast, o.keepLast)
	}
	o.opts.KeepLast = o.keepLast
	return nil
}

func runPrune(ctx context.Context, c *cli, o *pruneOptions) int {
	arg := o.olderThanArg
	if arg == "" {
		arg = "0s"
	}
	ask := o.opts.OlderThan < pruneAskBelow && o.opts.KeepLast <= 1 && !o.yes
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
	deleted, err := store.PruneRuns(ctx, o.opts)
	if err != nil {
		if deleted > 0 {
			fmt.Fprintf(c.stderr, "runclaim prune: deleted %d runs before stopping\n", deleted)
		}
		return c.fail("prune", err)
	}
	keepLast := max(o.opts.KeepLast, 1)
	if c.json {
		err = writeJSON(c.stdout, struct {
			Deleted          int64   `json:"deleted"`
			OlderThanSeconds float64 `json:"older_than_seconds"`
			KeepLast         int     `json:"keep_last"`
		}{deleted, seconds(o.opts.OlderThan), keepLast})
	} else {
		var what []string
		if o.olderThanArg != "" {
			what = append(what, "that finished more than "+o.olderThanArg+" ago")
		}
		kept := "the newest run of each source is kept"
		if keepLast > 1 {
			what = append(what, fmt.Sprintf("beyond the last %d of their source", keepLast))
			kept = fmt.Sprintf("the last %d runs of each source are kept", keepLast)
		}
		_, err = fmt.Fprintf(c.stdout, "deleted %d runs %s (%s, and running runs)\n", deleted, strings.Join(what, " and "), kept)
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
