package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/gocronlock"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

func newElector(t *testing.T, c *runclaim.Claimer, source string) *gocronlock.Elector {
	t.Helper()
	e, err := gocronlock.NewElector(c, source)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestElectorBasics checks leadership without a scheduler: the first
// Elector wins, the second is refused while the first holds the source and
// wins once it closes, a closed Elector is never the leader again, and the
// Claimer's minimum interval does not delay the hand-over.
func TestElectorBasics(t *testing.T) {
	ctx := t.Context()
	store := runclaim.NewMemoryStore()
	a := newElector(t, newClaimer(t, store, runclaim.WithOwner("a"), runclaim.WithMinInterval(time.Hour)), "leader")
	b := newElector(t, newClaimer(t, store, runclaim.WithOwner("b"), runclaim.WithMinInterval(time.Hour)), "leader")
	defer b.Close(ctx)

	if err := a.IsLeader(ctx); err != nil {
		t.Fatalf("a.IsLeader on a free source: %v", err)
	}
	for range 3 {
		if err := a.IsLeader(ctx); err != nil {
			t.Fatalf("a.IsLeader while leader: %v", err)
		}
		if err := b.IsLeader(ctx); !errors.Is(err, runclaim.ErrAlreadyRunning) {
			t.Fatalf("b.IsLeader while a leads: %v; want ErrAlreadyRunning", err)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("a.Close: %v", err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("second a.Close: %v", err)
	}
	if err := b.IsLeader(ctx); err != nil {
		t.Fatalf("b.IsLeader after a closed: %v", err)
	}
	if err := a.IsLeader(ctx); !errors.Is(err, gocronlock.ErrElectorClosed) {
		t.Fatalf("a.IsLeader after Close: %v; want ErrElectorClosed", err)
	}
}

func TestNewElectorValidates(t *testing.T) {
	c := newClaimer(t, runclaim.NewMemoryStore())
	for name, f := range map[string]func() (*gocronlock.Elector, error){
		"nil claimer":   func() (*gocronlock.Elector, error) { return gocronlock.NewElector(nil, "leader") },
		"empty source":  func() (*gocronlock.Elector, error) { return gocronlock.NewElector(c, "") },
		"tab in source": func() (*gocronlock.Elector, error) { return gocronlock.NewElector(c, "a\tb") },
		"long source": func() (*gocronlock.Elector, error) {
			return gocronlock.NewElector(c, strings.Repeat("s", runclaim.MaxSourceLen+1))
		},
	} {
		if e, err := f(); err == nil || e != nil {
			t.Errorf("%s: NewElector = %v, %v; want an error", name, e, err)
		}
	}
	var nilCtx context.Context
	if err := newElector(t, c, "leader").IsLeader(nilCtx); err == nil {
		t.Error("IsLeader(nil) = nil; want an error")
	}
}

// partitionable is a Store that a test can cut off, as a network partition
// or a dead process would: every call then fails.
type partitionable struct {
	runclaim.Store
	cut atomic.Bool
}

var errPartitioned = errors.New("partitioned")

func (s *partitionable) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	if s.cut.Load() {
		return runclaim.RunInfo{}, errPartitioned
	}
	return s.Store.Claim(ctx, req)
}

func (s *partitionable) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	if s.cut.Load() {
		return time.Time{}, errPartitioned
	}
	return s.Store.Heartbeat(ctx, req)
}

func (s *partitionable) Finish(ctx context.Context, req runclaim.FinishRequest) error {
	if s.cut.Load() {
		return errPartitioned
	}
	return s.Store.Finish(ctx, req)
}

// execution is one run of the job, by one replica.
type execution struct {
	replica int
	at      time.Time
}

// TestElectorThreeSchedulers runs three gocron schedulers over one source
// on Postgres, each with its own Claimer and Elector and a job every 20 ms.
// Only the leader may run jobs: sorted by time, the runs must come in one
// block per leader. The leader closes, and another takes over; then the new
// leader is cut off from the database while its scheduler keeps ticking,
// and the third takes over only after the cut-off leader's lease has ended
// and it has stopped running jobs.
func TestElectorThreeSchedulers(t *testing.T) {
	t.Parallel()
	pg := sharedtest.OpenPostgres(t)
	var base runclaim.Store = pg
	ctx, cancel := context.WithTimeout(t.Context(), 3*waitTimeout)
	defer cancel()
	const (
		source = "svc/leader"
		lease  = 1200 * time.Millisecond
	)
	execs := make(chan execution, 1000)
	stores := make([]*partitionable, 3)
	electors := make([]*gocronlock.Elector, 3)
	schedulers := make([]gocron.Scheduler, 3)
	for i := range 3 {
		stores[i] = &partitionable{Store: base}
		claimer := newClaimer(t, stores[i], runclaim.WithOwner(fmt.Sprintf("replica-%d", i)),
			runclaim.WithLease(lease), runclaim.WithHeartbeat(lease/6))
		electors[i] = newElector(t, claimer, source)
		s, err := gocron.NewScheduler(gocron.WithDistributedElector(electors[i]))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.NewJob(gocron.DurationJob(20*time.Millisecond),
			gocron.NewTask(func() { execs <- execution{replica: i, at: time.Now()} }),
			gocron.WithName("job"))
		if err != nil {
			t.Fatal(err)
		}
		schedulers[i] = s
	}
	shut := make([]bool, 3)
	shutdown := func(i int) {
		if !shut[i] {
			shut[i] = true
			if err := schedulers[i].Shutdown(); err != nil {
				t.Errorf("replica %d: shutdown: %v", i, err)
			}
		}
	}
	defer func() {
		for i := range 3 {
			shutdown(i)
			stores[i].cut.Store(false)
			if err := electors[i].Close(context.Background()); err != nil && !errors.Is(err, runclaim.ErrLeaseLost) {
				t.Errorf("replica %d: close: %v", i, err)
			}
		}
	}()
	for _, s := range schedulers {
		s.Start()
	}

	var all []execution
	// next waits for n runs of the job by a replica other than the
	// excluded ones, and returns that replica.
	next := func(n int, excluded ...int) int {
		t.Helper()
		count := map[int]int{}
		for {
			select {
			case e := <-execs:
				all = append(all, e)
				skip := false
				for _, x := range excluded {
					skip = skip || e.replica == x
				}
				if !skip {
					if count[e.replica]++; count[e.replica] == n {
						return e.replica
					}
				}
			case <-ctx.Done():
				t.Fatalf("no replica besides %v ran the job %d times; runs per replica %v", excluded, n, count)
			}
		}
	}

	first := next(10)
	shutdown(first)
	if err := electors[first].Close(ctx); err != nil {
		t.Fatalf("replica %d: close: %v", first, err)
	}
	closed := time.Now()
	second := next(10, first)
	for _, e := range all {
		if e.replica == second {
			t.Logf("replica %d ran its first job %v after replica %d closed", second, e.at.Sub(closed), first)
			break
		}
	}

	// The second replica leads now. On a loaded machine a leader may miss
	// its heartbeats for a whole lease and claim the leadership again (a new
	// run of the same owner): wait for it to hold a run.
	for {
		held, _, err := pg.Running(ctx, source)
		if err != nil {
			t.Fatal(err)
		}
		if len(held) == 1 && held[0].Owner == fmt.Sprintf("replica-%d", second) {
			break
		}
		if len(held) == 1 || ctx.Err() != nil {
			t.Fatalf("running leadership runs %+v; want replica-%d's", held, second)
		}
		time.Sleep(lease / 20)
	}
	stores[second].cut.Store(true) // its scheduler keeps ticking
	third := next(10, first, second)

	// Drain what is left, then check that the runs came in one block per
	// leader, in order: nobody ran a job while another led.
	shutdown(0)
	shutdown(1)
	shutdown(2)
	for len(execs) > 0 {
		all = append(all, <-execs)
	}
	var blocks []int
	for _, e := range all {
		if len(blocks) == 0 || blocks[len(blocks)-1] != e.replica {
			blocks = append(blocks, e.replica)
		}
	}

	runs, err := pg.History(ctx, source, 100)
	if err != nil {
		t.Fatal(err)
	}
	// Oldest first, the runs come in one block per leader. Within a block a
	// run may have expired (a leader that missed its heartbeats for a lease
	// on a loaded machine, and claimed again), and so may a whole block
	// before the first leader's (a replica that led first, at the start,
	// and lost its lease): the first leader's last run succeeded (it
	// closed), the cut-off leader's last run expired, and the third's
	// newest run is running.
	slices.Reverse(runs)
	type block struct {
		owner       string
		first, last runclaim.RunRecord
	}
	var leaders []block
	for _, r := range runs {
		if n := len(leaders); n > 0 && leaders[n-1].owner == r.Owner {
			if prev := leaders[n-1].last; prev.Status != runclaim.StatusExpired {
				t.Errorf("run %d of %s followed run %d, %s; want an expired run before a leader claims again", r.ID, r.Owner, prev.ID, prev.Status)
			}
			leaders[n-1].last = r
			continue
		}
		leaders = append(leaders, block{r.Owner, r, r})
	}
	var owners []string
	for _, b := range leaders {
		owners = append(owners, b.owner)
	}
	// The jobs ran in one block per leadership, in the order of the
	// leadership runs: a block more (a leader's jobs between another's)
	// would be two leaders at once. A leadership that lost its lease
	// before its first job ran none.
	var ran []string
	for _, r := range blocks {
		ran = append(ran, fmt.Sprintf("replica-%d", r))
	}
	j := 0
	for i, b := range leaders {
		switch {
		case j < len(ran) && ran[j] == b.owner:
			j++
		case b.last.Status != runclaim.StatusExpired || i >= len(leaders)-3:
			j = -1
		}
		if j < 0 {
			break
		}
	}
	if j != len(ran) {
		t.Errorf("leaders in the order their jobs ran: %v; want the leadership runs' %v (runs interleaved: two leaders at once)", ran, owners)
	}
	want := []string{fmt.Sprintf("replica-%d", first), fmt.Sprintf("replica-%d", second), fmt.Sprintf("replica-%d", third)}
	n := len(leaders)
	if n < 3 || !slices.Equal(owners[n-3:], want) ||
		leaders[n-3].last.Status != runclaim.StatusSucceeded ||
		leaders[n-2].last.Status != runclaim.StatusExpired ||
		leaders[n-1].last.Status != runclaim.StatusRunning {
		t.Fatalf("leadership runs, oldest first: %+v; want blocks of %v ending succeeded, expired, running", runs, want)
	}
	for _, b := range leaders[:n-3] {
		if b.last.Status != runclaim.StatusExpired {
			t.Errorf("leadership of %s before %s's: its last run %d is %s; want expired (a lease lost at the start)", b.owner, want[0], b.last.ID, b.last.Status)
		}
	}
	cutOff, took := leaders[n-2].last, leaders[n-1].first
	if took.StartedAt.Before(cutOff.LeaseUntil) {
		t.Errorf("replica %d took over at %v, before the lease of replica %d's run ended at %v", third, took.StartedAt, second, cutOff.LeaseUntil)
	}
	t.Logf("replica %d took over %v after the last lease of cut-off replica %d ended (lease %v)",
		third, took.StartedAt.Sub(cutOff.LeaseUntil), second, lease)
}
