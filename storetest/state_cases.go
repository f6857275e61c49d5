package storetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// saveCall is one call of SaveState: the run it names, and the state.
type saveCall struct {
	runclaim.RunInfo
	State []byte
}

// saveReq is the call that saves state for the run r.
func saveReq(r runclaim.RunInfo, state string) saveCall {
	return saveCall{runclaim.RunInfo{ID: r.ID, Source: r.Source, Owner: r.Owner, StartedAt: r.StartedAt}, []byte(state)}
}

// saveVia makes the call c on ss.
func saveVia(ctx context.Context, ss runclaim.StateSaver, c saveCall) error {
	return ss.SaveState(ctx, c.RunInfo, c.State)
}

// wantState checks the state a claim returned with its run.
func wantState(t *testing.T, what string, r runclaim.RunInfo, has bool, state string) {
	t.Helper()
	if r.HasState != has || r.State != state {
		t.Errorf("%s: run %d has state %q (HasState %v), want %q (HasState %v)", what, r.ID, r.State, r.HasState, state, has)
	}
}

// testStateHandedOn checks a Store that is a runclaim.StateSaver: a
// claim returns no state until one is saved; a run's save is the next
// run's state, whatever the run's outcome (failed and expired runs
// included); an empty state is a state; a claim that loses carries no
// state; and a save that names the run wrongly, or a run that does not
// stateSaverOf returns s as a StateSaver, or skips the case.
func stateSaverOf(t *testing.T, s runclaim.Store) runclaim.StateSaver {
	t.Helper()
	ss, ok := s.(runclaim.StateSaver)
	if !ok {
		t.Skipf("storetest: %T does not implement runclaim.StateSaver", s)
	}
	return ss
}

// hold its lease, or a state too long, is refused and changes nothing.
func testStateHandedOn(t *testing.T, s runclaim.Store) {
	ss := stateSaverOf(t, s)
	ctx, prefix := setup(t)
	src := prefix + "/feed"
	save := func(r runclaim.RunInfo, state string) {
		t.Helper()
		if err := saveVia(ctx, ss, saveReq(r, state)); err != nil {
			t.Fatalf("SaveState(run %d, %q): %v", r.ID, state, err)
		}
	}
	refused := func(what string, req saveCall) {
		t.Helper()
		if err := saveVia(ctx, ss, req); !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("SaveState of %s: %v, want an error matching ErrLeaseLost", what, err)
		}
	}

	a := mustClaim(t, ctx, s, claimReq(src, "a", longLease))
	wantState(t, "the first claim", a, false, "")
	save(a, "page-1")
	save(a, "page-2") // the last save counts
	// A claim that loses carries no state, also in its holder.
	_, err := s.Claim(ctx, claimReq(src, "loser", longLease))
	nc := skipOf(t, err, src, runclaim.ErrAlreadyRunning)
	if nc.Holder != nil && (nc.Holder.HasState || nc.Holder.State != "") {
		t.Errorf("a lost claim's holder carries state %q", nc.Holder.State)
	}
	// The run fails after its save: the save stays (a checkpoint).
	mustFinish(t, ctx, s, failed(a, "crashed after page 2"))
	refused("a finished run", saveReq(a, "late"))

	b := mustClaim(t, ctx, s, claimReq(src, "b", longLease))
	wantState(t, "the claim after a failed run that saved", b, true, "page-2")
	// A save that names the run wrongly changes nothing.
	wrong := saveReq(b, "wrong")
	wrong.Owner = "not-b"
	refused("another owner", wrong)
	wrong = saveReq(b, "wrong")
	wrong.StartedAt = b.StartedAt.Add(-time.Microsecond)
	refused("another start", wrong)
	wrong = saveReq(b, "wrong")
	wrong.Source = src + "x"
	refused("another source", wrong)
	wrong = saveReq(b, "wrong")
	wrong.ID = b.ID + 1000
	refused("another ID", wrong)
	// A state too long is refused before anything is written.
	long := saveReq(b, strings.Repeat("x", runclaim.MaxStateLen+1))
	if err := saveVia(ctx, ss, long); err == nil || errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("SaveState of %d bytes: %v, want an error for its length", len(long.State), err)
	}
	save(b, "") // an empty state is a state
	mustFinish(t, ctx, s, succeeded(b))

	c := mustClaim(t, ctx, s, claimReq(src, "c", longLease))
	wantState(t, "the claim after an empty state", c, true, "")
	full := strings.Repeat("\x00\xff", runclaim.MaxStateLen/2) // any bytes, up to the bound
	save(c, full)
	mustFinish(t, ctx, s, succeeded(c))
	d := mustClaim(t, ctx, s, claimReq(src, "d", longLease))
	if !d.HasState || !bytes.Equal([]byte(d.State), []byte(full)) {
		t.Errorf("the claim after a save of %d bytes: HasState %v, %d bytes, want the same bytes", len(full), d.HasState, len(d.State))
	}
	mustFinish(t, ctx, s, succeeded(d))

	// Another source's state is its own.
	other := mustClaim(t, ctx, s, claimReq(prefix+"/other", "o", longLease))
	wantState(t, "a claim of another source", other, false, "")
	mustFinish(t, ctx, s, succeeded(other))
}

