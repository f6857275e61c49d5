package cronlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/cronlock"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
	"github.com/runclaim/runclaim/internal/testclock"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// waitTimeout bounds every wait in these tests.
const waitTimeout = 20 * time.Second

// stores are the stores every adapter test runs over.
var stores = sharedtest.Stores()

// everyMinute is the schedule of the jobs of most tests: each whole minute.
var everyMinute = cronlock.WithSchedule(runclaim.Every(time.Minute))

// gate is a cron.Schedule whose next activation is whenever the test says:
// Next blocks until the test sends on ticks, then returns the time it was
// asked about, so that the entry fires at once. Once done is closed it
// returns the zero time: never. Blocking in Next blocks the Cron's loop, so
// close done before calling Stop.
type gate struct {
	ticks chan struct{}
	done  <-chan struct{}
}

func (g *gate) Next(t time.Time) time.Time {
	select {
	case <-g.ticks:
		return t
	case <-g.done:
		return time.Time{}
	}
}

// attempt is what one replica did on one tick.
type attempt struct {
	replica string
	ran     bool  // the job ran
	skip    []any // the key/values logged with "skip"
	err     error // logged at Error
}

// attemptLogger is a cron.Logger that reports skips and errors as attempts.
type attemptLogger struct {
	replica  string
	attempts chan<- attempt
}

func (l attemptLogger) Info(msg string, kv ...any) {
	if msg == "skip" {
		l.attempts <- attempt{replica: l.replica, skip: kv}
	}
}

func (l attemptLogger) Error(err error, msg string, kv ...any) {
	l.attempts <- attempt{replica: l.replica, err: fmt.Errorf("%s %v: %w", msg, kv, err)}
}

// TestTwoCronsOneRunPerTick runs two cron.Crons, each with its own Claimer,
// on one store. A test-driven schedule fires both at once on every tick. The
// job that runs holds its claim until the other Cron's attempt for the tick
// is seen; exactly one of the two must run the job and the other must log a
// skip because the source is already running. The run must be recorded
// before the next tick. The test's ticks come milliseconds apart in real
// time, so the wrappers name ticks by a test clock a minute apart, and a
// schedule of a minute (TestEachTickOnce covers real time).
func TestTwoCronsOneRunPerTick(t *testing.T) {
	for _, sc := range stores {
		for _, variant := range []string{"SkipUnlessClaimed", "Job"} {
			t.Run(sc.Name+"/"+variant, func(t *testing.T) {
				t.Parallel()
				testOneRunPerTick(t, sc.Open(t), variant)
			})
		}
	}
}

