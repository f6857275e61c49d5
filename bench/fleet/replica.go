package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

// countingConn counts the writes to the server: a claim call, a heartbeat
// or a finish is one write each (and one round trip).
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// chunkKey marks a claim call's context with its number, for the hooks.
type chunkKey struct{}

// replicaMain is a replica process: it claims every source on every tick,
// and prints one JSON line per tick.
func replicaMain() int {
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(envConfig)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleet replica:", err)
		return 2
	}
	if err := replica(context.Background(), cfg); err != nil {
		fmt.Fprintf(os.Stderr, "fleet replica %d: %v\n", cfg.Index, err)
		return 1
	}
	return 0
}

func replica(ctx context.Context, cfg Config) error {
	var writes atomic.Int64
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 8
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	pcfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := runclaim.NewPostgresStore(pool, runclaim.WithTable(runclaim.DefaultSchema, cfg.Table))
	if err != nil {
		return err
	}
	sources, keysOf := sourceNames(cfg)
	chunk := runclaim.MaxClaimMany
	if keysOf != nil {
		chunk = runclaim.MaxClaimManyKeys
	}
	var (
		mu      sync.Mutex
		line    replicaLine
		counted map[int]bool // the chunks whose claim duration is counted
	)
	// One claim call in flight per replica: a call holds one advisory lock
	// per source until it commits, and the replicas' calls share the
	// server's lock table (docs/many.md, "The lock budget"). A chunk's
	// call has been answered once its first claim event comes; its jobs
	// then run while the next call goes.
	inFlight := make(chan struct{}, 1)
	answered := func(e runclaim.Event) {
		if n, ok := e.Context.Value(chunkKey{}).(int); ok && !counted[n] {
			counted[n] = true
			line.Claims = append(line.Claims, e.Duration)
			<-inFlight
		}
	}
	record := func(e runclaim.Event, won bool) {
		mu.Lock()
		defer mu.Unlock()
		if won {
			line.Won++
		} else {
			line.Skipped++
		}
		answered(e)
	}
	opts := []runclaim.Option{
		runclaim.WithOwner(fmt.Sprintf("replica-%d", cfg.Index)),
		runclaim.WithLease(cfg.Lease),
		runclaim.WithHeartbeat(cfg.Heartbeat),
		runclaim.WithHooks(runclaim.Hooks{
			Claimed: func(e runclaim.Event) { record(e, true) },
			Skipped: func(e runclaim.Event) { record(e, false) },
			ClaimFailed: func(e runclaim.Event) {
				mu.Lock()
				line.Failed++
				answered(e)
				mu.Unlock()
			},
		}),
	}
	if keysOf != nil {
		opts = append(opts, runclaim.WithSourceKeys(keysOf))
	}
	claimer, err := runclaim.New(store, opts...)
	if err != nil {
		return err
	}
	// Connect and warm up before the first tick: one claim of a source of
	// this replica's own.
	if err := claimer.Do(ctx, fmt.Sprintf("warm/%d", cfg.Index), func(context.Context, *runclaim.Run) error { return nil }); err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	for k := 1; k <= cfg.Warmup+cfg.Ticks; k++ {
		tick := cfg.Start.Add(time.Duration(k-1) * cfg.Tick)
		time.Sleep(time.Until(tick))
		mu.Lock()
		line, counted = replicaLine{Replica: cfg.Index, Tick: k}, map[int]bool{}
		mu.Unlock()
		w0 := writes.Load()
		var last atomic.Int64
		job := func(ctx context.Context, _ *runclaim.Run) error {
			d := int64(time.Since(tick))
			for m := last.Load(); d > m && !last.CompareAndSwap(m, d); m = last.Load() {
			}
			t := time.NewTimer(cfg.Job)
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		var wg sync.WaitGroup
		var errs []error
		for n, i := 0, 0; i < len(sources); n, i = n+1, i+chunk {
			part := sources[i:min(i+chunk, len(sources))]
			cctx := context.WithValue(ctx, chunkKey{}, n)
			inFlight <- struct{}{}
			wg.Go(func() {
				err := claimer.DoMany(cctx, part, job, runclaim.ForTick(tick))
				mu.Lock()
				if !counted[n] { // no claim event came: the call failed before the store
					counted[n] = true
					<-inFlight
				}
				if err != nil && !errors.Is(err, runclaim.ErrNotClaimed) {
					errs = append(errs, err)
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		mu.Lock()
		line.Writes = writes.Load() - w0
		line.LastStarted = time.Duration(last.Load())
		if len(errs) > 0 {
			line.Err = errors.Join(errs...).Error()
		}
		out := line
		mu.Unlock()
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	return nil
}
