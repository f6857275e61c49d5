package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runclaim/runclaim"
)

// The operator's controls of a source: pause, resume and trigger, each in
// a file of its own, share what is here.

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
