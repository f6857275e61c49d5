package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// The crash test runs replicas as separate OS processes: the test binary
// re-executes itself with -test.run=^TestCrashChild$ and these variables.
const (
	envChild = "CHAOS_CRASH_CHILD" // "1" in a child
	envDSN   = "CHAOS_CRASH_DSN"
	envOut   = "CHAOS_CRASH_OUT"   // the child's record file
	envOwner = "CHAOS_CRASH_OWNER" // the owner name of the child's runs
	envSeed  = "CHAOS_CRASH_SEED"  // the child's random seed; CHAOS_SEED sets the parent's

	childReady = "chaos-child-ready"
)

// The workload of every child.
const (
	crashSources  = 8
	crashLease    = time.Second // heartbeat: the default, a third of it
	crashTick     = 50 * time.Millisecond
	crashChildren = 4
	crashChaos    = 12 * time.Second // how long the parent kills and restarts children
	// crashSlack is added to the takeover bound (one lease plus one claim
	// interval) for everything else: a child noticing a tick late, a claim
	// queued behind others on a machine with two cores shared with other
	// tests under the race detector.
	crashSlack = 1500 * time.Millisecond
)

func crashSource(i int) string { return fmt.Sprintf("src-%d", i) }

// errStopped ends a child's runs on SIGTERM.
var errStopped = errors.New("chaos child: stopped by SIGTERM")

// TestCrashChild is one replica of TestCrash. It claims the shared
// sources every crashTick until SIGTERM, then finishes its runs and exits.
//
// SIGTERM stops the ticking and ends the runs, but does not cancel a claim
// in flight: the context given to Do is not the signal's. A claim cancelled
// after the server committed it would leave a run that holds the source
// for a whole lease with nobody running it (TestPartitionCancelledClaim).
//
// Each run appends up to three records to the child's file:
//
//	C <source> <run id> <started_at>                when the claim is won
//	S <source> <run id> <started_at>                when fn starts
//	E <source> <run id> <started_at> <outcome> <end> when fn ends
//
// A run whose claim's answer came when its lease was already ending by the
// child's clock (a stalled child on a loaded machine) has only its C
// record: Do does not start fn for it.
func TestCrashChild(t *testing.T) {
	if os.Getenv(envChild) != "1" {
		t.Skip("a helper process of TestCrash; it runs only when TestCrash starts it")
	}
	// Registered before anything is claimed, and announced, so that the
	// parent's SIGTERM always means "stop gracefully".
	term, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	seed, err := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", envSeed, err)
	}

	pool, err := pgxpool.New(context.Background(), os.Getenv(envDSN))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	var lost sync.Map // run ID -> struct{}: runs whose lease this child lost
	f, err := os.OpenFile(os.Getenv(envOut), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	record := func(format string, args ...any) {
		// One write per record: O_APPEND keeps records whole, whoever writes.
		if _, err := fmt.Fprintf(f, format+"\n", args...); err != nil {
			t.Errorf("record: %v", err)
		}
	}
	claimer, err := runclaim.New(store, runclaim.WithLease(crashLease), runclaim.WithOwner(os.Getenv(envOwner)),
		runclaim.WithHooks(runclaim.Hooks{
			Claimed: func(e runclaim.Event) {
				record("C %s %d %s", e.Run.Source, e.Run.ID, e.Run.StartedAt.UTC().Format(time.RFC3339Nano))
			},
			LeaseLost: func(e runclaim.Event) { lost.Store(e.Run.ID, struct{}{}) },
		}))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(childReady)

	var wg sync.WaitGroup
	for i := range crashSources {
		source := crashSource(i)
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() {
			work := func(ctx context.Context, run *runclaim.Run) error {
				started := run.StartedAt.UTC().Format(time.RFC3339Nano)
				record("S %s %d %s", source, run.ID, started)
				// Mostly short runs, some longer than the lease, which only
				// heartbeats keep alive.
				d := time.Duration(20+rng.IntN(300)) * time.Millisecond
				if rng.IntN(10) < 3 {
					d = crashLease + time.Duration(200+rng.IntN(800))*time.Millisecond
				}
				timer := time.NewTimer(d)
				defer timer.Stop()
				var err error
				select {
				case <-timer.C:
				case <-ctx.Done():
					err = context.Cause(ctx)
				case <-term.Done():
					err = errStopped
				}
				outcome := "done"
				if err != nil {
					outcome = "cancelled"
				}
				record("E %s %d %s %s %s", source, run.ID, started, outcome, time.Now().UTC().Format(time.RFC3339Nano))
				return err
			}
			tick := time.NewTicker(crashTick)
			defer tick.Stop()
			for {
				select {
				case <-term.Done():
					return
				case <-tick.C:
				}
				err := claimer.Do(context.Background(), source, work)
				switch {
				case err == nil, errors.Is(err, runclaim.ErrNotClaimed):
				case errors.Is(err, errStopped): // SIGTERM: the run was recorded as failed
				case errors.Is(err, runclaim.ErrLeaseLost):
					// Allowed, if the machine is slow enough for a heartbeat to
					// miss the lease; the parent's checks still hold.
					fmt.Fprintf(os.Stderr, "chaos child: %s: %v\n", source, err)
				default:
					t.Errorf("%s: %v", source, err)
				}
			}
		})
	}
	wg.Wait()
	n := 0
	lost.Range(func(any, any) bool { n++; return true })
	fmt.Printf("chaos child: %d runs lost their lease\n", n)
}

