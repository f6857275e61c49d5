package runclaim_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

// insertCheckRun writes a run of source that started ago before the database's
// now, with status and error text, and returns its ID.
func insertCheckRun(t *testing.T, pool *pgxpool.Pool, store *runclaim.PostgresStore, source string, status runclaim.Status, ago time.Duration, errText string) int64 {
	t.Helper()
	var id int64
	err := pool.QueryRow(t.Context(), `INSERT INTO `+store.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at, error)
SELECT $1, $2, 'test-owner', t, t + interval '1 hour', t, CASE WHEN $2 = 'running' THEN NULL ELSE t + interval '1 second' END, nullif($4, '')
FROM (SELECT pg_catalog.clock_timestamp() - $3::bigint * interval '1 microsecond' AS t) AS s
RETURNING id`, source, string(status), ago.Microseconds(), errText).Scan(&id)
	if err != nil {
		t.Fatalf("insert run: %v", err)
	}
	return id
}

// TestCheck: Check's answer for a source that succeeded recently, one whose
// success is too old, one that never succeeded, one that never ran, and
// one whose success lies behind more than CheckScanLimit failures; and
// what its line says about a running run and a failing source.
func TestCheck(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()

	okID := insertCheckRun(t, db.Pool, store, "fresh", runclaim.StatusSucceeded, 10*time.Minute, "")
	insertCheckRun(t, db.Pool, store, "stale", runclaim.StatusSucceeded, 3*time.Hour, "")
	failedID := insertCheckRun(t, db.Pool, store, "stale", runclaim.StatusFailed, 2*time.Hour, "upstream answered 503")
	runningID := insertCheckRun(t, db.Pool, store, "stale", runclaim.StatusRunning, time.Minute, "")
	insertCheckRun(t, db.Pool, store, "never", runclaim.StatusFailed, time.Minute, "boom")
	// A success behind CheckScanLimit failures: not read.
	insertCheckRun(t, db.Pool, store, "buried", runclaim.StatusSucceeded, 30*time.Minute, "")
	if _, err := db.Pool.Exec(ctx, `INSERT INTO `+store.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at, error)
SELECT 'buried', 'failed', 'o', t, t, t, t, 'x' FROM (SELECT pg_catalog.clock_timestamp() - g * interval '1 second' AS t FROM pg_catalog.generate_series(1, $1::int) AS g) AS s`,
		runclaim.CheckScanLimit); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		source    string
		healthy   bool
		successID int64
		running   int64
		failing   bool
		unread    bool
		line      []string // parts of the line
	}{
		{source: "fresh", healthy: true, successID: okID, line: []string{`ok: "fresh": last success `, fmt.Sprintf("(run %d), 10m0s ago, within 1h0m0s", okID)}},
		{source: "stale", running: runningID, failing: true,
			line: []string{`overdue: "stale": last success`, "3h0m0s ago, more than 1h0m0s", fmt.Sprintf("; run %d running for 1m0s", runningID),
				fmt.Sprintf("; failing: run %d failed: upstream answered 503", failedID)}},
		{source: "never", failing: true, line: []string{`overdue: "never": never succeeded; failing: run`, "failed: boom"}},
		{source: "nobody", line: []string{`overdue: "nobody": never ran`}},
		{source: "buried", failing: true, unread: true, line: []string{fmt.Sprintf(`overdue: "buried": no success in its latest %d runs`, runclaim.CheckScanLimit)}},
	} {
		h, err := store.Check(ctx, tc.source, time.Hour)
		if err != nil {
			t.Fatalf("Check(%q): %v", tc.source, err)
		}
		if h.Healthy != tc.healthy || h.Failing() != tc.failing || h.SuccessUnread != tc.unread || h.Source != tc.source || h.MaxAge != time.Hour {
			t.Errorf("Check(%q) = healthy %v failing %v unread %v, want %v %v %v", tc.source, h.Healthy, h.Failing(), h.SuccessUnread, tc.healthy, tc.failing, tc.unread)
		}
		if tc.source == "fresh" && (h.LastSuccess == nil || h.LastSuccess.ID != tc.successID) {
			t.Errorf("Check(fresh).LastSuccess = %+v, want run %d", h.LastSuccess, tc.successID)
		}
		if r := h.Running(); tc.running != 0 && (r == nil || r.ID != tc.running) || tc.running == 0 && r != nil {
			t.Errorf("Check(%q).Running() = %+v, want run %d", tc.source, r, tc.running)
		}
		if h.CheckedAt.IsZero() {
			t.Errorf("Check(%q): no CheckedAt", tc.source)
		}
		line := h.String()
		for _, part := range tc.line {
			// The ages are measured at the check, a moment after the rows
			// were written: on a busy machine some seconds later. The
			// minutes and hours must match; the seconds may have grown.
			re := regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(part), "m0s", `m\d+s`))
			if !re.MatchString(line) {
				t.Errorf("Check(%q) line %q lacks %q", tc.source, line, part)
			}
		}
	}
	// "stale": the success is the oldest run, not the running or failed one.
	h, _ := store.Check(ctx, "stale", time.Hour)
	if h.LastSuccess == nil || h.LastSuccess.Status != runclaim.StatusSucceeded || h.LastFinished.ID != failedID || h.Latest.ID != runningID {
		t.Errorf("Check(stale) = %+v", h)
	}
	// With a longer max age the stale source is healthy.
	if h, err := store.Check(ctx, "stale", 4*time.Hour); err != nil || !h.Healthy {
		t.Errorf("Check(stale, 4h) = %v, %v; want healthy", h, err)
	}

	// SourceStates: every source, ordered, one read time.
	states, err := store.SourceStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range states {
		names = append(names, s.Source)
		if !s.CheckedAt.Equal(states[0].CheckedAt) {
			t.Errorf("%s read at %v, %s at %v", s.Source, s.CheckedAt, states[0].Source, states[0].CheckedAt)
		}
	}
	if got := strings.Join(names, ","); got != "buried,fresh,never,stale" {
		t.Errorf("SourceStates sources = %s", got)
	}
	// SourceStates reads every source with a query of its own
	// (sql/source_state_all.sql): it must see each run as Check does.
	id := func(r *runclaim.RunRecord) int64 {
		if r == nil {
			return 0
		}
		return r.ID
	}
	for _, s := range states {
		c, err := store.Check(ctx, s.Source, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if id(s.Latest) != id(c.Latest) || id(s.LastFinished) != id(c.LastFinished) || id(s.LastSuccess) != id(c.LastSuccess) || s.SuccessUnread != c.SuccessUnread {
			t.Errorf("%s: SourceStates has latest %d, finished %d, success %d, unread %v; Check has %d, %d, %d, %v", s.Source,
				id(s.Latest), id(s.LastFinished), id(s.LastSuccess), s.SuccessUnread, id(c.Latest), id(c.LastFinished), id(c.LastSuccess), c.SuccessUnread)
		}
	}
	for _, s := range states {
		if want := s.Source == "stale" || s.Source == "never" || s.Source == "buried"; s.Overdue(time.Hour) != want {
			t.Errorf("%s: Overdue(1h) = %v, want %v", s.Source, s.Overdue(time.Hour), want)
		}
	}
}

