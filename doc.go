// Package runclaim makes a scheduled job start at most one running run per
// source across every replica of a service, with Postgres as the only shared
// component.
//
// Every replica's scheduler (a time.Ticker, gocron, robfig/cron, a second pod
// during a redeploy) calls Claim or Do for a source on each tick. One of them
// starts a run; the others are told, with an error matching ErrNotClaimed,
// that this tick is not theirs, and why.
//
// # Guarantees
//
//   - At most one running run per source at any instant (G1): a claim takes
//     a transaction-scoped advisory lock, re-checks under it, and inserts the
//     run; a partial unique index on running runs backs that up.
//   - A crashed or partitioned holder frees its source within one lease
//     (G2). A lease that has ended by the database clock is lost, whether
//     or not a claim has expired the run yet.
//   - A holder that lost its run learns it: Heartbeat and Finish return
//     ErrLeaseLost, Run.Lost is closed, and Do cancels its function's
//     context (G3). Do keeps the run alive until its function returns,
//     whatever happens to its context, and one failed or hung heartbeat
//     does not lose the run. A run lost while the function winds down
//     after a shutdown is still told, through Run.Lost (G10).
//   - Run IDs strictly increase, so Run.ID is a fencing token, and
//     PostgresStore.Fence makes a job's writes to the same database commit
//     only while it holds its run (G4).
//   - With WithMinInterval, two runs of a source start at least that far
//     apart; the interval is recorded with the run and binds every later
//     claimer (G5).
//   - All time is the database's clock_timestamp() (G6).
//   - No session state: correct behind PgBouncer in transaction pooling
//     mode, and every statement answers as under READ COMMITTED whatever
//     isolation level the server defaults to (G7).
//   - A claim that errors or is skipped writes nothing and holds nothing;
//     bad input is refused before any SQL runs (G8).
//   - Migrate on a current schema takes no lock on the runs table, so
//     replicas may call it at every start (G9).
//   - Exactly one run per scheduled tick (G11): Claim and Do with ForTick name
//     the tick a run serves; a tick that a running, succeeded or failed run
//     has served, and every older one, is skipped with ErrTickDone for
//     every replica, whatever their clocks say, while a run that expired
//     leaves its tick open. A Ticker delivers a schedule's ticks on the
//     wall clock and, after a restart or a suspension, the latest missed
//     tick within a starting deadline.
//
// A winning or losing claim is one network round trip: one call of the
// claim function that Migrate creates (a table without it, at schema
// version 2, gets the previous release's three-statement pgx.Batch
// instead), run as a single READ COMMITTED transaction. (The first claim on
// each pooled connection takes two: pgx prepares the statement first.)
//
// # Use
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	if err != nil {
//		return err
//	}
//	store, err := runclaim.NewPostgresStore(pool)
//	if err != nil {
//		return err
//	}
//	if err := store.Migrate(ctx); err != nil {
//		return err
//	}
//	claimer, err := runclaim.New(store, runclaim.WithLease(30*time.Second))
//	if err != nil {
//		return err
//	}
//	// On each tick of a schedule, on every replica, naming the tick (see
//	// NewTicker for a schedule's ticks on the wall clock):
//	err = claimer.Do(ctx, "avito", func(ctx context.Context, run *runclaim.Run) error {
//		return sweep(ctx, run.ID) // pass run.ID on as a fencing token
//	}, runclaim.ForTick(tick))
//	if errors.Is(err, runclaim.ErrNotClaimed) {
//		// another replica runs this tick, or has run it
//	}
//
// The loop that claims every tick of a Ticker, the same ticks on every
// replica, is ExampleForTick, explained in docs/schedulers.md ("A
// plain ticker"); examples/ticker runs it on three replicas. Ticks and
// catch-up: docs/ticks.md.
//
// Do heartbeats while the function runs and, once the run can no longer be
// trusted to be this holder's, closes Run.Lost and cancels the function's
// context with cause ErrLeaseLost. A context is cancelled only once: after
// a shutdown has cancelled it, a lost run shows only in Run.Lost. So a
// function that goes on working after ctx.Done() (a flush, a checkpoint)
// selects on run.Lost() as well:
//
//	<-ctx.Done() // shutting down: finish the batch in hand
//	select {
//	case <-flushed:
//	case <-run.Lost():
//		return errors.New("run lost: another replica may run the source now")
//	}
//
// Code that needs finer control calls Claim, Run.Heartbeat and Run.Finish
// itself; Run.Lost works for it too.
//
// # Many sources per tick
//
// ClaimMany claims up to MaxClaimMany sources in one
// call, with each source's guarantees of a single claim; on Postgres, one
// statement, one transaction. DoMany runs fn for each won
// run under Do's rules, and keeps all of a Claimer's DoMany runs alive in
// one statement per heartbeat interval. A Store offers the bulk forms by
// implementing ManyStore; another Store is asked one source, and one run,
// at a time. A call that returns an error claims nothing and serves no
// tick: on a Store that asks one source at a time, the runs won before a
// failed claim are taken back if the Store has an Unclaim method (see
// ManyStore). Otherwise they are finished as failed, which serves their
// tick, so on such a Store ClaimMany with ForTick of more than one source is
// refused before anything is claimed.
//
// # A claim that waits
//
// Claim and Do skip a held source. With the Wait option they wait for the
// holder instead, by polling with no session state (so through PgBouncer
// too), and return when they win, when ctx ends (ctx's error), or at once
// on a skip that waiting cannot end: a pause or a minimum interval that
// ends after ctx's deadline, a tick already served. See Wait and
// docs/waiting.md.
//
// # Timing
//
// A Claimer's timing follows from its lease and heartbeat interval, and
// the fields of Claimer.Settings report each value: Lease, HeartbeatInterval (a third of the
// lease by default), HeartbeatTimeout (the bound on one heartbeat
// attempt), RetryDelay (the wait after a failed attempt) and ExpiryMargin
// (how long before the lease ends by the local clock a run without a
// successful heartbeat is given up as lost). WithMaxRunTime bounds a run:
// past it, Do cancels fn's context with ErrRunTimeout and records the run
// as failed.
//
// # Concurrency
//
// Claimer, Run, PostgresStore and MemoryStore are safe for concurrent use.
// Create one Claimer per process and share it.
//
// # Stores
//
// NewPostgresStore keeps runs in a Postgres table; NewMemoryStore keeps them
// in memory, for tests and single-instance tools. Another backend implements
// Store and proves itself with package storetest.
//
// PostgresStore and MemoryStore are Controllers, which let operators steer
// a source without a deploy: Pause skips every claim of it with ErrPaused,
// Resume ends the pause, and Trigger lets its next claim in despite the
// minimum interval or a done tick. On Postgres they need schema version 5.
//
// # Absence
//
// Hooks and logs report what happened; PostgresStore.Check reports what did
// not: whether a source's newest succeeded run started within an age, in one
// bounded query, for a service's health endpoint ('runclaim check' gives the
// same answer as an exit code). SourceStates reads every source at once, for
// a metrics collector.
package runclaim
