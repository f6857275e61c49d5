package runclaim_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// Rule: a run's State is the source's state when its claim won; it does
// not change during the run, not even when the run saves; the next run
// gets the last save, whatever the outcome of the run that saved it; an
// empty state is a state, not nil.
func TestRunStateHandedOn(t *testing.T) {
	ctx := t.Context()
	c, err := runclaim.New(runclaim.NewMemoryStore(), runclaim.WithOwner("me"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Claim(ctx, "feed")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.State(); got != nil {
		t.Fatalf("first run's State() = %q, want nil", got)
	}
	if err := a.SaveState(ctx, []byte("cursor-1")); err != nil {
		t.Fatalf("SaveState: %v", err)
	}
	if got := a.State(); got != nil {
		t.Fatalf("State() after SaveState = %q, want it unchanged (nil)", got)
	}
	if err := a.Finish(ctx, errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveState(ctx, []byte("late")); !errors.Is(err, runclaim.ErrFinished) {
		t.Fatalf("SaveState after Finish = %v, want ErrFinished", err)
	}
	b, err := c.Claim(ctx, "feed")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.State(); string(got) != "cursor-1" {
		t.Fatalf("second run's State() = %q, want the failed run's save %q", got, "cursor-1")
	}
	b.State()[0] = 'X' // the caller's copy
	if got := b.State(); string(got) != "cursor-1" {
		t.Fatalf("State() after the caller changed its copy = %q", got)
	}
	if err := b.SaveState(ctx, make([]byte, runclaim.MaxStateLen+1)); err == nil {
		t.Fatal("SaveState of MaxStateLen+1 bytes: nil error")
	}
	if err := b.SaveState(ctx, nil); err != nil {
		t.Fatalf("SaveState(nil): %v", err)
	}
	if err := b.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	d, err := c.Claim(ctx, "feed")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.State(); got == nil || len(got) != 0 {
		t.Fatalf("State() after an empty save = %#v, want empty and not nil", got)
	}
	full := bytes.Repeat([]byte{0xff, 0}, runclaim.MaxStateLen/2)
	if err := d.SaveState(ctx, full); err != nil {
		t.Fatalf("SaveState of MaxStateLen bytes: %v", err)
	}
	_ = d.Finish(ctx, nil)
}

// Rule: a run whose lease has ended by the store's clock cannot save: it
// gets ErrLeaseLost, Lost closes, and the state stays.
func TestRunSaveStateLapsed(t *testing.T) {
	clk := newManualClock()
	s := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
	ctx := t.Context()
	c, err := runclaim.New(s, runclaim.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Claim(ctx, "feed")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SaveState(ctx, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if err := a.SaveState(ctx, []byte("stale")); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Fatalf("SaveState after the lease end = %v, want ErrLeaseLost", err)
	}
	select {
	case <-a.Lost():
	default:
		t.Fatal("Lost not closed after SaveState found the lease lost")
	}
	b, err := c.Claim(ctx, "feed")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.State(); string(got) != "kept" {
		t.Fatalf("State() = %q, want %q", got, "kept")
	}
}

// Rule: on a Store that keeps no states, SaveState is an error, not a
// silent loss of the cursor.
func TestRunSaveStateNotStateSaver(t *testing.T) {
	c, err := runclaim.New(struct{ runclaim.Store }{runclaim.NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Claim(t.Context(), "feed")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Finish(context.Background(), nil)
	if err := r.SaveState(t.Context(), []byte("x")); err == nil || errors.Is(err, runclaim.ErrLeaseLost) {
		t.Fatalf("SaveState on a Store that is not a StateSaver = %v, want an error that says so", err)
	}
}

// heldSave is a MemoryStore whose SaveState waits, once it has been
// called, until release is closed: a save on its way while the run's own
// Finish is recorded.
type heldSave struct {
	*runclaim.MemoryStore
	called, release chan struct{}
}

func (s heldSave) SaveState(ctx context.Context, run runclaim.RunInfo, state []byte) error {
	close(s.called)
	<-s.release
	return s.MemoryStore.SaveState(ctx, run, state)
}

// Rule: a save of state that the run's own Finish overtakes returns
// ErrFinished, as a heartbeat does: the run was recorded finished by its
// holder, so Lost stays open and no LeaseLost hook fires.
func TestSaveStateRacingFinish(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := heldSave{runclaim.NewMemoryStore(), make(chan struct{}), make(chan struct{})}
	var lost int
	c, err := runclaim.New(store, runclaim.WithHooks(runclaim.Hooks{LeaseLost: func(runclaim.Event) { lost++ }}))
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Claim(ctx, "feed")
	if err != nil {
		t.Fatal(err)
	}
	saved := make(chan error, 1)
	go func() { saved <- run.SaveState(ctx, []byte("late")) }()
	<-store.called
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	close(store.release)
	if err := <-saved; !errors.Is(err, runclaim.ErrFinished) || errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("SaveState overtaken by the run's Finish: %v; want ErrFinished", err)
	}
	select {
	case <-run.Lost():
		t.Error("Lost closed for a run its holder finished")
	default:
	}
	if lost != 0 {
		t.Errorf("the LeaseLost hook fired %d times for a run its holder finished", lost)
	}
}