// TestCheckBadInput: bad input is refused before any SQL, and a missing
// table is an error (the check cannot tell), not an unhealthy answer.
func TestCheckBadInput(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()
	for _, tc := range []struct {
		source string
		maxAge time.Duration
	}{{"", time.Hour}, {"a\x00b", time.Hour}, {"\xff", time.Hour}, {strings.Repeat("x", runclaim.MaxSourceLen+1), time.Hour}, {"ok", 0}, {"ok", -time.Second}} {
		if _, err := store.Check(ctx, tc.source, tc.maxAge); err == nil {
			t.Errorf("Check(%q, %v) succeeded", tc.source, tc.maxAge)
		} else if tc.maxAge > 0 && !errors.Is(err, runclaim.ErrInvalidSource) {
			t.Errorf("Check(%q): %v, want ErrInvalidSource", tc.source, err)
		}
	}
	missing, err := runclaim.NewPostgresStore(db.Pool, runclaim.WithTable("public", "no_such_runs"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missing.Check(ctx, "ok", time.Hour); err == nil || !strings.Contains(err.Error(), "42P01") {
		t.Errorf("Check on a missing table: %v, want undefined_table", err)
	}
	if _, err := missing.SourceStates(ctx); err == nil {
		t.Error("SourceStates on a missing table succeeded")
	}
}
