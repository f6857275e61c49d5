package runclaim

// The batch form of the claim, for a table at schema version 2 (without
// the claim function): this release starting before Migrate has run, or a
// step undone. Delete this file, its statements in sql/claim_batch.sql and
// the fallback to it in claim (lock.go) when version 2 tables are no
// longer supported, that is when no release that may meet a table without
// the claim function is supported any more.
//
// The claim is the three statements of sql/claim_batch.sql, lock, expire
// and claim, as the previous release sends them: one pgx.Batch, one
// network write, one round trip, one implicit transaction that ends at the
// batch's Sync.

import (
	"context"
	"runtime"
	"sync"
	"weak"

	"github.com/jackc/pgx/v5"
)

// batchClaimRow is what the batch returns: the lock statement's row and
// the claim statement's, and the schema state, when it read it too.
type batchClaimRow struct {
	claimDecision
	probe bool // the batch read the schema state
	state schemaState
}

// batchClaim sends the claim as the batch of lock, expire and claim, with
// the schema state read too when the store's knowledge of it is stale.
// Each statement's result is read by its own callback.
func (s *PostgresStore) batchClaim(ctx context.Context, req ClaimRequest, explicit bool, r *batchClaimRow) error {
	key := AdvisoryKey(s.namespace, req.Source)
	lease, minInterval := req.Lease.Microseconds(), req.MinInterval.Microseconds()
	r.probe = s.schemaVer.stale()
	return s.sendBatch(ctx, explicit, func(b *pgx.Batch) {
		// The third column, the lock_timeout set, is not needed: nil skips
		// it. The rewriter prepares the statements under the lock bound.
		b.Queue(s.sql.lock, &s.prepared, key, claimLockTimeout.Milliseconds()).QueryRow(func(row pgx.Row) error {
			return row.Scan(&r.locked, &r.isolation, nil)
		})
		b.Queue(s.sql.expire, req.Source, minInterval)
		b.Queue(s.sql.claim, req.Source, req.Owner, lease, minInterval).QueryRow(func(row pgx.Row) error {
			return row.Scan(&r.now, &r.insID, &r.insStarted, &r.insLease, &r.curID, &r.curOwner, &r.curStarted, &r.curLease, &r.retryAfter)
		})
		if r.probe {
			b.Queue(schemaStateSQL, s.schemaStateArgs()...).QueryRow(func(row pgx.Row) error {
				return row.Scan(r.state.dest()...)
			})
		}
	})
}

// boundedPrepare prepares the batch's statements that touch the runs
// table on a connection before the batch's first use there, inside a
// transaction whose lock_timeout is the claim's bound. It is a
// pgx.QueryRewriter queued with the batch's first statement: pgx calls it
// with the connection before it sends anything. Without it, pgx's default
// mode would prepare them in a round trip of its own before the batch, and
// parsing a statement waits for a lock on the table it reads, with no
// bound, before the batch's first statement has set one. In the modes that
// parse each statement in the batch's own transaction, in order (exec and
// simple protocol), there is nothing to do. pgx uses a statement prepared
// under its own SQL as its name in a batch in every other mode.
type boundedPrepare struct {
	stmts []string // the statements to prepare

	mu    sync.RWMutex                        // protects conns
	conns map[weak.Pointer[pgx.Conn]]struct{} // the connections that have them
}

// RewriteQuery implements pgx.QueryRewriter, changing nothing of the query.
func (p *boundedPrepare) RewriteQuery(ctx context.Context, conn *pgx.Conn, sql string, args []any) (string, []any, error) {
	w := weak.Make(conn)
	p.mu.RLock()
	_, done := p.conns[w]
	p.mu.RUnlock()
	if done {
		return sql, args, nil
	}
	switch conn.Config().DefaultQueryExecMode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
	default:
		if err := p.prepare(ctx, conn); err != nil {
			return "", nil, err
		}
	}
	p.mu.Lock()
	if p.conns == nil {
		p.conns = make(map[weak.Pointer[pgx.Conn]]struct{})
	}
	if _, ok := p.conns[w]; !ok {
		p.conns[w] = struct{}{}
		runtime.AddCleanup(conn, p.forget, w)
	}
	p.mu.Unlock()
	return sql, args, nil
}

// forget drops a connection that has been garbage collected.
func (p *boundedPrepare) forget(w weak.Pointer[pgx.Conn]) {
	p.mu.Lock()
	delete(p.conns, w)
	p.mu.Unlock()
}

// prepare prepares p's statements on conn under the claim's lock bound.
// Prepared statements outlive the transaction.
func (p *boundedPrepare) prepare(ctx context.Context, conn *pgx.Conn) (err error) {
	if _, err := conn.Exec(ctx, statements["prepare_begin"]); err != nil {
		return err
	}
	defer func() {
		end := "COMMIT"
		if err != nil {
			end = "ROLLBACK"
		}
		if _, eerr := conn.Exec(ctx, end); err == nil {
			err = eerr
		}
	}()
	for _, q := range p.stmts {
		if _, err := conn.Prepare(ctx, q, q); err != nil {
			return err
		}
	}
	return nil
}
