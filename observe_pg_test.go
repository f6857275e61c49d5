package runclaim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestClaimFailedHookPostgres: a claim that the database refuses (the runs
// table is missing) reaches ClaimFailed with the database's error.
func TestClaimFailedHookPostgres(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	store, err := runclaim.NewPostgresStore(db.Pool) // not migrated
	if err != nil {
		t.Fatal(err)
	}
	o := &observed{}
	c := doClaimer(t, store, o.options()...)
	_, err = c.Claim(t.Context(), "src")
	if err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
		t.Fatalf("Claim without a table: %v, want a database error", err)
	}
	claimed, skipped, failed, events, logs := o.take(t)
	if claimed != 0 || skipped != 0 || failed != 1 || events[0].Err != err || events[0].Source != "src" {
		t.Errorf("Claimed %d, Skipped %d, ClaimFailed %d (%+v); want ClaimFailed once with Claim's error %v", claimed, skipped, failed, events, err)
	}
	if len(logs) != 1 || logs[0]["level"] != "ERROR" || !strings.Contains(logs[0]["error"].(string), "42883") || !strings.Contains(logs[0]["error"].(string), "run Migrate") {
		t.Errorf("logged %v; want one ERROR line with the database's error and what to do", logs)
	}
}
