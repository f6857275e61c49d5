package runclaim_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runclaim/runclaim/internal/pgtest"
)

// BenchmarkFence: the latency of Fence inside a transaction (its one
// batch: the key-share lock, the savepoint, the re-check under FOR SHARE,
// the rollback and release of the savepoint), against a floor of the lock
// statement alone (SELECT ... FOR KEY SHARE of the run's row) in the same
// kind of transaction. Both are timed between BEGIN and COMMIT, which are
// not counted; samples alternate, on one connection.
func BenchmarkFence(b *testing.B) {
	ctx := context.Background()
	db := pgtest.New(b)
	store := benchStore(b, db.Pool)
	run := mustWin(b, benchClaimer(b, store, "bench"), "src")
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	lock := `SELECT id FROM ` + store.Table() + ` WHERE id = $1 FOR KEY SHARE`

	var fence, floor latencies
	inTx := func(f func(tx pgx.Tx)) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		f(tx)
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	fenceOnce := func(tx pgx.Tx) {
		if err := store.Fence(ctx, tx, run); err != nil {
			b.Fatalf("Fence: %v", err)
		}
	}
	floorOnce := func(tx pgx.Tx) {
		var id int64
		if err := tx.QueryRow(ctx, lock, run.ID).Scan(&id); err != nil {
			b.Fatalf("lock: %v", err)
		}
	}
	for range 20 { // warm up: prepare the statements on the connection
		inTx(fenceOnce)
		inTx(floorOnce)
	}
	b.ResetTimer()
	for range b.N {
		inTx(func(tx pgx.Tx) { fence.measure(func() { fenceOnce(tx) }) })
		inTx(func(tx pgx.Tx) { floor.measure(func() { floorOnce(tx) }) })
	}
	reportPair(b, "fence", "lock", fence, floor)
}
