package runclaim_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

// TestFenceContention: holders claim two sources without heartbeats and
// write one result per run in a fenced transaction, and some of them are
// paused (as by a stop-the-world pause or SIGSTOP) until well past their
// lease: before Fence, after Fence, or after the write and before the
// commit. No result of a run may commit after a newer run of its source
// started. That is checked in SQL, from each result's commit time (set by
// a deferred trigger, as the transaction commits) against the start of
// every newer run of the source.
//
// The test also checks that it exercised what it claims to: holders paused
// before Fence were refused (ErrLeaseLost), rivals took sources over,
// fenced transactions committed after their lease had ended, and rivals
// were skipped by a run whose lease had ended because it was fenced.
func TestFenceContention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	table := store.Table()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE fenced_writes (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	source text NOT NULL,
	run_id bigint NOT NULL,
	written_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	committed_at timestamptz
);
CREATE FUNCTION stamp_commit() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN UPDATE fenced_writes SET committed_at = pg_catalog.clock_timestamp() WHERE id = NEW.id; RETURN NULL; END$$;
CREATE CONSTRAINT TRIGGER stamp_commit AFTER INSERT ON fenced_writes
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION stamp_commit();`); err != nil {
		t.Fatal(err)
	}

	const (
		holders   = 4
		perHolder = 6 // runs each holder wins
		// A lease under a second, so that many runs lapse and are taken
		// over within the test's time; what it asserts (no fenced write
		// commits after a newer run started) is read from the database's
		// commit times, whatever the machine's speed.
		lease = 300 * time.Millisecond
	)
	sources := []string{"a", "b"}
	const (
		noPause = iota
		pauseBeforeFence
		pauseAfterFence
		pauseBeforeCommit
		modes
	)
	var (
		mu       sync.Mutex // protects failures
		failures []string
		won      [modes]atomic.Int64
		refused  atomic.Int64 // Fence returned ErrLeaseLost
		// of which to a holder not paused before Fence
		refusedUnpaused atomic.Int64
		commits         atomic.Int64
		// skips of a rival by a run whose lease had ended at least
		// 50 ms before, by this machine's clock (the database runs on it)
		skippedPastLease atomic.Int64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	// pause holds a holder until the database clock is past until, then
	// a random while longer: a pause whose length the holder does not
	// choose, which is long enough for a rival to take over.
	pause := func(pool *pgxpool.Pool, until time.Time, rng *rand.Rand) {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var now time.Time
			if err := pool.QueryRow(ctx, "SELECT pg_catalog.clock_timestamp()").Scan(&now); err != nil {
				fail("read the database clock: %v", err)
				return
			}
			if now.After(until) {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		time.Sleep(lease/2 + time.Duration(rng.Int64N(int64(lease/2)))) // the pause goes on: simulated, not a wait for anything
	}

	var wg sync.WaitGroup
	for h := range holders {
		c := newClaimer(t, store, runclaim.WithLease(lease), runclaim.WithOwner(fmt.Sprintf("h%d", h)))
		rng := rand.New(rand.NewPCG(seed, uint64(h)))
		order := rng.Perm(modes)
		wg.Go(func() {
			for n := 0; n < perHolder && ctx.Err() == nil; {
				src := sources[rng.IntN(len(sources))]
				run, err := c.Claim(ctx, src)
				var nc *runclaim.NotClaimedError
				if errors.As(err, &nc) {
					if nc.Holder != nil && nc.Holder.LeaseUntil.Before(time.Now().Add(-50*time.Millisecond)) {
						skippedPastLease.Add(1)
					}
					time.Sleep(time.Duration(1+rng.IntN(5)) * time.Millisecond) // poll again soon
					continue
				}
				if err != nil {
					fail("h%d: claim %s: %v", h, src, err)
					return
				}
				mode := rng.IntN(modes)
				if n < modes { // each holder tries every mode once, in its own order
					mode = order[n]
				}
				n++
				won[mode].Add(1)
				err = func() error {
					tx, err := db.Pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer tx.Rollback(ctx)
					if mode == pauseBeforeFence {
						pause(db.Pool, run.LeaseUntil, rng)
					}
					if err := store.Fence(ctx, tx, run); err != nil {
						return err
					}
					if mode == pauseAfterFence {
						pause(db.Pool, run.LeaseUntil, rng)
					}
					if _, err := tx.Exec(ctx, `INSERT INTO fenced_writes (source, run_id) VALUES ($1, $2)`, run.Source, run.ID); err != nil {
						return err
					}
					if mode == pauseBeforeCommit {
						pause(db.Pool, run.LeaseUntil, rng)
					}
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					commits.Add(1)
					return nil
				}()
				switch {
				case errors.Is(err, runclaim.ErrLeaseLost):
					refused.Add(1)
					if mode != pauseBeforeFence {
						// Safe, and possible on a machine slow enough that
						// the lease ends between the claim and Fence.
						refusedUnpaused.Add(1)
					}
				case err != nil:
					fail("h%d: run %d: %v", h, run.ID, err)
				case mode == pauseBeforeFence:
					fail("h%d: run %d fenced after its lease ended", h, run.ID)
				}
				if err := run.Finish(ctx, nil); err != nil && !errors.Is(err, runclaim.ErrLeaseLost) {
					fail("h%d: finish run %d: %v", h, run.ID, err)
				}
			}
		})
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}

	// The property, in SQL.
	rows, err := db.Pool.Query(ctx, `SELECT w.run_id, w.written_at, w.committed_at, n.id, n.started_at
FROM fenced_writes AS w JOIN `+table+` AS n ON n.source = w.source AND n.id > w.run_id
WHERE w.committed_at IS NULL OR w.committed_at >= n.started_at
ORDER BY w.run_id, n.id`)
	if err != nil {
		t.Fatal(err)
	}
	violations := 0
	for rows.Next() {
		var runID, newerID int64
		var written, newerStarted time.Time
		var committed *time.Time
		if err := rows.Scan(&runID, &written, &committed, &newerID, &newerStarted); err != nil {
			t.Fatal(err)
		}
		violations++
		if violations <= 10 {
			t.Errorf("a write of run %d (written %s) committed at %v, after run %d of its source started at %s",
				runID, written.Format(time.StampMicro), committed, newerID, newerStarted.Format(time.StampMicro))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	// What the run exercised.
	var writes, pastLease, expired int64
	err = db.Pool.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM fenced_writes),
	(SELECT count(*) FROM fenced_writes AS w JOIN `+table+` AS r ON r.id = w.run_id WHERE w.committed_at > r.lease_until),
	(SELECT count(*) FROM `+table+` WHERE status = 'expired')`).Scan(&writes, &pastLease, &expired)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("runs won by pause mode (none, before Fence, after Fence, before commit): %d %d %d %d; Fence refused %d (%d not paused before it); commits %d; writes %d, %d committed after their run's lease ended; %d takeovers; %d claims skipped by a run fenced past its lease; %d violations",
		won[0].Load(), won[1].Load(), won[2].Load(), won[3].Load(), refused.Load(), refusedUnpaused.Load(), commits.Load(), writes, pastLease, expired, skippedPastLease.Load(), violations)
	if writes != commits.Load() {
		t.Errorf("%d writes in the table, %d commits reported", writes, commits.Load())
	}
	switch {
	case refused.Load() == 0:
		t.Error("no Fence was refused")
	case pastLease == 0:
		t.Error("no fenced transaction committed after its lease ended")
	case expired == 0:
		t.Error("no run was taken over")
	case skippedPastLease.Load() == 0:
		t.Error("no claim was skipped by a run fenced past its lease")
	}
}
