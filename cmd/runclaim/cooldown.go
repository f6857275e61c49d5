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
