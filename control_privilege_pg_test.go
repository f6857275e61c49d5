package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runclaim/runclaim"
)

// opsGrants are the grants docs/least-privilege.md gives a role that
// pauses, resumes and triggers, with %[1]s the schema, %[2]s the control
// table (both quoted) and %[3]s the role.
var opsGrants = []string{
	`GRANT USAGE ON SCHEMA %[1]s TO %[3]s`,
	`GRANT SELECT, INSERT, UPDATE ON %[1]s.%[2]s TO %[3]s`,
}

// checkCannotControl checks that Pause, Resume and Trigger from store fail
// with a wrapped 42501 that names the grants, and change nothing.
func checkCannotControl(t *testing.T, e *privEnv, store *runclaim.PostgresStore, source string) {
	t.Helper()
	ctx := t.Context()
	ctl := controlTable(e.schema)
	before := controlRows(t, e.db.Pool, ctl)
	for name, call := range map[string]func() error{
		"Pause":   func() error { return store.Pause(ctx, source, time.Time{}, "not mine to pause") },
		"Resume":  func() error { return store.Resume(ctx, source) },
		"Trigger": func() error { return store.Trigger(ctx, source) },
	} {
		err := call()
		if pgCode(err) != "42501" || errors.Is(err, runclaim.ErrNotClaimed) ||
			!strings.Contains(err.Error(), "may not change pauses and triggers") || !strings.Contains(err.Error(), "SELECT, INSERT and UPDATE on "+ctl) {
			t.Errorf("%s by a role that may only claim: %v, want a wrapped 42501 that names the grants", name, err)
		}
	}
	if after := controlRows(t, e.db.Pool, ctl); after != before {
		t.Errorf("refused calls changed the control table from %s to %s", before, after)
	}
}

// TestControlPrivileges: the application role with the grants of
// docs/least-privilege.md (SELECT and UPDATE (triggered_at) on the control
// table) claims, is skipped by a pause and uses a trigger, but cannot
// pause, resume or trigger: those fail with a clear error and change
// nothing. An operator role with SELECT, INSERT and UPDATE on the control
// table, and nothing on the runs table, can.
func TestControlPrivileges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newPrivEnv(t)
	appStore := e.store(t, e.pool(t, e.app, nil))
	checkCannotControl(t, e, appStore, "src")

	sfx := randomSuffix(t)
	ops := role{"rc_ops_" + sfx, "s3cr3t-0ps-" + sfx}
	admin(t, e.db, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", ops.name, ops.password))
	t.Cleanup(func() { dropRole(t, e.db, ops.name) })
	ownerPool := e.pool(t, e.owner, nil)
	for _, g := range opsGrants {
		q := fmt.Sprintf(g, pgx.Identifier{e.schema}.Sanitize(), pgx.Identifier{runclaim.DefaultTable + "_control"}.Sanitize(), ops.name)
		if _, err := ownerPool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	opsStore := e.store(t, e.pool(t, ops, nil))

	c, err := runclaim.New(appStore, runclaim.WithMinInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	do := func(source string) error {
		return c.Do(ctx, source, func(context.Context, *runclaim.Run) error { return nil })
	}
	if err := do("src"); err != nil {
		t.Fatalf("claim by the application: %v", err)
	}
	if err := do("src"); !errors.Is(err, runclaim.ErrTooSoon) {
		t.Fatalf("second claim within the interval: %v, want ErrTooSoon", err)
	}
	if err := opsStore.Trigger(ctx, "src"); err != nil {
		t.Fatalf("Trigger by the operator role: %v", err)
	}
	if err := do("src"); err != nil {
		t.Errorf("triggered claim by the application: %v, want a run", err)
	}
	if err := do("src"); !errors.Is(err, runclaim.ErrTooSoon) {
		t.Errorf("claim after the triggered one: %v, want ErrTooSoon: the application used the trigger up", err)
	}
	if err := opsStore.Pause(ctx, "paused", time.Time{}, "ops"); err != nil {
		t.Fatalf("Pause by the operator role: %v", err)
	}
	if err := do("paused"); !errors.Is(err, runclaim.ErrPaused) {
		t.Errorf("application's claim of a paused source: %v, want ErrPaused", err)
	}
	checkCannotControl(t, e, appStore, "paused")
	if err := opsStore.Resume(ctx, "paused"); err != nil {
		t.Fatalf("Resume by the operator role: %v", err)
	}
	if err := do("paused"); err != nil {
		t.Errorf("application's claim after Resume: %v", err)
	}
}

// TestControlPrivilegesAfterUpgrade: an application role granted only what
// claims needed before version 5 claims once the owner migrates the table
// (whose version 4 this release refuses): the step grants it what
// claims need on the new table (it may insert into the runs table), and
// nothing more, so it uses a trigger but cannot pause.
func TestControlPrivilegesAfterUpgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newPrivEnv(t)
	ownerPool := e.pool(t, e.owner, nil)
	ownerStore := e.store(t, ownerPool)
	steps := ownerStore.Migrations()
	// Back to version 4, with the application's grants of then: every
	// later step undone, newest first.
	for i := len(steps) - 1; i >= 4; i-- {
		if _, err := ownerPool.Exec(ctx, steps[i].Down); err != nil {
			t.Fatalf("step %d down: %v", steps[i].Version, err)
		}
	}
	appStore := e.store(t, e.pool(t, e.app, nil))
	c, err := runclaim.New(appStore, runclaim.WithMinInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	do := func(source string) error {
		return c.Do(ctx, source, func(context.Context, *runclaim.Run) error { return nil })
	}
	if err := do("src"); err == nil || !strings.Contains(err.Error(), "run Migrate") {
		t.Fatalf("claim on version 4: %v, want the error that says to run Migrate", err)
	}
	if err := ownerStore.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if have, _, err := appStore.SchemaVersion(ctx); err != nil || have != runclaim.LatestSchemaVersion {
		t.Fatalf("SchemaVersion after the upgrade: %d, %v", have, err)
	}
	if err := do("src"); err != nil {
		t.Fatalf("claim after the upgrade: %v", err)
	}
	if err := do("src"); !errors.Is(err, runclaim.ErrTooSoon) {
		t.Errorf("claim within the interval after the upgrade: %v, want ErrTooSoon", err)
	}
	if err := ownerStore.Trigger(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	if err := do("src"); err != nil {
		t.Errorf("triggered claim after the upgrade: %v, want a run", err)
	}
	checkCannotControl(t, e, appStore, "src")
}
