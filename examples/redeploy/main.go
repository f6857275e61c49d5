// Command redeploy shows what happens to a scheduled job while a service is
// redeployed: the old replica keeps ticking until it is stopped, the new one
// starts ticking before that, and for a few ticks both sweep the same
// sources.
//
// It runs the overlap twice: once guarded by a naive check-then-act ("is a
// sweep of this source running? no? then record one and start it") and once
// guarded by runclaim. For each source it prints how many sweeps every tick
// got. The naive guard sweeps twice on the ticks where the replicas overlap;
// runclaim sweeps once per tick, and the program exits non-zero if a tick
// got two sweeps with runclaim.
//
//	go run ./examples/redeploy
//	DATABASE_URL=postgres://user:pass@localhost:5432/db go run ./examples/redeploy
//
// Without DATABASE_URL the two replicas are goroutines in this process: the
// naive guard keeps its state in a map and runclaim in a MemoryStore, since
// memory cannot be shared between processes. With DATABASE_URL they are two
// processes (this program, run again with -replica): the naive guard SELECTs
// then INSERTs into a table of its own, and runclaim claims in the
// examples' runs table, public.runclaim_example_runs, in an advisory lock
// namespace of their own, so that it never competes with a real service's
// jobs. It runs for about four seconds.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	period = 150 * time.Millisecond // the schedule; a minute or more in a real service
	work   = 40 * time.Millisecond  // how long one sweep takes
	// gap is the time a naive guard spends between its check and its act.
	// In a service it is a second round trip to the database, a log line,
	// a config lookup or a busy CPU; here it is fixed so that the race shows
	// on every overlapping tick.
	gap = 5 * time.Millisecond
)

var sources = []string{"site-a", "site-b", "site-c"}

// The rollout: the old replica runs ticks [0, 6), the new one [2, 8).
var rollout = []window{{"old", 0, 6}, {"new", 2, 8}}

const ticks = 8

// window is the ticks a replica is alive for: first up to last, exclusive.
type window struct {
	replica     string
	first, last int
}

// sweep is one sweep of a source by a replica on a tick.
type sweep struct {
	Replica string `json:"replica"`
	Source  string `json:"source"`
	Tick    int    `json:"tick"`
}

func main() {
	replica := flag.String("replica", "", "internal: run as this replica (old or new) and print its sweeps as JSON lines")
	guardName := flag.String("guard", "", "internal: naive or runclaim")
	t0 := flag.Int64("t0", 0, "internal: the time of tick 0, in Unix nanoseconds")
	span := flag.String("ticks", "", "internal: first:last tick")
	tag := flag.String("tag", "", "internal: keeps this invocation's rows apart from earlier ones")
	flag.Parse()

	if *replica != "" {
		if err := child(*replica, *guardName, time.Unix(0, *t0), *span, *tag); err != nil {
			log.Fatalf("replica %s: %v", *replica, err)
		}
		return
	}
	ok, err := parent()
	if err != nil {
		log.Fatal(err)
	}
	if !ok {
		os.Exit(1)
	}
}

// parent runs the rollout with each guard and prints the sweeps per tick.
func parent() (ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		fmt.Println("replicas: goroutines in this process (set DATABASE_URL for two processes sharing Postgres)")
	} else {
		fmt.Println("replicas: two processes sharing Postgres")
		if err := setupPostgres(ctx, url); err != nil {
			return false, err
		}
		defer teardownPostgres(url)
	}
	fmt.Printf("old replica ticks %d-%d, new replica ticks %d-%d, one tick every %v, a sweep takes %v\n\n",
		rollout[0].first, rollout[0].last-1, rollout[1].first, rollout[1].last-1, period, work)

	ok = true
	for _, g := range []string{"naive", "runclaim"} {
		var got []sweep
		var err error
		if url == "" {
			got, err = inProcess(ctx, g)
		} else {
			got, err = processes(ctx, g)
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", g, err)
		}
		doubled := report(g, got)
		if g == "runclaim" && doubled {
			fmt.Println("FAIL: with runclaim no tick may get two sweeps")
			ok = false
		}
	}
	return ok, nil
}

// startTime returns a round time at least lead from now, for tick 0.
func startTime(lead time.Duration) time.Time {
	return time.Now().Add(lead).Truncate(period).Add(period)
}

// inProcess runs both replicas as goroutines sharing one guard's state.
func inProcess(ctx context.Context, guardName string) ([]sweep, error) {
	shared := newMemoryState()
	t0 := startTime(period)
	var mu sync.Mutex
	var all []sweep
	var wg sync.WaitGroup
	errs := make([]error, len(rollout))
	for i, w := range rollout {
		g, err := shared.guard(guardName, w.replica)
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			errs[i] = runReplica(ctx, w, g, t0, func(s sweep) {
				mu.Lock()
				defer mu.Unlock()
				all = append(all, s)
			})
		})
	}
	wg.Wait()
	return all, errors.Join(errs...)
}