// child is one process started by TestCrash.
type child struct {
	owner  string
	out    string
	cmd    *exec.Cmd
	output *childOutput
	done   chan error // cmd.Wait's result, read once by the test's goroutine
	killed bool
	exited bool // done has been read
}

// startChild starts the test binary as a child process that runs test
// (with -test.timeout=timeout), with owner, out and env in its environment,
// and waits at most ready for it to print childReady. It fails the test if
// the child exits or is not ready in time; the caller kills children that
// outlive the test.
func startChild(t *testing.T, owner, out, test, timeout string, ready time.Duration, env ...string) *child {
	t.Helper()
	c := &child{owner: owner, out: out, output: &childOutput{ready: make(chan struct{})}, done: make(chan error, 1)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.timeout="+timeout)
	c.cmd.Env = append(append(os.Environ(), envOut+"="+out, envOwner+"="+owner), env...)
	c.cmd.Stdout, c.cmd.Stderr = c.output, c.output
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", owner, err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	select {
	case <-c.output.ready:
	case err := <-c.done:
		c.exited = true
		t.Fatalf("%s exited before it was ready: %v\n%s", owner, err, c.output)
	case <-time.After(ready):
		_ = c.cmd.Process.Kill()
		<-c.done
		c.exited = true
		t.Fatalf("%s not ready within %v:\n%s", owner, ready, c.output)
	}
	return c
}

// reap waits for c to exit, at most timeout, and returns whether it did
// and cmd.Wait's result.
func (c *child) reap(timeout time.Duration) (bool, error) {
	select {
	case err := <-c.done:
		c.exited = true
		return true, err
	case <-time.After(timeout):
		return false, nil
	}
}

// childOutput collects a child's output and signals when it is ready.
type childOutput struct {
	mu    sync.Mutex // protects buf
	buf   bytes.Buffer
	once  sync.Once
	ready chan struct{}
}

func (o *childOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if bytes.Contains(o.buf.Bytes(), []byte(childReady)) {
		o.once.Do(func() { close(o.ready) })
	}
	return len(p), nil
}

