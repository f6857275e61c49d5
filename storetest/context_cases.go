package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// testContext checks that an ended context makes every method return its
// error, and a claim write nothing.
func testContext(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	ended := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"past deadline", expired, context.DeadlineExceeded},
	}

	for _, c := range ended {
		_, err := s.Claim(c.ctx, claimReq(src, "owner", longLease))
		if !errors.Is(err, c.want) || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("Claim with a %s context: %v, want %v and not ErrNotClaimed", c.name, err, c.want)
		}
	}
	// Nothing was written: the source is free, and not too soon.
	r := mustClaim(t, ctx, s, runclaim.ClaimRequest{Source: src, Owner: "owner", Lease: longLease, MinInterval: time.Hour})

	for _, c := range ended {
		if _, err := s.Heartbeat(c.ctx, runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: longLease}); !errors.Is(err, c.want) {
			t.Errorf("Heartbeat with a %s context: %v, want %v", c.name, err, c.want)
		}
		if err := s.Finish(c.ctx, succeeded(r)); !errors.Is(err, c.want) {
			t.Errorf("Finish with a %s context: %v, want %v", c.name, err, c.want)
		}
	}
	// Finish with the same outcome succeeds whether or not the refused
	// one was recorded.
	mustFinish(t, ctx, s, succeeded(r))
}

// maxLooks bounds how many times one call may look at its context before
// testContextMidCall gives up on cancelling it at each of them.
const maxLooks = 1000

// testContextMidCall cancels the context of a Claim, a Heartbeat and a
// Finish while the call runs: at the store's first look at the context, then
// at its second, and so on, until a call ends before the store looked at its
// context as often. Whenever a call returns an error it must match
// context.Canceled and not be a skip, and:
//   - a claim that returned it wrote nothing (its source is free, and not
//     too soon), while a claim that returned a run holds its source;
//   - a heartbeat left the run held, with a lease end no earlier than
//     before;
//   - a finish can be sent again and then succeeds, and frees the source.
func testContextMidCall(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	r := openReplicas(open, 2)
	s, other := r[0], r[1]
	canceled := func(what string, err error) bool {
		t.Helper()
		if !errors.Is(err, context.Canceled) || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("%s with its context cancelled during the call: %v, want an error matching context.Canceled and not ErrNotClaimed", what, err)
			return false
		}
		return true
	}

	looks := eachLook(t, ctx, "Claim", func(tc *tripCtx) error {
		src := fmt.Sprintf("%s/claim-%d", prefix, tc.at)
		info, err := s.Claim(tc, claimReq(src, "owner", longLease))
		if err == nil {
			_, err := other.Claim(ctx, claimReq(src, "other", longLease))
			wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), info)
			mustFinish(t, ctx, other, succeeded(info))
			return nil
		}
		if canceled(fmt.Sprintf("Claim(%q), cancelled at look %d,", src, tc.at), err) {
			// Nothing written: neither a run holding the source nor a
			// start that makes a claim with an interval too soon.
			info, cerr := other.Claim(ctx, runclaim.ClaimRequest{Source: src, Owner: "other", Lease: longLease, MinInterval: time.Hour})
			if cerr != nil {
				t.Errorf("Claim(%q), its context cancelled at look %d, returned %v, but wrote a run: a claim of the source then got %v", src, tc.at, err, cerr)
				return cerr
			}
			mustFinish(t, ctx, other, succeeded(info))
		}
		return err
	})
	t.Logf("Claim: cancelled at each of %d looks at its context", looks)

	src := prefix + "/heartbeat"
	a := mustClaim(t, ctx, s, claimReq(src, "owner", longLease))
	looks = eachLook(t, ctx, "Heartbeat", func(tc *tripCtx) error {
		until, err := s.Heartbeat(tc, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: longLease})
		if err == nil {
			if until.Before(a.LeaseUntil) {
				t.Errorf("Heartbeat of run %d returned lease end %v, before the previous one %v", a.ID, until, a.LeaseUntil)
			}
			a.LeaseUntil = until
		} else if !canceled(fmt.Sprintf("Heartbeat(run %d), cancelled at look %d,", a.ID, tc.at), err) {
			return err
		}
		_, cerr := other.Claim(ctx, claimReq(src, "other", longLease))
		nc := skipOf(t, cerr, src, runclaim.ErrAlreadyRunning)
		if nc.Holder == nil || nc.Holder.ID != a.ID || nc.Holder.LeaseUntil.Before(a.LeaseUntil) {
			t.Errorf("after Heartbeat(run %d) returned %v, a claim named holder %+v, want run %d with a lease end no earlier than %v", a.ID, err, nc.Holder, a.ID, a.LeaseUntil)
		}
		if err != nil {
			a.LeaseUntil = mustHeartbeat(t, ctx, other, a, longLease)
		}
		return err
	})
	t.Logf("Heartbeat: cancelled at each of %d looks at its context", looks)
	mustFinish(t, ctx, s, succeeded(a))

	looks = eachLook(t, ctx, "Finish", func(tc *tripCtx) error {
		src := fmt.Sprintf("%s/finish-%d", prefix, tc.at)
		b := mustClaim(t, ctx, s, claimReq(src, "owner", longLease))
		err := s.Finish(tc, failed(b, "boom"))
		if err != nil && !canceled(fmt.Sprintf("Finish(run %d), cancelled at look %d,", b.ID, tc.at), err) {
			return err
		}
		if err2 := s.Finish(ctx, failed(b, "boom")); err2 != nil {
			t.Errorf("Finish(run %d) sent again after it returned %v: %v, want nil", b.ID, err, err2)
		}
		c := mustClaim(t, ctx, other, claimReq(src, "other", longLease))
		mustFinish(t, ctx, other, succeeded(c))
		return err
	})
	t.Logf("Finish: cancelled at each of %d looks at its context", looks)
}

// eachLook calls call with a context cancelled at the store's first look at
// it, then with one cancelled at its second look, and so on, until a call
// returns nil without the store having looked at its context as often. It
// returns how many looks it cancelled at.
func eachLook(t *testing.T, ctx context.Context, what string, call func(tc *tripCtx) error) int {
	t.Helper()
	for at := int64(1); at <= maxLooks; at++ {
		tc := newTripCtx(ctx, at)
		err := call(tc)
		tc.cancel()
		if t.Failed() {
			t.FailNow()
		}
		if err == nil && !tc.tripped.Load() {
			return int(at - 1)
		}
	}
	t.Fatalf("%s still looked at its context a %dth time", what, maxLooks)
	return 0
}

// A tripCtx is a context that the store under test cancels, in effect: the
// at-th call the store makes to its Done or Err method cancels it before
// returning. Its other methods are its parent's, and its Value gives the
// context package its inner cancelable context, so that contexts the store
// derives from it are cancelled with it.
type tripCtx struct {
	context.Context // a cancelable child of the test's context
	cancel          context.CancelFunc
	at              int64
	looks           atomic.Int64
	tripped         atomic.Bool
}

func newTripCtx(parent context.Context, at int64) *tripCtx {
	ctx, cancel := context.WithCancel(parent)
	return &tripCtx{Context: ctx, cancel: cancel, at: at}
}

func (c *tripCtx) look() {
	if c.looks.Add(1) == c.at {
		c.tripped.Store(true)
		c.cancel()
	}
}

// Done implements context.Context.
func (c *tripCtx) Done() <-chan struct{} {
	c.look()
	return c.Context.Done()
}

// Err implements context.Context.
func (c *tripCtx) Err() error {
	c.look()
	return c.Context.Err()
}
