package runclaim_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// Rule (G7): whatever the caller's search_path holds, every operator,
// function, aggregate and type that the library sends resolves in
// pg_catalog or in runclaim's own objects. A schema listed before
// pg_catalog holds a copy of every operator and function of pg_catalog,
// the exact-type operators a role with no grants planted in the security
// review (*(bigint, interval), =(oid, regclass), @>(text[], text[]),
// unnest(text[]) ...), and a domain for each common type name; each
// records its call. Every public call of the store and the Claimer,
// Migrate from an empty database, each step's Down and the claim forms of
// older tables then run through a pool with that search_path, and no trap
// may have fired.
func TestNoSearchPathHijack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	traps := sharedtest.PlantTraps(t, db.Pool)
	t.Logf("planted %d operators, %d functions, %d aggregates and %d types", traps.Operators, traps.Functions, traps.Aggregates, traps.Types)
	if traps.Operators < 500 || traps.Functions < 1000 || traps.Aggregates < 50 {
		t.Fatalf("too few traps: %+v", traps)
	}
	sent := &sqlSeen{seen: map[string]bool{}}
	hostile := db.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["search_path"] = sharedtest.TrapSearchPath
		c.ConnConfig.Tracer = sent
	})
	// The traps are live for this pool's sessions: a statement that
	// names its operators without pg_catalog fires them.
	var eq bool
	if err := hostile.QueryRow(ctx, `SELECT 'a'::pg_catalog.text = 'a'`).Scan(&eq); err != nil || !eq {
		t.Fatalf("probe: %v, %v", eq, err)
	}
	if calls, names := traps.Fired(t); calls == 0 || len(names) == 0 {
		t.Fatalf("an unqualified = fired no trap (%d, %v): the traps are not on the search path", calls, names)
	}
	traps.Reset(t)
	check := func(what string) {
		t.Helper()
		if calls, names := traps.Fired(t); calls != 0 {
			t.Errorf("%s: %d trap call(s) through the caller's search_path: %s", what, calls, strings.Join(names, ", "))
			traps.Reset(t)
		}
	}

	// Migrate from nothing, then as a later replica does.
	store, err := runclaim.NewPostgresStore(hostile)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := store.MigrateApplied(ctx); err != nil {
		t.Fatal(err)
	}
	check("Migrate")
	if have, want, err := store.SchemaVersion(ctx); err != nil || have != want {
		check("SchemaVersion")
		t.Fatalf("SchemaVersion: %d, %d, %v", have, want, err)
	}

	exerciseStore(t, db, hostile, store, check)
	check("the store's and the Claimer's calls on the current schema")

	// The claim forms: the current version's function and the previous
	// version's, plain and for a tick.
	for _, f := range claimForms {
		fs := formStore(t, hostile, f)
		c := sharedtest.NewClaimer(t, fs, runclaim.WithOwner("form"), runclaim.WithLease(time.Minute))
		run, err := c.Claim(ctx, "form-"+f.name)
		if err != nil {
			t.Fatalf("%s: Claim: %v", f.name, err)
		}
		if _, err := c.Claim(ctx, "form-"+f.name); !errors.Is(err, runclaim.ErrAlreadyRunning) {
			t.Errorf("%s: losing Claim: %v", f.name, err)
		}
		if err := run.Heartbeat(ctx); err != nil {
			t.Error(err)
		}
		if err := run.Finish(ctx, nil); err != nil {
			t.Error(err)
		}
		if _, err := c.Claim(ctx, "form-tick-"+f.name, runclaim.ForTick(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))); err != nil && !errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("%s: tick Claim: %v", f.name, err)
		}
		check("claims in the " + f.name + " form")
	}
	// A claim with Replace (the current form): it asks the holder to stop,
	// whose heartbeat learns it and whose finish records it replaced, and
	// then wins.
	{
		c := sharedtest.NewClaimer(t, store, runclaim.WithOwner("replaced"), runclaim.WithLease(time.Minute))
		holder, err := c.Claim(ctx, "replace-src")
		if err != nil {
			t.Fatal(err)
		}
		won := make(chan error, 1)
		go func() {
			run, err := sharedtest.NewClaimer(t, store, runclaim.WithOwner("replacer")).Claim(ctx, "replace-src", runclaim.Replace())
			if err == nil {
				err = run.Finish(ctx, nil)
			}
			won <- err
		}()
		for holder.Heartbeat(ctx) == nil {
			time.Sleep(10 * time.Millisecond)
		}
		if err := holder.Finish(ctx, nil); err != nil {
			t.Errorf("Finish of the replaced run: %v", err)
		}
		if err := <-won; err != nil {
			t.Errorf("Claim with Replace: %v", err)
		}
		check("a claim with Replace")
		// An operator's request to stop (runclaim replace).
		asked, err := c.Claim(ctx, "request-stop")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.RequestStop(ctx, "request-stop"); err != nil {
			t.Errorf("RequestStop: %v", err)
		}
		if err := asked.Finish(ctx, nil); err != nil {
			t.Error(err)
		}
		check("an operator's request to stop")
	}

	// The operator statements of tables before ticks (a store that takes
	// its table to be at version 3), and claims by a store that takes it
	// to be at version 8: both claim as on the current table.
	v3 := formStore(t, hostile, claimForm{"function", 3})
	if _, _, err := v3.Running(ctx, ""); err != nil {
		t.Errorf("Running, version 3: %v", err)
	}
	if _, err := v3.History(ctx, "s", 10); err != nil {
		t.Errorf("History, version 3: %v", err)
	}
	if _, err := v3.Release(ctx, 0, "nothing"); !errors.Is(err, runclaim.ErrNotRunning) && err != nil {
		t.Errorf("Release, version 3: %v", err)
	}
	if _, err := v3.Prune(ctx, time.Hour); err != nil {
		t.Errorf("Prune, version 3: %v", err)
	}
	if runs, err := sharedtest.NewClaimer(t, v3).ClaimMany(ctx, []string{"v3-a", "v3-b"}); err != nil || len(runs) != 2 {
		t.Errorf("ClaimMany, version 3: %d runs, %v", len(runs), err)
	}
	if r, err := v3.Claim(ctx, runclaim.ClaimRequest{Source: "v3-u", Owner: "o", Lease: time.Minute}); err != nil {
		t.Errorf("Claim, version 3: %v", err)
	} else if err := v3.Unclaim(ctx, r); err != nil {
		t.Errorf("Unclaim, version 3: %v", err)
	}
	v8 := formStore(t, hostile, claimForm{"keys", 8})
	if _, err := sharedtest.NewClaimer(t, v8).Claim(ctx, "v8", runclaim.WithKeys("v8-key")); err != nil {
		t.Errorf("keyed Claim, version 8: %v", err)
	}
	// The batches of a store that takes its table to be at the version
	// before the current one, without keys and with them (whose states
	// a statement of their own reads).
	prev := formStore(t, hostile, claimForm{"previous", runclaim.OldestClaimVersion})
	if runs, err := sharedtest.NewClaimer(t, prev).ClaimMany(ctx, []string{"prev-a", "prev-b"}); err != nil || len(runs) != 2 {
		t.Errorf("ClaimMany, the version before: %d runs, %v", len(runs), err)
	}
	if runs, err := sharedtest.NewClaimer(t, prev).ClaimMany(ctx, []string{"prev-c", "prev-d"}, runclaim.WithKeys("prev-key")); err != nil || len(runs) != 2 {
		t.Errorf("keyed ClaimMany, the version before: %d runs, %v", len(runs), err)
	}
	check("the statements of older tables")

	// Claims whose caller gave up once the server had them: the store
	// deletes what they won, and gives back a trigger they used.
	for _, tc := range []struct {
		name    string
		trigger bool
		many    bool
	}{{"single", false, false}, {"single, triggered", true, false}, {"many", false, true}, {"many, triggered", true, true}} {
		src := "gave-up-" + strings.ReplaceAll(tc.name, ", ", "-")
		if tc.trigger {
			if err := store.Trigger(ctx, src); err != nil {
				t.Fatal(err)
			}
		}
		cctx, cancel := context.WithCancel(ctx)
		cs, err := runclaim.NewPostgresStore(cancelEverySend{cancelAfterSend{hostile, cancel}})
		if err != nil {
			t.Fatal(err)
		}
		c := sharedtest.NewClaimer(t, cs)
		if tc.many {
			_, err = c.ClaimMany(cctx, []string{src, src + "-2"}, runclaim.WithKeys("gave-up"))
		} else {
			_, err = c.Claim(cctx, src, runclaim.WithKeys("gave-up"))
		}
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: a claim given up after it was sent: %v, want context.Canceled", tc.name, err)
		}
	}
	check("claims given up")
	// A Finish that lost a race with another finds the row's end with
	// read_run. The race cannot be made at will: the statement is sent as
	// the store sends it.
	var status, errText *string
	if err := hostile.QueryRow(ctx, runclaim.StoreStatements(store)["readRun"], int64(1), "s", time.Now()).Scan(&status, &errText); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("read_run: %v", err)
	}
	check("read_run")

	// Every step's Down, newest first, as a user's migration tool runs
	// the exported text, and Migrate back up from the first.
	steps := store.Migrations()
	for i := len(steps) - 1; i >= 0; i-- {
		if _, err := hostile.Exec(ctx, steps[i].Down); err != nil {
			t.Fatalf("Down of step %d: %v", steps[i].Version, err)
		}
		check("Down of step " + steps[i].Name)
	}
	for _, m := range steps {
		if _, err := hostile.Exec(ctx, m.Up); err != nil {
			t.Fatalf("Up of step %d: %v", m.Version, err)
		}
		check("Up of step " + m.Name)
	}
	if have, want, err := store.SchemaVersion(ctx); err != nil || have != want {
		t.Fatalf("SchemaVersion after the steps: %d, %d, %v", have, want, err)
	}
	check("SchemaVersion")

	// The test saw every statement the store has: a statement it never
	// sent would be a blind spot.
	for name, q := range runclaim.StoreStatements(store) {
		if i := strings.Index(q, "%"); i >= 0 && strings.HasPrefix(name, "sourceState") {
			q = q[:i] // filled in per call
		}
		if !sent.sawPrefix(q) {
			t.Errorf("statement %s was never sent: the test does not cover it", name)
		}
	}
}