// testStateFencedByLease checks that a save is fenced by the lease, by the
// store's clock: a run whose lease has ended cannot save, whether or not
// a claim took it over, and the next claim gets the state saved while the
// lease held.
func testStateFencedByLease(t *testing.T, s runclaim.Store) {
	ss := stateSaverOf(t, s)
	ctx, prefix := setup(t)
	// A lease under a second: the case waits for it to end by the store's
	// clock (waitPast) and asserts only what holds after that moment.
	const lease = 150 * time.Millisecond
	clock := newStoreClock(t, ctx, s, prefix+"/clock")
	for _, takeover := range []bool{false, true} {
		src := prefix + "/lapsed"
		if takeover {
			src = prefix + "/taken-over"
		}
		a := mustClaim(t, ctx, s, claimReq(src, "a", longLease))
		if err := saveVia(ctx, ss, saveReq(a, "kept")); err != nil {
			t.Fatalf("SaveState(run %d): %v", a.ID, err)
		}
		mustFinish(t, ctx, s, succeeded(a))
		b := mustClaim(t, ctx, s, claimReq(src, "b", lease))
		wantState(t, "the claim after a save", b, true, "kept")
		clock.waitPast(t, ctx, b.LeaseUntil, 20*time.Second)
		var c runclaim.RunInfo
		if takeover {
			c = mustClaim(t, ctx, s, claimReq(src, "c", longLease))
			wantState(t, "the claim that took over", c, true, "kept")
		}
		if err := saveVia(ctx, ss, saveReq(b, "stale")); !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("takeover=%v: SaveState of run %d after its lease ended: %v, want ErrLeaseLost", takeover, b.ID, err)
		}
		if !takeover {
			c = mustClaim(t, ctx, s, claimReq(src, "c", longLease))
		}
		wantState(t, "the claim after a stale save", c, true, "kept")
		mustFinish(t, ctx, s, succeeded(c))
	}
}

// testStateBadInput checks that a malformed save is refused and changes
// nothing.
func testStateBadInput(t *testing.T, s runclaim.Store) {
	ss := stateSaverOf(t, s)
	ctx, prefix := setup(t)
	src := prefix + "/src"
	a := mustClaim(t, ctx, s, claimReq(src, "a", longLease))
	for what, req := range map[string]saveCall{
		"no ID":       {RunInfo: runclaim.RunInfo{Source: src, Owner: "a", StartedAt: a.StartedAt}},
		"no source":   {RunInfo: runclaim.RunInfo{ID: a.ID, Owner: "a", StartedAt: a.StartedAt}},
		"no start":    {RunInfo: runclaim.RunInfo{ID: a.ID, Source: src, Owner: "a"}},
		"no owner":    {RunInfo: runclaim.RunInfo{ID: a.ID, Source: src, StartedAt: a.StartedAt}},
		"NUL owner":   {RunInfo: runclaim.RunInfo{ID: a.ID, Source: src, Owner: "a\x00", StartedAt: a.StartedAt}},
		"state +1":    {RunInfo: runclaim.RunInfo{ID: a.ID, Source: src, Owner: "a", StartedAt: a.StartedAt}, State: make([]byte, runclaim.MaxStateLen+1)},
		"non-UTF-8 s": {RunInfo: runclaim.RunInfo{ID: a.ID, Source: "\xff", Owner: "a", StartedAt: a.StartedAt}},
	} {
		if err := saveVia(ctx, ss, req); err == nil || errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("SaveState with %s: %v, want an error for the request", what, err)
		}
	}
	mustFinish(t, ctx, s, succeeded(a))
	b := mustClaim(t, ctx, s, claimReq(src, "b", longLease))
	wantState(t, "the claim after refused saves", b, false, "")
	mustFinish(t, ctx, s, succeeded(b))
}

// testStateMany checks a Store that is both a runclaim.StateSaver and a
// runclaim.ManyStore: a many-source claim returns, with each run it
// wins, the state of its source as a single claim does (none for a source
// that has none, empty for an empty one), and nothing with a skip.
func testStateMany(t *testing.T, s runclaim.Store) {
	ss := stateSaverOf(t, s)
	mc, ok := s.(runclaim.ManyStore)
	if !ok {
		t.Skipf("storetest: %T does not implement runclaim.ManyStore", s)
	}
	ctx, prefix := setup(t)
	saved, empty, none, held := prefix+"/saved", prefix+"/empty", prefix+"/none", prefix+"/held"
	for src, state := range map[string]string{saved: "cursor=42", empty: "", held: "held's"} {
		r := mustClaim(t, ctx, s, claimReq(src, "first", longLease))
		if err := saveVia(ctx, ss, saveReq(r, state)); err != nil {
			t.Fatalf("SaveState(%s): %v", src, err)
		}
		if src != held {
			mustFinish(t, ctx, s, succeeded(r))
		}
	}
	reqs := []runclaim.ClaimRequest{claimReq(saved, "many", longLease), claimReq(empty, "many", longLease), claimReq(none, "many", longLease), claimReq(held, "many", longLease)}
	res, err := mc.ClaimMany(ctx, reqs)
	if err != nil {
		t.Fatalf("ClaimMany: %v", err)
	}
	wantState(t, "ClaimMany's win of a source with a state", wonRun(t, reqs[0], res[0]), true, "cursor=42")
	wantState(t, "ClaimMany's win of a source with an empty state", wonRun(t, reqs[1], res[1]), true, "")
	wantState(t, "ClaimMany's win of a source with no state", wonRun(t, reqs[2], res[2]), false, "")
	if nc := skipOf(t, res[3].Err, held, runclaim.ErrAlreadyRunning); nc.Holder != nil && nc.Holder.HasState {
		t.Errorf("ClaimMany's skip of a held source carries its state %q", nc.Holder.State)
	}
}
