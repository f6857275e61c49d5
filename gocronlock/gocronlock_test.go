package gocronlock_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/gocronlock"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// waitTimeout bounds every wait in these tests.
const waitTimeout = 20 * time.Second

// stores are the stores every adapter test runs over.
var stores = sharedtest.Stores()

var newClaimer = sharedtest.NewClaimer

// minutely is the schedule of the job "sweep" of most tests: each whole
// minute.
var minutely = gocronlock.WithSchedule("sweep", runclaim.Every(time.Minute))

func newLocker(t *testing.T, c *runclaim.Claimer, opts ...gocronlock.Option) *gocronlock.Locker {
	t.Helper()
	l, err := gocronlock.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestTwoSchedulersOneRunPerTick runs two gocron schedulers, each with its
// own Claimer, on one store and one fake clock, so that both fire every tick
// at the same instant. The job that runs holds its lock until the other
// scheduler's attempt for the tick is seen; exactly one of the two attempts
// must run the job and the other must be skipped with ErrAlreadyRunning.
// Then the run must be recorded as succeeded before the next tick. The
// fake clock starts on a whole minute, so that the job's schedule, given
// to the Locker, is runclaim.Every(time.Minute); the Locker names ticks by
// the fake clock (TestEachTickOnce covers real time).
func TestTwoSchedulersOneRunPerTick(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			store := sc.Open(t)
			ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
			defer cancel()

			type attempt struct {
				replica string
				err     error // nil: the job ran
			}
			attempts := make(chan attempt, 2)
			finished := make(chan runclaim.Event, 2)
			release := make(chan struct{})
			done := make(chan struct{}) // unblocks a held job if the test fails
			clk := clockwork.NewFakeClockAt(time.Now().Truncate(time.Minute))

			for _, replica := range []string{"replica-a", "replica-b"} {
				claimer := newClaimer(t, store, runclaim.WithOwner(replica),
					runclaim.WithHooks(runclaim.Hooks{Finished: func(e runclaim.Event) { finished <- e }}))
				s, err := gocron.NewScheduler(
					gocron.WithClock(clk),
					gocron.WithDistributedLocker(newLocker(t, claimer, minutely, gocronlock.WithClock(clk.Now))),
				)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := s.Shutdown(); err != nil {
						t.Errorf("%s: shutdown: %v", replica, err)
					}
				})
				_, err = s.NewJob(gocron.DurationJob(time.Minute),
					gocron.NewTask(func() {
						attempts <- attempt{replica: replica}
						select {
						case <-release:
						case <-done:
						}
					}),
					gocron.WithName("sweep"),
					gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
						attempts <- attempt{replica: replica, err: err}
					})),
				)
				if err != nil {
					t.Fatal(err)
				}
				s.Start()
			}
			t.Cleanup(func() { close(done) }) // runs before the Shutdowns

			const ticks = 6
			start := clk.Now()
			wins := map[string]int{}
			for tick := 1; tick <= ticks; tick++ {
				// Both schedulers have set their timer for the next tick.
				if err := clk.BlockUntilContext(ctx, 2); err != nil {
					t.Fatalf("tick %d: waiting for both schedulers to set a timer: %v", tick, err)
				}
				// Advance to a second past the tick, not onto it: gocron
				// may finish its bookkeeping of the previous tick after this
				// Advance, and a scheduler that then finds the clock exactly
				// on its schedule fires again at once. A real clock is never
				// exactly there.
				clk.Advance(start.Add(time.Duration(tick)*time.Minute + time.Second).Sub(clk.Now()))

				var ran []string
				for range 2 {
					select {
					case a := <-attempts:
						switch {
						case a.err == nil:
							ran = append(ran, a.replica)
						case !errors.Is(a.err, runclaim.ErrAlreadyRunning):
							t.Fatalf("tick %d: %s: lock error %v, want one matching ErrAlreadyRunning", tick, a.replica, a.err)
						}
					case <-ctx.Done():
						t.Fatalf("tick %d: %d of 2 attempts seen before the timeout", tick, len(ran))
					}
				}
				if len(ran) != 1 {
					t.Fatalf("tick %d: the job ran on %v; want exactly one replica", tick, ran)
				}
				wins[ran[0]]++
				release <- struct{}{}
				select {
				case e := <-finished:
					if e.Status != runclaim.StatusSucceeded || e.Run.Owner != ran[0] || e.Run.Source != "sweep" {
						t.Fatalf("tick %d: finished %s run of %q by %s; want succeeded run of \"sweep\" by %s",
							tick, e.Status, e.Run.Source, e.Run.Owner, ran[0])
					}
				case <-ctx.Done():
					t.Fatalf("tick %d: the run was not finished", tick)
				}
			}
			t.Logf("runs per replica over %d ticks: %v", ticks, wins)
		})
	}
}

// countingStore passes calls through to a Store and reports heartbeats.
type countingStore struct {
	runclaim.Store
	heartbeats chan int64 // the run ID of every successful heartbeat
}

func (s *countingStore) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	until, err := s.Store.Heartbeat(ctx, req)
	if err == nil {
		select {
		case s.heartbeats <- req.ID:
		default:
		}
	}
	return until, err
}