func testOneRunPerTick(t *testing.T, store runclaim.Store, variant string) {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	attempts := make(chan attempt, 2)
	finished := make(chan runclaim.Event, 2)
	release := make(chan struct{})
	done := make(chan struct{}) // stops the gates and unblocks a held job
	var gates []*gate
	clk := testclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))

	for _, replica := range []string{"replica-a", "replica-b"} {
		claimer, err := runclaim.New(store, runclaim.WithOwner(replica),
			runclaim.WithHooks(runclaim.Hooks{Finished: func(e runclaim.Event) { finished <- e }}))
		if err != nil {
			t.Fatal(err)
		}
		logger := attemptLogger{replica: replica, attempts: attempts}
		hold := func() {
			attempts <- attempt{replica: replica, ran: true}
			select {
			case <-release:
			case <-done:
			}
		}
		var c *cron.Cron
		var job cron.Job
		switch variant {
		case "SkipUnlessClaimed":
			c = cron.New(cron.WithLogger(cron.DiscardLogger),
				cron.WithChain(cron.Recover(logger), must[cron.JobWrapper](t)(cronlock.SkipUnlessClaimed(claimer, "sweep", logger, everyMinute, cronlock.WithClock(clk.Now)))))
			job = cron.FuncJob(hold)
		case "Job":
			c = cron.New(cron.WithLogger(cron.DiscardLogger), cron.WithChain(cron.Recover(logger)))
			job = must[cron.Job](t)(cronlock.Job(ctx, claimer, "sweep", logger, func(ctx context.Context, run *runclaim.Run) error {
				if run.Source != "sweep" || run.Owner != replica || ctx.Err() != nil {
					return fmt.Errorf("fn called with run %+v, ctx error %v", run, ctx.Err())
				}
				hold()
				return nil
			}, everyMinute, cronlock.WithClock(clk.Now)))
		}
		g := &gate{ticks: make(chan struct{}), done: done}
		gates = append(gates, g)
		c.Schedule(g, job)
		c.Start()
		t.Cleanup(func() {
			select {
			case <-c.Stop().Done(): // waits for running jobs
			case <-time.After(waitTimeout):
				t.Errorf("%s: jobs still running after Stop", replica)
			}
		})
	}
	t.Cleanup(func() { close(done) }) // runs before the Stops

	const ticks = 6
	wins := map[string]int{}
	for tick := 1; tick <= ticks; tick++ {
		clk.Advance(time.Minute)
		for _, g := range gates {
			select {
			case g.ticks <- struct{}{}:
			case <-ctx.Done():
				t.Fatalf("tick %d: a Cron did not ask for its next activation", tick)
			}
		}
		var ran []string
		for range 2 {
			select {
			case a := <-attempts:
				switch {
				case a.err != nil:
					t.Fatalf("tick %d: %s: %v", tick, a.replica, a.err)
				case a.ran:
					ran = append(ran, a.replica)
				default:
					// The loser either saw the winner's run, or lost the race
					// for the advisory lock while the winner's claim was in
					// flight (Postgres only).
					got := fmt.Sprint(a.skip)
					if !strings.HasPrefix(got, "[source sweep reason already running holder replica-") &&
						got != "[source sweep reason claim in flight]" {
						t.Fatalf("tick %d: %s logged skip %s; want the source and the reason", tick, a.replica, got)
					}
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
			if e.Status != runclaim.StatusSucceeded || e.Run.Owner != ran[0] {
				t.Fatalf("tick %d: %s run by %s finished; want a succeeded run by %s", tick, e.Status, e.Run.Owner, ran[0])
			}
		case <-ctx.Done():
			t.Fatalf("tick %d: the run was not finished", tick)
		}
	}
	t.Logf("runs per replica over %d ticks: %v", ticks, wins)
}

// recorder is a cron.Logger that keeps what it is given.
type recorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) Info(msg string, kv ...any) { r.add(fmt.Sprint("info ", msg, " ", kv)) }
func (r *recorder) Error(err error, msg string, kv ...any) {
	r.add(fmt.Sprint("error ", msg, " ", kv, " ", err))
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, s)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = nil
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

