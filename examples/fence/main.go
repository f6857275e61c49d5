// Command fence shows a sweep that stores its results through
// PostgresStore.Fence, so that a holder which lost its run cannot store
// anything once another replica's run has started, even when it was frozen
// (a long GC pause, a stopped VM, SIGSTOP) and never heard that it lost.
//
// Fence works on the database that holds the runs table, so this example
// needs Postgres:
//
//	DATABASE_URL=postgres://user:pass@localhost:5432/db go run ./examples/fence
//
// It creates the examples' runs table (runclaim_example_runs) and a
// listings table, and runs three acts of two replicas sweeping one source,
// in about three seconds:
//
//  1. replica-a sweeps and stores its listings: Fence, write, commit.
//  2. replica-a freezes before it stores them, past the end of its lease;
//     replica-b takes the source over and stores its own. When replica-a
//     wakes, Fence refuses it (ErrLeaseLost) and its stale listings are
//     rolled back.
//  3. replica-a freezes inside its fenced transaction, past the end of its
//     lease. The fence keeps the source: replica-b's ticks are skipped until
//     replica-a commits; then replica-b's tick wins.
//
// At the end it checks, in SQL, that no listing of a run was stored after a
// newer run of the source had started.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

const (
	source = "fence-example/books"
	lease  = 500 * time.Millisecond // short, so that a freeze outlasts it
	freeze = 3 * lease              // how long a frozen replica is stopped
	tick   = 50 * time.Millisecond  // replica-b's schedule while replica-a is frozen
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fence:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("this example needs Postgres: set DATABASE_URL=postgres://user:pass@host:5432/db")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The examples' own table and advisory lock namespace: pointed at a
	// production database, the example never competes with its jobs.
	store, err := runclaim.NewPostgresStore(pool,
		runclaim.WithTable(runclaim.DefaultSchema, "runclaim_example_runs"),
		runclaim.WithNamespace("runclaim-example"))
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS fence_example_listings (
	run_id    bigint NOT NULL,
	source    text NOT NULL,
	title     text NOT NULL,
	stored_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`); err != nil {
		return err
	}
	a, err := newReplica(store, pool, "replica-a")
	if err != nil {
		return err
	}
	b, err := newReplica(store, pool, "replica-b")
	if err != nil {
		return err
	}

	fmt.Println("act 1: replica-a sweeps and stores its listings")
	r, err := a.claim(ctx)
	if err != nil {
		return err
	}
	if err := a.store(ctx, r, fetch(r), 0); err != nil {
		return err
	}
	if err := r.Finish(ctx, nil); err != nil {
		return err
	}

	fmt.Println("\nact 2: replica-a freezes before storing; replica-b takes over")
	r, err = a.claim(ctx)
	if err != nil {
		return err
	}
	listings := fetch(r)
	fmt.Printf("  replica-a is frozen for %v (its lease is %v)\n", freeze, lease)
	time.Sleep(freeze) // the freeze: no heartbeat, no code of replica-a runs
	rb, err := b.claimWhenFree(ctx)
	if err != nil {
		return err
	}
	if err := b.store(ctx, rb, fetch(rb), 0); err != nil {
		return err
	}
	if err := rb.Finish(ctx, nil); err != nil {
		return err
	}
	fmt.Println("  replica-a wakes up and stores what it fetched before the freeze")
	err = a.store(ctx, r, listings, 0)
	if !errors.Is(err, runclaim.ErrLeaseLost) {
		return fmt.Errorf("a stale replica's store: %v; want ErrLeaseLost", err)
	}
	fmt.Printf("  refused, rolled back: %v\n", err)
	_ = r.Finish(ctx, err) // ErrLeaseLost again: the run is not replica-a's

	fmt.Println("\nact 3: replica-a freezes inside its fenced transaction")
	r, err = a.claim(ctx)
	if err != nil {
		return err
	}
	stored := make(chan error, 1)
	go func() {
		stored <- a.store(ctx, r, fetch(r), freeze)
	}()
	rb, err = b.claimWhenFree(ctx)
	if err != nil {
		return err
	}
	if err := <-stored; err != nil {
		return err
	}
	fmt.Printf("  replica-b's run started %v after replica-a's lease had ended, by the database clock: the fence held the source until the commit\n",
		rb.StartedAt.Sub(r.LeaseUntil).Round(10*time.Millisecond))
	_ = r.Finish(ctx, nil) // may be ErrLeaseLost: replica-b took over once the transaction ended
	if err := b.store(ctx, rb, fetch(rb), 0); err != nil {
		return err
	}
	if err := rb.Finish(ctx, nil); err != nil {
		return err
	}

	// The check: no listing was stored after a newer run of its source
	// had started.
	var late int
	err = pool.QueryRow(ctx, `SELECT count(*) FROM fence_example_listings AS l
JOIN `+store.Table()+` AS newer ON newer.source = l.source AND newer.id > l.run_id
WHERE l.stored_at >= newer.started_at`).Scan(&late)
	if err != nil {
		return err
	}
	if late != 0 {
		return fmt.Errorf("%d listings were stored after a newer run had started", late)
	}
	fmt.Println("\ncheck: no listing was stored after a newer run of its source had started")
	return nil
}

// A replica is one instance of the service.
type replica struct {
	name    string
	claimer *runclaim.Claimer
	fence   *runclaim.PostgresStore
	pool    *pgxpool.Pool
}

func newReplica(store *runclaim.PostgresStore, pool *pgxpool.Pool, name string) (*replica, error) {
	c, err := runclaim.New(store, runclaim.WithOwner(name), runclaim.WithLease(lease))
	if err != nil {
		return nil, err
	}
	return &replica{name: name, claimer: c, fence: store, pool: pool}, nil
}

// claim claims the source. The example calls Claim rather than Do so that
// a frozen replica sends no heartbeat, as a frozen process would not.
func (r *replica) claim(ctx context.Context) (*runclaim.Run, error) {
	run, err := r.claimer.Claim(ctx, source)
	if err != nil {
		return nil, err
	}
	fmt.Printf("  %s: run %d started\n", r.name, run.ID)
	return run, nil
}

// claimWhenFree claims the source on every tick until a claim wins.
func (r *replica) claimWhenFree(ctx context.Context) (*runclaim.Run, error) {
	t := time.NewTicker(tick)
	defer t.Stop()
	skipped := 0
	for {
		run, err := r.claimer.Claim(ctx, source)
		var nc *runclaim.NotClaimedError
		switch {
		case errors.As(err, &nc):
			if skipped == 0 && nc.Holder != nil {
				fmt.Printf("  %s: tick skipped, run %d holds the source\n", r.name, nc.Holder.ID)
			}
			skipped++
		case err != nil:
			return nil, err
		default:
			fmt.Printf("  %s: run %d started after %d skipped ticks\n", r.name, run.ID, skipped)
			return run, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// store writes the listings of run in one transaction, fenced by the run.
// With frozen > 0 the replica freezes inside the transaction, after Fence.
func (r *replica) store(ctx context.Context, run *runclaim.Run, listings []string, frozen time.Duration) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) // a no-op after Commit
	if err := r.fence.Fence(ctx, tx, run); err != nil {
		return err
	}
	for _, title := range listings {
		if _, err := tx.Exec(ctx, `INSERT INTO fence_example_listings (run_id, source, title) VALUES ($1, $2, $3)`, run.ID, run.Source, title); err != nil {
			return err
		}
	}
	if frozen > 0 {
		fmt.Printf("  %s: fenced, wrote %d listings, and is frozen for %v before the commit\n", r.name, len(listings), frozen)
		time.Sleep(frozen) // the freeze
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	fmt.Printf("  %s: run %d stored %d listings\n", r.name, run.ID, len(listings))
	return nil
}

// fetch stands for the sweep's real work: scraping the source's listings.
func fetch(run *runclaim.Run) []string {
	return []string{
		fmt.Sprintf("2-room flat, run %d", run.ID),
		fmt.Sprintf("studio, run %d", run.ID),
	}
}
