package gocronlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/gocronlock"
	"github.com/runclaim/runclaim/internal/testclock"
)

// lockUnlock locks key and unlocks it at once, as a 0 ms job does.
func lockUnlock(t *testing.T, l *gocronlock.Locker, key string) error {
	t.Helper()
	lk, err := l.Lock(t.Context(), key)
	if err != nil {
		return err
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	return nil
}

// TestTicks checks the tick a Lock names, on a store and a Locker that
// share a fake clock: for a job without a schedule none (Lock refuses the
// job, and claims nothing); with a schedule, the latest tick of the
// schedule, so that a late replica's lock is skipped with ErrTickDone
// however long after the job finished, and which a Lock at a replica's
// start claims if it is within the starting deadline, and skips beyond it.
func TestTicks(t *testing.T) {
	clk := testclock.New(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	store := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
	locker := func(owner string, opts ...gocronlock.Option) *gocronlock.Locker {
		return newLocker(t, newClaimer(t, store, runclaim.WithOwner(owner)), append(opts, gocronlock.WithClock(clk.Now))...)
	}

	// A job without a schedule: a Lock cannot tell which firing it serves.
	unscheduled := locker("unscheduled", gocronlock.WithSchedule("other", runclaim.Every(time.Minute)))
	clk.Advance(3 * time.Millisecond)
	lk, err := unscheduled.Lock(t.Context(), "job")
	if lk != nil || !errors.Is(err, gocronlock.ErrNoSchedule) || errors.Is(err, runclaim.ErrNotClaimed) || !strings.Contains(err.Error(), `"job"`) {
		t.Fatalf("Lock of a job without a schedule = %v, %v; want ErrNoSchedule naming the job, not a skip", lk, err)
	}
	// It claimed nothing: the source is free, and no tick of it done.
	run, err := newClaimer(t, store).Claim(t.Context(), "job", runclaim.ForTick(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)))
	if err != nil {
		t.Fatalf("claim of the job's tick after the refused Lock: %v", err)
	}
	if err := run.Finish(t.Context(), nil); err != nil {
		t.Fatal(err)
	}

	// A job with a schedule of a minute: a replica's Lock 400 ms late,
	// after the job, is skipped.
	early, late := locker("early", minutely), locker("late", minutely)
	if err := lockUnlock(t, early, "sweep"); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	clk.Advance(400 * time.Millisecond) // a replica whose clock is behind, after the job
	err = lockUnlock(t, late, "sweep")
	var nc *runclaim.NotClaimedError
	if !errors.Is(err, runclaim.ErrTickDone) || !errors.As(err, &nc) || !nc.DoneTick.Equal(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("late lock of the same tick: %v; want ErrTickDone for 12:00:00", err)
	}

	// A job with a schedule of a minute, and a deadline of 30 s.
	clk.Advance(time.Second) // 12:00:01.403
	opts := []gocronlock.Option{gocronlock.WithSchedule("minutely", runclaim.Every(time.Minute)), gocronlock.WithStartingDeadline(30 * time.Second)}
	a, b := locker("a", opts...), locker("b", opts...)
	clk.Advance(20 * time.Second) // 12:00:21.403: back from a restart
	if err := lockUnlock(t, a, "minutely"); err != nil {
		t.Fatalf("lock 21 s after a missed tick, with a deadline of 30 s: %v", err)
	}
	if err := lockUnlock(t, b, "minutely"); !errors.Is(err, runclaim.ErrTickDone) {
		t.Fatalf("second replica's lock of the caught-up tick: %v, want ErrTickDone", err)
	}
	clk.Advance(time.Minute + 10*time.Second) // 12:01:31.403
	if err := lockUnlock(t, b, "minutely"); !errors.Is(err, runclaim.ErrNotClaimed) || errors.Is(err, runclaim.ErrTickDone) {
		t.Fatalf("lock 31 s after a tick, with a deadline of 30 s: %v, want a skip for the deadline", err)
	}
	clk.Advance(29 * time.Second) // 12:02:00.403, on time
	if err := lockUnlock(t, b, "minutely"); err != nil {
		t.Fatalf("lock on time: %v", err)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	c := newClaimer(t, runclaim.NewMemoryStore())
	for name, opts := range map[string][]gocronlock.Option{
		"zero starting deadline": {gocronlock.WithStartingDeadline(0)},
		"nil schedule":           {gocronlock.WithSchedule("job", nil)},
		"nil clock":              {gocronlock.WithClock(nil)},
		"prefix with a tab":      {gocronlock.WithPrefix("svc\t")},
		"prefix not UTF-8":       {gocronlock.WithPrefix("svc\xff/")},
		"prefix over the limit":  {gocronlock.WithPrefix(strings.Repeat("p", runclaim.MaxSourceLen+1))},
	} {
		if l, err := gocronlock.New(c, opts...); err == nil || l != nil || !strings.HasPrefix(err.Error(), "gocronlock: ") {
			t.Errorf("%s: New = %v, %v; want an error", name, l, err)
		}
	}
}

// recordHandler is a slog.Handler that keeps the records it is given.
type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
	added   chan struct{} // signalled on every record
}

func newRecordHandler() *recordHandler { return &recordHandler{added: make(chan struct{}, 100)} }

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r)
	h.mu.Unlock()
	select {
	case h.added <- struct{}{}:
	default:
	}
	return nil
}