// TestOutcomes checks what is recorded and logged when a job fails, panics
// or is skipped for being too soon.
func TestOutcomes(t *testing.T) {
	var events []runclaim.Event
	claimer, err := runclaim.New(runclaim.NewMemoryStore(), runclaim.WithMinInterval(time.Hour),
		runclaim.WithHooks(runclaim.Hooks{Finished: func(e runclaim.Event) { events = append(events, e) }}))
	if err != nil {
		t.Fatal(err)
	}
	log := &recorder{}

	t.Run("JobError", func(t *testing.T) {
		boom := errors.New("boom")
		must[cron.Job](t)(cronlock.Job(t.Context(), claimer, "fails", log, func(context.Context, *runclaim.Run) error { return boom }, everyMinute)).Run()
		if len(events) != 1 || events[0].Status != runclaim.StatusFailed || !errors.Is(events[0].Err, boom) {
			t.Fatalf("finished events %+v; want one failed with boom", events)
		}
		if got := log.String(); !strings.Contains(got, "error run failed [source fails]") || !strings.Contains(got, "boom") {
			t.Fatalf("logged %q; want the error with its source", got)
		}
	})

	t.Run("Panic", func(t *testing.T) {
		events, log.lines = nil, nil
		job := cron.NewChain(cron.Recover(log), must[cron.JobWrapper](t)(cronlock.SkipUnlessClaimed(claimer, "panics", log, everyMinute))).
			Then(cron.FuncJob(func() { panic("kaboom") }))
		job.Run()
		if len(events) != 1 || events[0].Status != runclaim.StatusFailed || !strings.Contains(events[0].Err.Error(), "kaboom") {
			t.Fatalf("finished events %+v; want one failed with the panic", events)
		}
		if got := log.String(); !strings.Contains(got, "error panic") || !strings.Contains(got, "kaboom") {
			t.Fatalf("logged %q; want the re-panic caught by cron.Recover", got)
		}
	})

	t.Run("TooSoon", func(t *testing.T) {
		events, log.lines = nil, nil
		ran := 0
		// Two ticks a second apart, by the wrapper's clock and schedule:
		// the second comes within the claimer's interval of an hour.
		clk := testclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		job := must[cron.JobWrapper](t)(cronlock.SkipUnlessClaimed(claimer, "fast", log,
			cronlock.WithSchedule(runclaim.Every(time.Second)), cronlock.WithClock(clk.Now)))(cron.FuncJob(func() { ran++ }))
		job.Run()
		clk.Advance(time.Second)
		job.Run()
		if ran != 1 || len(events) != 1 || events[0].Status != runclaim.StatusSucceeded {
			t.Fatalf("ran %d times with events %+v; want once, succeeded", ran, events)
		}
		if got, want := log.String(), "info skip [source fast reason too soon]"; got != want {
			t.Fatalf("logged %q; want %q", got, want)
		}
	})

	t.Run("Limited", func(t *testing.T) {
		// A skip for a key in cooldown is logged as one, not as a held
		// source or a claim in flight.
		events, log.lines = nil, nil
		store := runclaim.NewMemoryStore()
		if err := store.Cooldown(t.Context(), "site:a", time.Now().Add(time.Hour), "HTTP 429"); err != nil {
			t.Fatal(err)
		}
		keyed, err := runclaim.New(store, runclaim.WithSourceKeys(func(string) []string { return []string{"site:a"} }))
		if err != nil {
			t.Fatal(err)
		}
		ran := 0
		must[cron.JobWrapper](t)(cronlock.SkipUnlessClaimed(keyed, "keyed", log, everyMinute))(cron.FuncJob(func() { ran++ })).Run()
		if got, want := log.String(), "info skip [source keyed reason limited]"; ran != 0 || got != want {
			t.Fatalf("ran %d times, logged %q; want no run and %q", ran, got, want)
		}
	})

	t.Run("Cancelled", func(t *testing.T) {
		events, log.lines = nil, nil
		ctx, cancel := context.WithCancel(t.Context())
		must[cron.Job](t)(cronlock.Job(ctx, claimer, "cancelled", log, func(ctx context.Context, _ *runclaim.Run) error {
			cancel() // the service shuts down while the job runs
			<-ctx.Done()
			return ctx.Err()
		}, everyMinute)).Run()
		if len(events) != 1 || events[0].Status != runclaim.StatusFailed || !errors.Is(events[0].Err, context.Canceled) {
			t.Fatalf("finished events %+v; want one failed with context.Canceled", events)
		}
		if got, want := log.String(), "info cancelled [source cancelled]"; got != want {
			t.Fatalf("logged %q; want %q", got, want)
		}
	})

	t.Run("InvalidSource", func(t *testing.T) {
		for _, source := range []string{"", "tab\tname", strings.Repeat("s", runclaim.MaxSourceLen+1)} {
			log.lines = nil
			w, err := cronlock.SkipUnlessClaimed(claimer, source, log, everyMinute)
			if w != nil || !errors.Is(err, runclaim.ErrInvalidSource) || !strings.HasPrefix(err.Error(), "cronlock: SkipUnlessClaimed: ") {
				t.Errorf("SkipUnlessClaimed(%.20q): %v, %v; want no wrapper and an ErrInvalidSource", source, w, err)
			}
			j, err := cronlock.Job(t.Context(), claimer, source, log, func(context.Context, *runclaim.Run) error { return nil }, everyMinute)
			if j != nil || !errors.Is(err, runclaim.ErrInvalidSource) || !strings.HasPrefix(err.Error(), "cronlock: Job: ") {
				t.Errorf("Job(%.20q): %v, %v; want no job and an ErrInvalidSource", source, j, err)
			}
			if len(log.lines) != 0 {
				t.Errorf("%.20q: logged %q; want the error returned, not logged", source, log.lines)
			}
		}
	})
}