// TestLockHeartbeatsUntilUnlock holds a lock for longer than the lease and
// checks that the heartbeats keep another claimer out, that Unlock finishes
// the run (so that the other claimer gets the source), and that Unlock may
// be called twice.
func TestLockHeartbeatsUntilUnlock(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			store := &countingStore{Store: sc.Open(t), heartbeats: make(chan int64, 1)}
			ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
			defer cancel()
			// Three seconds, heartbeats every 300 ms: the run is lost
			// only if no heartbeat gets through for 2.7 s, which a busy
			// machine does not cause (a lease of 300 ms with heartbeats
			// every 30 ms did: one heartbeat slower than 270 ms).
			const lease = 3 * time.Second
			holder := newClaimer(t, store, runclaim.WithLease(lease), runclaim.WithHeartbeat(lease/10), runclaim.WithOwner("holder"))
			other := newClaimer(t, store, runclaim.WithLease(lease), runclaim.WithOwner("other"))
			locker := newLocker(t, holder, gocronlock.WithPrefix("svc/"), minutely)

			lk, err := locker.Lock(ctx, "sweep")
			if err != nil {
				t.Fatal(err)
			}
			// Wait until the claim's own lease has ended (the claim ran
			// before Lock returned, so a lease later by this clock is
			// after its end by the database's too), and for heartbeats
			// meanwhile: only they can keep the other claimer out now.
			// Were they to stop (say, at a cancelled context), the claim
			// below would win.
			start := time.Now()
			for n := 0; n < 3 || time.Since(start) < lease+lease/10; n++ {
				select {
				case <-store.heartbeats:
				case <-ctx.Done():
					t.Fatalf("%d heartbeats seen before the timeout", n)
				}
			}
			_, err = other.Claim(ctx, "svc/sweep")
			var nc *runclaim.NotClaimedError
			if !errors.As(err, &nc) || !errors.Is(err, runclaim.ErrAlreadyRunning) || nc.Holder == nil || nc.Holder.Owner != "holder" {
				t.Fatalf("claim of a held source after %v: %v; want ErrAlreadyRunning held by \"holder\"", time.Since(start), err)
			}

			if err := lk.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatalf("second Unlock: %v", err)
			}
			run, err := other.Claim(ctx, "svc/sweep")
			if err != nil {
				t.Fatalf("claim after Unlock: %v", err)
			}
			if err := run.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLockSkipped checks that a held source makes Lock fail with an error
// that matches ErrNotClaimed and ErrAlreadyRunning and names the key, and
// that the prefix is part of the claimed source.
func TestLockSkipped(t *testing.T) {
	ctx := t.Context()
	store := runclaim.NewMemoryStore()
	holder := newClaimer(t, store, runclaim.WithOwner("holder"))
	run, err := holder.Claim(ctx, "svc/sweep")
	if err != nil {
		t.Fatal(err)
	}
	locker := newLocker(t, newClaimer(t, store), gocronlock.WithPrefix("svc/"), minutely)

	lk, err := locker.Lock(ctx, "sweep")
	if lk != nil || !errors.Is(err, runclaim.ErrNotClaimed) || !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("Lock of a held source = %v, %v; want nil and ErrAlreadyRunning", lk, err)
	}
	var nc *runclaim.NotClaimedError
	if !errors.As(err, &nc) || nc.Source != "svc/sweep" || nc.Holder == nil || nc.Holder.ID != run.ID {
		t.Fatalf("Lock error %v does not carry the holder of svc/sweep", err)
	}

	// Without the prefix the key is a source of its own.
	lk, err = newLocker(t, newClaimer(t, store), minutely).Lock(ctx, "sweep")
	if err != nil {
		t.Fatalf("Lock of a free source: %v", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// An invalid source is a real error, not a skip.
	if _, err := locker.Lock(ctx, "bad\x00key"); !errors.Is(err, runclaim.ErrInvalidSource) || errors.Is(err, runclaim.ErrNotClaimed) {
		t.Fatalf("Lock of an invalid key: %v; want ErrInvalidSource", err)
	}
}

// TestUnlockAfterLeaseLost lets another claimer take the source over once
// the lease has ended by the store's clock; Unlock must then report
// ErrLeaseLost, every time it is called.
func TestUnlockAfterLeaseLost(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	store := runclaim.NewMemoryStore(runclaim.WithClock(func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}))
	const lease = time.Minute
	lost := make(chan runclaim.Event, 1)
	holder := newClaimer(t, store, runclaim.WithLease(lease),
		runclaim.WithHooks(runclaim.Hooks{LeaseLost: func(e runclaim.Event) { lost <- e }}))
	// The first heartbeat is due in 20 s of real time: none happens during
	// the test.
	lk, err := newLocker(t, holder, minutely).Lock(ctx, "sweep")
	if err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	now = now.Add(lease + time.Second)
	mu.Unlock()
	taker := newClaimer(t, store, runclaim.WithLease(lease))
	run, err := taker.Claim(ctx, "sweep")
	if err != nil {
		t.Fatalf("claim after the lease ended: %v", err)
	}

	for i := range 2 {
		if err := lk.Unlock(ctx); !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Fatalf("Unlock #%d of a lost run: %v; want ErrLeaseLost", i+1, err)
		}
	}
	select {
	case e := <-lost:
		if e.Run.Source != "sweep" {
			t.Fatalf("lease lost for %q", e.Run.Source)
		}
	default:
		t.Fatal("the holder's LeaseLost hook was not called")
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func TestNewValidates(t *testing.T) {
	c := newClaimer(t, runclaim.NewMemoryStore())
	for name, f := range map[string]func() (*gocronlock.Locker, error){
		"nil claimer": func() (*gocronlock.Locker, error) { return gocronlock.New(nil) },
		"nil option":  func() (*gocronlock.Locker, error) { return gocronlock.New(c, nil) },
	} {
		if l, err := f(); err == nil || l != nil {
			t.Errorf("%s: New = %v, %v; want an error", name, l, err)
		}
	}
}