// find returns the first record at level with message msg, if any.
func (h *recordHandler) find(level slog.Level, msg string) (slog.Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Level == level && r.Message == msg {
			return r, true
		}
	}
	return slog.Record{}, false
}

// attrs is r's attributes as a map.
func attrs(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

// TestInvalidJobNameLogged runs a scheduler with jobs whose names cannot be
// sources: the first tick must log each at Error through the Claimer's
// logger, and run neither.
func TestInvalidJobNameLogged(t *testing.T) {
	h := newRecordHandler()
	claimer := newClaimer(t, runclaim.NewMemoryStore(), runclaim.WithLogger(slog.New(h)))
	long := strings.Repeat("n", runclaim.MaxSourceLen-len("svc/")+1)
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(newLocker(t, claimer, gocronlock.WithPrefix("svc/"))))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	}()
	ran := make(chan string, 2)
	for _, name := range []string{"tab\tname", long} {
		_, err := s.NewJob(gocron.DurationJob(time.Hour), gocron.NewTask(func() { ran <- name }),
			gocron.WithName(name), gocron.WithStartAt(gocron.WithStartImmediately()))
		if err != nil {
			t.Fatal(err)
		}
	}
	s.Start()

	logged := map[string]bool{}
	timeout := time.After(waitTimeout)
	for len(logged) < 2 {
		select {
		case <-h.added:
		case name := <-ran:
			t.Fatalf("job %q ran", name)
		case <-timeout:
			t.Fatalf("invalid job names logged: %v, want both", logged)
		}
		h.mu.Lock()
		for _, r := range h.records {
			if r.Level == slog.LevelError && r.Message == "gocronlock: invalid job name" {
				a := attrs(r)
				if !strings.Contains(a["error"], runclaim.ErrInvalidSource.Error()) {
					t.Errorf("logged %v without the reason", a)
				}
				logged[a["job"]] = true
			}
		}
		h.mu.Unlock()
	}
	if !logged["tab\tname"] || !logged[long] {
		t.Fatalf("logged %v", logged)
	}
}

// TestInvalidJobNameDefaultLogger checks that a Claimer without a logger
// has the invalid name logged by slog.Default().
func TestInvalidJobNameDefaultLogger(t *testing.T) {
	h := newRecordHandler()
	prev := slog.Default()
	slog.SetDefault(slog.New(h))
	defer slog.SetDefault(prev)
	l := newLocker(t, newClaimer(t, runclaim.NewMemoryStore()))
	if _, err := l.Lock(t.Context(), "bad\x00name"); !errors.Is(err, runclaim.ErrInvalidSource) {
		t.Fatalf("Lock: %v; want ErrInvalidSource", err)
	}
	if _, ok := h.find(slog.LevelError, "gocronlock: invalid job name"); !ok {
		t.Fatal("nothing logged at Error by slog.Default()")
	}
}