func (o *childOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// kill is one SIGKILL of a child by TestCrash.
type kill struct {
	owner string
	at    time.Time // database clock, read after the child was reaped
	held  []row     // its runs still running at that moment
}

// TestCrash runs four replicas as processes on eight sources, SIGKILLs one
// at random every 0.4–1.6 s for 12 s and starts a new one each time, then
// stops the rest with SIGTERM. It then checks, over the table's history:
//
//   - G1: no two runs of a source overlap while both held a live lease,
//     where a run holds from its start to its finish, or, if it was expired
//     by a takeover, to the end of its last lease;
//   - G2: every source a killed replica held was taken over within one
//     lease plus one claim interval of the kill (plus slack), and the
//     killed run became expired;
//   - G4: run IDs of a source increase with their start;
//   - no run is left running but those of killed replicas not yet taken
//     over, and a final claim pass takes them over, leaving none;
//   - every run a replica recorded in its file is in the table with the
//     same ID, source and start, and the outcome it recorded; a replica
//     that was never killed recorded exactly the runs the table has for it.
//
// Set CHAOS_SEED to replay a schedule of kills.
func TestCrash(t *testing.T) {
	db := sharedtest.MigratedDB(t)
	direct := db.Pool
	dir := t.TempDir()

	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED: %v", err)
		}
	}
	t.Logf("CHAOS_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	var (
		children []*child
		started  int
	)
	// Children that outlive a failed test are killed.
	t.Cleanup(func() {
		for _, c := range children {
			if !c.exited {
				_ = c.cmd.Process.Kill()
				<-c.done
			}
		}
	})
	start := func() *child {
		started++
		owner := fmt.Sprintf("crash-child-%02d", started)
		c := startChild(t, owner, filepath.Join(dir, fmt.Sprintf("child-%02d.log", started)), "TestCrashChild", "2m", wait,
			envChild+"=1", envDSN+"="+db.DSN, envSeed+"="+strconv.FormatUint(rng.Uint64(), 10))
		children = append(children, c)
		return c
	}
	live := func() []*child {
		var out []*child
		for _, c := range children {
			if !c.killed && !c.exited {
				out = append(out, c)
			}
		}
		return out
	}

	for range crashChildren {
		start()
	}
	var kills []kill
	// The slowest round trip of the parent's own reads during the chaos:
	// how busy the machine is, for the takeover bound below.
	var slowestRead time.Duration
	timedNow := func() time.Time {
		sent := time.Now()
		at := dbNow(t, direct)
		slowestRead = max(slowestRead, time.Since(sent))
		return at
	}
	chaosEnd := time.Now().Add(crashChaos)
	for time.Now().Before(chaosEnd) {
		pause := time.NewTimer(time.Duration(400+rng.IntN(1200)) * time.Millisecond)
		<-pause.C
		all := live()
		victim := all[rng.IntN(len(all))]
		victim.killed = true
		if err := victim.cmd.Process.Kill(); err != nil {
			t.Fatalf("kill %s: %v", victim.owner, err)
		}
		if ok, _ := victim.reap(wait); !ok {
			t.Fatalf("killed child %s did not exit", victim.owner)
		}
		k := kill{owner: victim.owner, at: timedNow()}
		for _, r := range rows(t, direct, "") {
			if r.Owner == victim.owner && r.Status == string(runclaim.StatusRunning) {
				k.held = append(k.held, r)
			}
		}
		kills = append(kills, k)
		start()
	}

	// Graceful stop: SIGTERM everyone alive; they finish their runs.
	stopAt := dbNow(t, direct)
	for _, c := range live() {
		if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM %s: %v", c.owner, err)
		}
	}
	for _, c := range live() {
		ok, err := c.reap(wait)
		if !ok {
			t.Fatalf("child %s did not exit within %v of SIGTERM:\n%s", c.owner, wait, c.output)
		}
		if err != nil {
			t.Errorf("child %s, stopped with SIGTERM, exited with %v:\n%s", c.owner, err, c.output)
		}
	}
	for _, c := range children {
		for _, line := range strings.Split(c.output.String(), "\n") {
			if strings.HasPrefix(line, "chaos child:") && !strings.Contains(line, " 0 runs lost") {
				t.Logf("%s: %s", c.owner, line)
			}
		}
	}

	all := rows(t, direct, "")
	bySource := map[string][]row{}
	for _, r := range all {
		bySource[r.Source] = append(bySource[r.Source], r)
	}
	killedOwners := map[string]bool{}
	for _, k := range kills {
		killedOwners[k.owner] = true
	}
	heldAtEnd := 0
	for _, r := range all {
		if r.Status == string(runclaim.StatusRunning) {
			heldAtEnd++
		}
	}
	t.Logf("%d children started, %d killed; %d runs in %v of chaos; %d runs of killed children still running at the end",
		started, len(kills), len(all), crashChaos, heldAtEnd)

	// G1 and G4 over the history.
	end := func(r row) time.Time {
		switch {
		case r.Status == string(runclaim.StatusExpired):
			return r.LeaseUntil
		case r.FinishedAt != nil:
			return *r.FinishedAt
		default:
			return r.LeaseUntil // still running
		}
	}
	for source, rs := range bySource {
		byStart := slices.Clone(rs)
		slices.SortFunc(byStart, func(a, b row) int { return a.StartedAt.Compare(b.StartedAt) })
		for i := 1; i < len(byStart); i++ {
			if byStart[i].ID <= byStart[i-1].ID {
				t.Errorf("%s: run %d started after run %d but has a lower ID", source, byStart[i].ID, byStart[i-1].ID)
			}
		}
		var latest row // the run with the latest end so far
		for i, r := range byStart {
			if i > 0 && r.StartedAt.Before(end(latest)) {
				t.Errorf("%s: double run: %v started before %v ended (at %s)", source, r, latest, end(latest).Format("15:04:05.000000"))
			}
			if i == 0 || end(r).After(end(latest)) {
				latest = r
			}
		}
	}

	// G2: every run a killed child held was taken over in time.
	// One lease, one claim interval, the slack, and ten of the slowest
	// read the parent made meanwhile: on a machine so busy that a plain
	// SELECT took 50 ms, a child's claim, under the race detector, is late
	// by more than crashSlack allows, without anything being wrong.
	bound := crashLease + crashTick + crashSlack + 10*slowestRead
	var worst time.Duration
	for _, k := range kills {
		for _, h := range k.held {
			var next *row
			for _, r := range bySource[h.Source] {
				if r.ID > h.ID {
					next = &r
					break
				}
			}
			final := rowByIDIn(all, h.ID)
			if next == nil {
				if k.at.Add(bound).Before(stopAt) {
					t.Errorf("%s: run %d of killed %s (killed at %s) was never taken over; the chaos went on until %s",
						h.Source, h.ID, k.owner, k.at.Format("15:04:05.000"), stopAt.Format("15:04:05.000"))
				}
				continue
			}
			took := next.StartedAt.Sub(k.at)
			worst = max(worst, took)
			if took > bound {
				t.Errorf("%s: run %d of %s killed at %s was taken over by run %d only %v later, more than %v",
					h.Source, h.ID, k.owner, k.at.Format("15:04:05.000"), next.ID, took, bound)
			}
			// Expired by the takeover, or finished by a request the child
			// sent just before it died, which the kernel still delivered.
			switch final.Status {
			case string(runclaim.StatusExpired):
			case string(runclaim.StatusSucceeded), string(runclaim.StatusFailed):
				t.Logf("%s: run %d of %s (killed at %s) was finished at %s by a request sent before the kill",
					h.Source, h.ID, k.owner, k.at.Format("15:04:05.000000"), final.FinishedAt.Format("15:04:05.000000"))
			default:
				t.Errorf("%s: the killed holder's run after the takeover: %v, want expired", h.Source, final)
			}
		}
	}
	t.Logf("slowest takeover after a kill: %v (bound %v; the slowest read of the parent took %v)", worst, bound, slowestRead)

	// Nothing left running but killed children's runs that nobody took over.
	for _, r := range all {
		if r.Status == string(runclaim.StatusRunning) && !killedOwners[r.Owner] {
			t.Errorf("left running by a child stopped gracefully: %v", r)
		}
	}
	// A final claim pass takes those over, and then nothing is running.
	final := newClaimer(t, newStore(t, direct), runclaim.WithLease(crashLease), runclaim.WithOwner("final-pass"))
	for i := range crashSources {
		source := crashSource(i)
		var run *runclaim.Run
		eventually(t, wait, crashTick, "final claim of "+source, func() (bool, error) {
			r, err := final.Claim(context.Background(), source)
			if err != nil && !errors.Is(err, runclaim.ErrAlreadyRunning) {
				t.Fatalf("final claim of %s: %v", source, err)
			}
			run = r
			return err == nil, err
		})
		if err := run.Finish(context.Background(), nil); err != nil {
			t.Errorf("final finish of %s: %v", source, err)
		}
	}
	var running int
	if err := direct.QueryRow(context.Background(), `SELECT count(*) FROM runclaim_runs WHERE status = 'running'`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if running != 0 {
		t.Errorf("%d runs still running after the final pass", running)
	}

	// The children's records agree with the table.
	all = rows(t, direct, "")
	for _, c := range children {
		checkRecords(t, c, all)
	}
}

