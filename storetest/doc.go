// Package storetest is the conformance suite for implementations of
// runclaim.Store. Every Store in this module passes it (the Postgres store
// and the memory store), and a third-party backend proves that it behaves
// the same way by passing it too.
//
// # Running it against a backend
//
// Call RunReplicas from a test function of the backend's own package. Its
// argument makes a fresh, empty backend for one subtest (a new database,
// schema or table, created and migrated, its removal registered with
// t.Cleanup) and returns a function that opens one more Store on that
// backend, as another replica of a service would: for a backend on a
// database, a Store over a connection pool of its own.
//
//	func TestConformance(t *testing.T) {
//		db := openTestDatabase(t) // dropped with t.Cleanup
//		var n atomic.Int64
//		storetest.RunReplicas(t, func(t *testing.T) func() runclaim.Store {
//			table := fmt.Sprintf("runs_%d", n.Add(1)) // a fresh, empty backend
//			return func() runclaim.Store {
//				pool := openPool(t, db) // closed with t.Cleanup
//				store, err := mybackend.New(pool, mybackend.WithTable(table))
//				if err != nil {
//					t.Fatal(err)
//				}
//				if err := store.Migrate(t.Context()); err != nil { // idempotent
//					t.Fatal(err)
//				}
//				return store
//			}
//		})
//	}
//
// The cases that need several replicas open up to four Stores, call them
// from many goroutines at once, and check the result through all of them. A
// Store value that keeps state of its own (a cache, a mutex standing in for
// a lock in the database) fails them, though it may pass every case that
// uses one Store.
//
// Every subtest uses source names of its own, so a backend may also be
// shared by all subtests: newBackend may return the same open function
// each time. The suite uses only the Store interface and the
// exported types of package runclaim; it never reads the backend's storage
// directly. Run the test with -race.
//
// # What it checks
//
//   - Claim results: a won claim reports its source, owner, start and
//     lease end (a lease with a fraction of a second, exact to the
//     microsecond); a lost one a *runclaim.NotClaimedError naming the
//     holder as it is, lease end included.
//   - Exclusion: 16 claimants on up to four replicas hammer one source, and
//     at no instant do two of them hold it; on each of 32 fresh sources,
//     eight claimants released at once leave exactly one winner; so do
//     eight claimants released at once on each of 16 runs whose lease has
//     ended, and the old holders learn they lost.
//   - Replicas: a run claimed through one Store is seen, extended and
//     finished through the others; IDs increase across all of them.
//   - A skip answers at once: a claim of a held source does not wait for
//     the holder.
//   - Expiry and takeover: a run whose lease has ended is expired by the
//     next claim, which starts a new run; the old holder's Heartbeat and
//     Finish then return runclaim.ErrLeaseLost.
//   - A lapsed lease is lost: once a run's lease has ended by the store's
//     clock, its Heartbeat and Finish return runclaim.ErrLeaseLost whether
//     or not a claim has expired it yet, a retried Finish says the same,
//     and the source is free.
//   - A lost answer: a claim that committed but whose answer its caller
//     never read holds the source against every claim, a retry with the
//     same owner included, until its lease ends, and is then taken over;
//     a heartbeat sent again extends the lease again.
//   - A run is found by its ID and its source: a heartbeat or finish that
//     names another source is answered as for a run that is not running.
//   - Heartbeats: a heartbeat extends the lease, and a run kept alive by
//     heartbeats holds its source past the end of its first lease.
//   - Fencing order: run IDs strictly increase across the whole store.
//   - Minimum interval: runclaim.ErrTooSoon, with RetryAfter the last start
//     plus the longer of the claimer's interval and the one recorded with
//     that run, which binds a claimer that asked for none; a failed run and
//     a run whose lease ended count as runs; a lapsed running run within
//     its interval is a too-soon skip, not a holder; with eight claimants
//     released at once on each of 32 fresh sources, each winner finishing
//     at once, exactly one run starts.
//   - Finish: a repeated Finish with the same outcome succeeds, another
//     outcome returns runclaim.ErrFinished, a heartbeat of a finished or
//     unknown run returns runclaim.ErrLeaseLost. A repeated Finish succeeds
//     too when its error text is runclaim.MaxErrorLen bytes long, or as long
//     as FinishRequest.Validate allows (what a Claimer sends for a longer
//     error), also through a Claimer whose first Finish lost its answer;
//     a text that differs in one byte returns runclaim.ErrFinished.
//     Identical Finish calls racing, through one Store or several, all
//     succeed.
//   - Sources that look alike are distinct: case, Unicode normalisation
//     forms, leading and trailing spaces, prefixes.
//   - Bad input: malformed requests are refused with an error that is not
//     a skip, and write nothing.
//   - Context: a context that ended before a call makes every method
//     return an error matching ctx.Err(). One cancelled during a call, at
//     each point where the store looks at it in turn, makes the call either
//     complete or return an error matching context.Canceled: a claim that
//     returned it wrote nothing, a heartbeat left the run held, and a
//     finish can be sent again.
//   - Many sources at once: a Store that is a runclaim.ManyStore is
//     asked through its ClaimMany (another one through Claim, a source at a
//     time, as a Claimer asks it). Results come in the order asked: a run
//     for each free source, a skip for each held, too-soon or tick-done
//     one, whose holder is left as it was; a lapsed run is taken over; a
//     source listed twice, an invalid request or more than
//     runclaim.MaxClaimMany sources is refused and claims none of the
//     valid ones; eight claimants on four replicas, each asking for two
//     thirds of 24 sources in its own shuffled order, win each source
//     exactly once per round, and none of their calls fails. A
//     runclaim.ManyStore also extends many leases at once: each live
//     run's, while a run finished, lapsed or named with another source is
//     lost alone.
//   - Taking a claim back, for a Store with an Unclaim method (see
//     runclaim.ManyStore; the case is skipped, and says so, for one without): a run taken
//     back serves no tick, counts for no minimum interval (the source's
//     run before it counts again) and leaves its source free; a run taken
//     back already, a finished run, and a running run named with another
//     start or source are not taken back, and Unclaim returns
//     runclaim.ErrLeaseLost and changes nothing.
//   - Control, for a Store that is also a runclaim.Controller (the cases
//     are skipped, and say so, for one that is not): a pause skips every
//     claim with runclaim.ErrPaused, its end as RetryAfter and its note,
//     and leaves a running run alone; a timed pause ends by the store's
//     clock and no run starts before its end; a pause until a time that
//     has passed is refused; Resume frees the source and is nil on one
//     not paused; a trigger lets exactly one claim in despite the minimum
//     interval or a done tick, and exactly one when replicas race for it,
//     waits while a run holds the source or a pause does, and
//     is not used up by a skipped claim; Pause, Resume and Trigger refuse
//     an invalid source, a note too long, not UTF-8 or with a NUL byte,
//     and an ended context, and change nothing.
//
// The suite's own tests prove its power: each of a set of deliberately
// wrong Stores, one bug each, fails the subtest meant to catch it.
//
// Tests that depend on time use real leases of 150 ms to 1 s and read the
// store's own clock through heartbeats, so they hold for a store whose clock
// is not the test process's own, such as a database server's. No check
// depends on how fast the store is, within generous bounds: the hammering
// goes on for up to 10 s until enough claims won and lost, the suite waits
// up to 20 s for a store's clock to pass a time, and it reports a claim of
// a held source that has not answered after 10 s as waiting for the
// holder. Leases and intervals are whole microseconds, the precision of a
// Postgres timestamp. The whole suite takes about three seconds on the
// memory store, and ten on a Postgres server on the same machine.
package storetest