// cancelEverySend is cancelAfterSend that also cancels once a query of
// many rows (a ClaimMany's) has been sent.
type cancelEverySend struct{ cancelAfterSend }

func (q cancelEverySend) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := q.Querier.Query(ctx, sql, args...)
	q.cancel()
	return rows, err
}

// sqlSeen is a pgx tracer that records the text of every query and batch
// query a pool sends.
type sqlSeen struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (s *sqlSeen) add(q string) {
	s.mu.Lock()
	s.seen[q] = true
	s.mu.Unlock()
}

func (s *sqlSeen) sawPrefix(prefix string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for q := range s.seen {
		if strings.HasPrefix(q, prefix) {
			return true
		}
	}
	return false
}

func (s *sqlSeen) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.add(d.SQL)
	return ctx
}

func (s *sqlSeen) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *sqlSeen) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *sqlSeen) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.add(d.SQL)
}

func (s *sqlSeen) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// exerciseStore makes every public call of store and of a Claimer over it
// once, each with an outcome the test checks, so that a call that failed
// midway (a trap's error, a changed answer) shows, and calls check after
// each group of calls.
func exerciseStore(t *testing.T, db *pgtest.DB, pool *pgxpool.Pool, store *runclaim.PostgresStore, check func(string)) {
	t.Helper()
	ctx := t.Context()
	a := sharedtest.NewClaimer(t, store, runclaim.WithOwner("a"), runclaim.WithLease(time.Minute), runclaim.WithMinInterval(time.Millisecond))
	b := sharedtest.NewClaimer(t, store, runclaim.WithOwner("b"), runclaim.WithLease(time.Minute))
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}

	// Claims: won, lost, heartbeat, state, fence, finish.
	run, err := a.Claim(ctx, "s")
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if _, err := b.Claim(ctx, "s"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Errorf("losing Claim: %v", err)
	}
	must("Heartbeat", run.Heartbeat(ctx))
	must("SaveState", run.SaveState(ctx, []byte("cursor")))
	must("Fence", pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.Fence(ctx, tx, run) }))
	must("Finish", run.Finish(ctx, errors.New("boom")))
	if st, ok, err := store.State(ctx, "s"); err != nil || !ok || string(st.State) != "cursor" {
		t.Errorf("State: %q, %v, %v", st.State, ok, err)
	}
	must("Do", b.Do(ctx, "s", func(_ context.Context, r *runclaim.Run) error {
		if string(r.State()) != "cursor" {
			return errors.New("the state was not handed on")
		}
		return nil
	}))
	if waited, err := a.Claim(ctx, "s", runclaim.Wait()); err != nil {
		t.Errorf("Claim with Wait: %v", err)
	} else {
		must("Finish", waited.Finish(ctx, nil))
	}
	// A run taken back.
	held, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "u", Owner: "a", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	must("Unclaim", store.Unclaim(ctx, held))

	check("the calls before: Ticks.")

	// Ticks.
	tick := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	must("tick Do", a.Do(ctx, "t", func(context.Context, *runclaim.Run) error { return nil }, runclaim.ForTick(tick)))
	if _, err := b.Claim(ctx, "t", runclaim.ForTick(tick)); !errors.Is(err, runclaim.ErrTickDone) {
		t.Errorf("claim of a done tick: %v", err)
	}

	check("the calls before: Many at once, with keys and states.")

	// Many at once, with keys and states.
	must("SetLimit", store.SetLimit(ctx, "site", runclaim.Limit{MaxRunning: 5, MaxStarts: 100, Per: time.Hour}))
	runs, err := a.ClaimMany(ctx, []string{"m1", "m2", "m3"}, runclaim.WithKeys("site"))
	if err != nil || len(runs) != 3 {
		check("ClaimMany")
		t.Fatalf("ClaimMany with keys: %d runs, %v", len(runs), err)
	}
	hb := make([]runclaim.HeartbeatRequest, len(runs))
	for i, r := range runs {
		hb[i] = runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: time.Minute}
	}
	if res, err := store.HeartbeatMany(ctx, hb); err != nil || len(res) != 3 || res[0].Err != nil {
		t.Errorf("HeartbeatMany: %+v, %v", res, err)
	}
	if _, err := b.ClaimMany(ctx, []string{"m1", "m2"}); err != nil {
		t.Errorf("losing ClaimMany: %v", err)
	}
	must("Cooldown", runs[0].Cooldown(ctx, "site", time.Minute, "HTTP 429"))
	if _, err := b.Claim(ctx, "k", runclaim.WithKeys("site")); !errors.Is(err, runclaim.ErrLimited) {
		t.Errorf("claim of a key in its cooldown: %v", err)
	}
	for _, r := range runs {
		must("Finish", r.Finish(ctx, nil))
	}
	must("DoMany", b.DoMany(ctx, []string{"d1", "d2"}, func(context.Context, *runclaim.Run) error { return nil }))
	must("store Cooldown", store.Cooldown(ctx, "other", time.Now().Add(time.Hour), "ban"))
	if keys, _, err := store.Keys(ctx); err != nil || len(keys) != 2 {
		t.Errorf("Keys: %d, %v", len(keys), err)
	}
	must("EndCooldown", store.EndCooldown(ctx, "site"))
	must("DeleteLimit", store.DeleteLimit(ctx, "site"))

	check("the calls before: Operators' calls.")

	// Operators' calls.
	must("SetState", store.SetState(ctx, "s", []byte("set"), false))
	if _, err := store.ClearState(ctx, "s", true); err != nil {
		t.Errorf("ClearState: %v", err)
	}
	must("Pause", store.Pause(ctx, "p", time.Time{}, "hold"))
	if _, err := a.Claim(ctx, "p"); !errors.Is(err, runclaim.ErrPaused) {
		t.Errorf("claim of a paused source: %v", err)
	}
	if c, _, err := store.Controls(ctx, ""); err != nil || len(c) != 1 {
		t.Errorf("Controls: %+v, %v", c, err)
	}
	must("Resume", store.Resume(ctx, "p"))
	must("Trigger", store.Trigger(ctx, "t"))
	if _, err := a.Claim(ctx, "t", runclaim.ForTick(tick)); err != nil {
		t.Errorf("triggered claim of a done tick: %v", err)
	}
	if r, _, err := store.Running(ctx, ""); err != nil || len(r) == 0 {
		t.Errorf("Running: %d, %v", len(r), err)
	}
	if h, err := store.History(ctx, "s", 10); err != nil || len(h) < 3 {
		t.Errorf("History: %d, %v", len(h), err)
	}
	must("HistoryFunc", store.HistoryFunc(ctx, "s", 10, func(runclaim.RunRecord) error { return nil }))
	if _, err := store.Check(ctx, "s", time.Hour); err != nil {
		t.Errorf("Check: %v", err)
	}
	if s, err := store.SourceStates(ctx); err != nil || len(s) == 0 {
		t.Errorf("SourceStates: %d, %v", len(s), err)
	}
	if _, err := store.Release(ctx, 0, "t"); err != nil {
		t.Errorf("Release: %v", err)
	}

	check("the calls before: A takeover of a lapsed run: its claim expires it.")

	// A takeover of a lapsed run: its claim expires it.
	lapsed, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "l", Owner: "a", Lease: runclaim.MinLease})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, 5*time.Millisecond, "the lease to end", func() bool { return dbNow(t, db.Pool).After(lapsed.LeaseUntil) })
	if _, err := store.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: lapsed.ID, Source: "l", StartedAt: lapsed.StartedAt, Lease: time.Minute}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of a lapsed run: %v", err)
	}
	if _, err := b.Claim(ctx, "l"); err != nil {
		t.Errorf("takeover: %v", err)
	}
	if _, err := store.PruneRuns(ctx, runclaim.PruneOptions{KeepLast: 1}); err != nil {
		t.Errorf("PruneRuns: %v", err)
	}
	if _, err := store.Prune(ctx, 0); err != nil {
		t.Errorf("Prune: %v", err)
	}
}