// TestBadArgumentsAreErrors: a nil or invalid argument is an error from
// SkipUnlessClaimed and Job, with no wrapper or job, as gocronlock.New
// does, not a panic.
func TestBadArgumentsAreErrors(t *testing.T) {
	claimer, err := runclaim.New(runclaim.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	fn := func(context.Context, *runclaim.Run) error { return nil }
	var nilCtx context.Context
	wrap := func(w cron.JobWrapper, err error) (bool, error) { return w != nil, err }
	job := func(j cron.Job, err error) (bool, error) { return j != nil, err }
	// wrapNoSchedule passes on what a wrapper built without a schedule
	// returned if its error is ErrNoSchedule, and else reports it.
	wrapNoSchedule := func(got bool, err error) (bool, error) {
		if err != nil && !errors.Is(err, cronlock.ErrNoSchedule) {
			t.Errorf("error %v without a schedule; want ErrNoSchedule", err)
		}
		return got, err
	}
	for name, f := range map[string]func() (bool, error){
		"SkipUnlessClaimed nil claimer": func() (bool, error) { return wrap(cronlock.SkipUnlessClaimed(nil, "s", nil)) },
		"Job nil claimer":               func() (bool, error) { return job(cronlock.Job(t.Context(), nil, "s", nil, fn)) },
		"Job nil fn":                    func() (bool, error) { return job(cronlock.Job(t.Context(), claimer, "s", nil, nil)) },
		"Job nil ctx":                   func() (bool, error) { return job(cronlock.Job(nilCtx, claimer, "s", nil, fn)) },
		"SkipUnlessClaimed nil option":  func() (bool, error) { return wrap(cronlock.SkipUnlessClaimed(claimer, "s", nil, nil)) },
		"Job nil option":                func() (bool, error) { return job(cronlock.Job(t.Context(), claimer, "s", nil, fn, nil)) },
		"zero starting deadline": func() (bool, error) {
			return wrap(cronlock.SkipUnlessClaimed(claimer, "s", nil, cronlock.WithStartingDeadline(0)))
		},
		"nil schedule": func() (bool, error) {
			return job(cronlock.Job(t.Context(), claimer, "s", nil, fn, cronlock.WithSchedule(nil)))
		},
		"nil clock": func() (bool, error) {
			return job(cronlock.Job(t.Context(), claimer, "s", nil, fn, everyMinute, cronlock.WithClock(nil)))
		},
		"SkipUnlessClaimed no schedule": func() (bool, error) {
			w, err := cronlock.SkipUnlessClaimed(claimer, "s", nil)
			return wrapNoSchedule(w != nil, err)
		},
		"Job no schedule": func() (bool, error) {
			j, err := cronlock.Job(t.Context(), claimer, "s", nil, fn)
			return wrapNoSchedule(j != nil, err)
		},
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panicked with %v; want an error", name, r)
				}
			}()
			got, err := f()
			if got || err == nil || !strings.HasPrefix(err.Error(), "cronlock: ") {
				t.Errorf("%s: returned a value %v, error %v; want only a cronlock error", name, got, err)
			}
		}()
	}
}

// must returns a function that returns v, and fails t if err is not nil:
// must[cron.Job](t)(cronlock.Job(...)).
func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
