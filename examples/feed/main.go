// Command feed shows an incremental feed that resumes from its cursor
// after a replica is killed. Two replicas copy a feed of 20 items, a page
// of 4 at a time, under one source. Each run reads where the last one got
// to from Run.State and saves its cursor with Run.SaveState after each
// page it has stored: a checkpoint that only the holder of the run can
// write.
//
// replica-a copies three pages and is killed: it never finishes its run
// and never heartbeats again. replica-b claims with Wait, wins once
// replica-a's lease has ended, and carries on from replica-a's cursor: no
// item is copied twice, none is missed. replica-a, brought back, finds
// its lease lost: its late save is refused and changes nothing.
//
// By default the replicas share an in-memory store; with DATABASE_URL
// they share the examples' runs table on Postgres:
//
//	go run ./examples/feed
//	DATABASE_URL=postgres://user:pass@localhost:5432/db go run ./examples/feed
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

const (
	source   = "feed-example/items"
	items    = 20
	pageSize = 4
	lease    = time.Second // short, so that replica-b takes over soon after the kill
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, closeStore, err := openStore(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "feed:", err)
		os.Exit(1)
	}
	defer closeStore()
	if _, err := run(ctx, store, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "feed:", err)
		os.Exit(1)
	}
}

// page returns the items after cursor (an item number, "" for the
// start), at most pageSize of them, and the cursor after them.
func page(cursor string) ([]int, string) {
	from := 0
	if cursor != "" {
		from, _ = strconv.Atoi(cursor)
	}
	var got []int
	for i := from + 1; i <= items && len(got) < pageSize; i++ {
		got = append(got, i)
	}
	if len(got) == 0 {
		return nil, cursor
	}
	return got, strconv.Itoa(got[len(got)-1])
}

// copyPages copies pages of the feed for run, from its state on, saving
// the cursor after each page, until the feed ends or stop pages were
// copied (0: no bound). copied records each item copied.
func copyPages(ctx context.Context, run *runclaim.Run, stop int, copied map[int]string, who string, out io.Writer) error {
	cursor := string(run.State())
	fmt.Fprintf(out, "%s: run %d starts from cursor %q\n", who, run.ID, cursor)
	for n := 0; stop == 0 || n < stop; n++ {
		got, next := page(cursor)
		if len(got) == 0 {
			return nil
		}
		for _, it := range got { // "store" the page: durable before the save
			if prev, dup := copied[it]; dup {
				return fmt.Errorf("item %d copied twice: by %s and %s", it, prev, who)
			}
			copied[it] = who
		}
		if err := run.SaveState(ctx, []byte(next)); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: copied items %d-%d, saved cursor %q\n", who, got[0], got[len(got)-1], next)
		cursor = next
	}
	return nil
}

// run plays the story on store and returns which replica copied each
// item.
func run(ctx context.Context, store runclaim.Store, out io.Writer) (map[int]string, error) {
	copied := make(map[int]string)
	a, err := runclaim.New(store, runclaim.WithOwner("replica-a"), runclaim.WithLease(lease))
	if err != nil {
		return nil, err
	}
	b, err := runclaim.New(store, runclaim.WithOwner("replica-b"), runclaim.WithLease(lease))
	if err != nil {
		return nil, err
	}

	// replica-a copies three pages, then is killed: no Finish, no
	// heartbeat; its run holds the source until its lease ends.
	runA, err := a.Claim(ctx, source)
	if err != nil {
		return nil, err
	}
	if err := copyPages(ctx, runA, 3, copied, "replica-a", out); err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "replica-a: killed")

	// replica-b waits for the source, and resumes from replica-a's cursor.
	start := time.Now()
	err = b.Do(ctx, source, func(ctx context.Context, run *runclaim.Run) error {
		fmt.Fprintf(out, "replica-b: won after %v, once replica-a's lease ended\n", time.Since(start).Round(100*time.Millisecond))
		return copyPages(ctx, run, 0, copied, "replica-b", out)
	}, runclaim.Wait())
	if err != nil {
		return nil, err
	}

	// replica-a comes back and tries to save a cursor of its own.
	err = runA.SaveState(ctx, []byte("0"))
	if !errors.Is(err, runclaim.ErrLeaseLost) {
		return nil, fmt.Errorf("replica-a's late save: %v, want ErrLeaseLost", err)
	}
	fmt.Fprintln(out, "replica-a: back; its late save is refused:", err)
	if len(copied) != items {
		return nil, fmt.Errorf("%d items copied, want %d", len(copied), items)
	}
	fmt.Fprintf(out, "all %d items copied once\n", items)
	return copied, nil
}

// openStore returns an in-memory store, or a Postgres store on the
// examples' own table and namespace when DATABASE_URL is set.
func openStore(ctx context.Context) (runclaim.Store, func(), error) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		fmt.Println("store: in memory (set DATABASE_URL to use Postgres)")
		return runclaim.NewMemoryStore(), func() {}, nil
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	store, err := runclaim.NewPostgresStore(pool,
		runclaim.WithTable(runclaim.DefaultSchema, "runclaim_example_runs"),
		runclaim.WithNamespace("runclaim-example"))
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err == nil {
		// A fresh start for the example's source.
		_, err = store.ClearState(ctx, source, true)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	fmt.Println("store: Postgres, table", store.Table())
	return store, pool.Close, nil
}
