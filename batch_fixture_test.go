package runclaim

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The batch form of the claim, kept as a reference for the benchmarks
// (BENCHMARKS.md compares the claim function with it) and for nothing
// else: the claim as the three statements of testdata/claim_batch.sql,
// lock, expire and claim, in one pgx.Batch, one network write, one round
// trip, one implicit transaction that ends at the batch's Sync. Releases
// before schema version 3 claimed this way; no store sends it now.

// BatchStore is a PostgresStore whose Claim sends the batch.
type BatchStore struct {
	*PostgresStore
	lock, expire, claim string
}

// NewBatchStore returns s with the batch form of the claim.
func NewBatchStore(t testing.TB, s *PostgresStore) *BatchStore {
	t.Helper()
	text, err := os.ReadFile("testdata/claim_batch.sql")
	if err != nil {
		t.Fatal(err)
	}
	st := parseStatements("claim_batch.sql", strings.ReplaceAll(string(text),
		"{{lock_timeout_ms}}", strconv.FormatInt(claimLockTimeout.Milliseconds(), 10)))
	return &BatchStore{PostgresStore: s, lock: s.fillNames(st["lock"]), expire: s.fillNames(st["expire"]), claim: s.fillNames(st["claim"])}
}

// Claim implements Store with the batch. It knows no keys, ticks or
// states.
func (b *BatchStore) Claim(ctx context.Context, req ClaimRequest) (RunInfo, error) {
	if err := checkRequest(ctx, req); err != nil {
		return RunInfo{}, err
	}
	explicit := b.explicit.Load()
	info, err := b.batchClaim(ctx, req, explicit)
	if err == errNeedExplicit {
		b.explicit.Store(true)
		info, err = b.batchClaim(ctx, req, true)
	}
	return info, err
}

func (b *BatchStore) batchClaim(ctx context.Context, req ClaimRequest, explicit bool) (RunInfo, error) {
	var r claimDecision
	key := advisoryKey(b.namespace, req.Source)
	lease, minInterval := req.Lease.Microseconds(), req.MinInterval.Microseconds()
	err := b.sendBatch(ctx, explicit, func(bt *pgx.Batch) {
		bt.Queue(b.lock, key, claimLockTimeout.Milliseconds()).QueryRow(func(row pgx.Row) error {
			return row.Scan(&r.locked, &r.isolation, nil)
		})
		bt.Queue(b.expire, req.Source, minInterval)
		bt.Queue(b.claim, req.Source, req.Owner, lease, minInterval).QueryRow(func(row pgx.Row) error {
			return row.Scan(&r.now, &r.insID, &r.insStarted, &r.insLease, &r.curID, &r.curOwner, &r.curStarted, &r.curLease, &r.retryAfter)
		})
	})
	if err != nil {
		return RunInfo{}, b.wrap(ctx, "claim "+quoteForError(req.Source), err)
	}
	return r.outcome(req, explicit)
}