// processes runs each replica as a process of its own, this program with
// -replica, and collects the sweeps it prints.
func processes(ctx context.Context, guardName string) ([]sweep, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	t0 := startTime(3 * period) // time for the processes to start and connect
	tag := randomTag()
	var mu sync.Mutex
	var all []sweep
	var wg sync.WaitGroup
	errs := make([]error, len(rollout))
	for i, w := range rollout {
		cmd := exec.CommandContext(ctx, self,
			"-replica", w.replica, "-guard", guardName, "-t0", strconv.FormatInt(t0.UnixNano(), 10),
			"-ticks", fmt.Sprintf("%d:%d", w.first, w.last), "-tag", tag)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var s sweep
				if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
					errs[i] = fmt.Errorf("replica %s printed %q: %w", w.replica, sc.Text(), err)
					continue
				}
				mu.Lock()
				all = append(all, s)
				mu.Unlock()
			}
			if err := cmd.Wait(); err != nil {
				errs[i] = errors.Join(errs[i], fmt.Errorf("replica %s: %w", w.replica, err))
			}
		})
	}
	wg.Wait()
	return all, errors.Join(errs...)
}

// child is one replica process: it sweeps through its window of ticks and
// prints each sweep as a JSON line.
func child(replica, guardName string, t0 time.Time, span, tag string) error {
	var w window
	w.replica = replica
	if _, err := fmt.Sscanf(span, "%d:%d", &w.first, &w.last); err != nil {
		return fmt.Errorf("-ticks %q: %w", span, err)
	}
	// Its window, and five seconds more to start, connect and warm up on a
	// busy machine: a replica that is late sweeps its first ticks late
	// (each names its tick), it does not fail.
	ctx, cancel := context.WithTimeout(context.Background(), time.Until(t0)+time.Duration(w.last+5)*period+5*time.Second)
	defer cancel()
	g, closeGuard, err := postgresGuard(ctx, os.Getenv("DATABASE_URL"), guardName, replica, tag)
	if err != nil {
		return err
	}
	defer closeGuard()
	enc := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	return runReplica(ctx, w, g, t0, func(s sweep) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(s)
	})
}

// runReplica is the service's scheduler: on each tick of its window it
// tries to sweep every source, through the guard.
func runReplica(ctx context.Context, w window, g guard, t0 time.Time, swept func(sweep)) error {
	var errs []error
	var mu sync.Mutex // protects errs
	for tick := w.first; tick < w.last; tick++ {
		at := t0.Add(time.Duration(tick) * period) // the tick's scheduled time, the same on every replica
		t := time.NewTimer(time.Until(at))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		var wg sync.WaitGroup
		for _, source := range sources {
			wg.Go(func() {
				_, err := g.try(ctx, source, at, func(ctx context.Context) error {
					swept(sweep{Replica: w.replica, Source: source, Tick: tick})
					select { // the real work, such as scraping the site
					case <-time.After(work):
						return nil
					case <-ctx.Done():
						return context.Cause(ctx)
					}
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("tick %d, %s: %w", tick, source, err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	return errors.Join(errs...)
}

// report prints the sweeps per tick of each source and says whether a tick
// got more than one.
//
// A tick with no sweep can happen with runclaim when a replica's claim of
// it came so late (a cold connection, a slow commit on a busy server) that
// the other replica had already served a later tick, or when the previous
// tick's sweep still ran: the claim is then skipped (ErrTickDone, or the
// source running). It is a skipped tick, never a double one: the claim
// names the tick (ForTick), so a late replica never sweeps a tick again.
func report(guardName string, got []sweep) (doubled bool) {
	switch guardName {
	case "naive":
		fmt.Printf("without runclaim: naive check-then-act, %v between the check and the act\n", gap)
	case "runclaim":
		fmt.Println("with runclaim: Claimer.Do with ForTick")
	}
	counts := make(map[string][]int)
	for _, s := range sources {
		counts[s] = make([]int, ticks)
	}
	for _, s := range got {
		counts[s.Source][s.Tick]++
	}
	var b strings.Builder
	b.WriteString("  tick       ")
	for i := range ticks {
		fmt.Fprintf(&b, "%2d", i)
	}
	b.WriteString("   sweeps  ticks swept twice or more\n")
	for _, s := range sources {
		total, twice := 0, 0
		fmt.Fprintf(&b, "  %-10s ", s)
		for _, n := range counts[s] {
			fmt.Fprintf(&b, "%2d", n)
			total += n
			if n > 1 {
				twice++
			}
		}
		fmt.Fprintf(&b, "   %6d  %d\n", total, twice)
		doubled = doubled || twice > 0
	}
	fmt.Println(b.String())
	return doubled
}

func randomTag() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