func rowByIDIn(all []row, id int64) row {
	for _, r := range all {
		if r.ID == id {
			return r
		}
	}
	return row{}
}

// checkRecords compares a child's record file with the table.
func checkRecords(t *testing.T, c *child, all []row) {
	t.Helper()
	f, err := os.Open(c.out)
	if errors.Is(err, os.ErrNotExist) {
		f = nil // killed before it wrote anything
	} else if err != nil {
		t.Fatal(err)
	}
	byID := map[int64]row{}
	for _, r := range all {
		byID[r.ID] = r
	}
	claimed := map[int64]bool{} // C records
	started := map[int64]bool{} // S records
	if f != nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || !slices.Contains([]string{"C", "S", "E"}, fields[0]) || (fields[0] == "E") != (len(fields) == 6) || (fields[0] != "E" && len(fields) != 4) {
				t.Errorf("%s: bad record %q", c.owner, sc.Text())
				continue
			}
			id, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				t.Errorf("%s: bad record %q", c.owner, sc.Text())
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, fields[3])
			if err != nil {
				t.Errorf("%s: bad record %q", c.owner, sc.Text())
				continue
			}
			r, ok := byID[id]
			if !ok || r.Source != fields[1] || !r.StartedAt.Equal(at) || r.Owner != c.owner {
				t.Errorf("%s recorded %q, but the table has %v", c.owner, sc.Text(), r)
				continue
			}
			switch fields[0] {
			case "C":
				claimed[id] = true
			case "S":
				started[id] = true
			}
			if fields[0] == "E" {
				// "done": fn returned nil, so the run succeeded, unless its
				// lease was lost (or it was killed) before it could finish.
				want := []string{string(runclaim.StatusSucceeded), string(runclaim.StatusExpired)}
				if fields[4] == "cancelled" {
					want = []string{string(runclaim.StatusFailed), string(runclaim.StatusExpired)}
				}
				if !slices.Contains(want, r.Status) {
					t.Errorf("%s recorded %q, but the run ended %s", c.owner, sc.Text(), r.Status)
				}
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	for id := range started {
		if !claimed[id] {
			t.Errorf("%s started fn for run %d without recording its claim", c.owner, id)
		}
	}
	for id := range claimed {
		// A won claim whose fn never started: Do declined it (its lease was
		// ending by the child's clock when the answer came), and finished
		// it as failed, unless the lease ended first or the child was
		// killed before the finish.
		if r := byID[id]; !started[id] && r.Status == string(runclaim.StatusSucceeded) {
			t.Errorf("%s never started fn for run %v, which succeeded", c.owner, r)
		}
	}
	if c.killed {
		return // it may have won claims it had no time to record
	}
	for _, r := range all {
		if r.Owner == c.owner && !claimed[r.ID] {
			t.Errorf("%s never recorded its run %v", c.owner, r)
		}
	}
}
