//go:build linux

package failover

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/tcpproxy"
)

// checkClaimError checks that err is a claim failure, not a skip, and, if
// code is set, that it carries that SQLSTATE.
func checkClaimError(t *testing.T, what string, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		t.Errorf("%s: the claim succeeded", what)
	case errors.Is(err, runclaim.ErrNotClaimed):
		t.Errorf("%s: the claim was skipped: %v", what, err)
	case code != "" && (!errors.As(err, &pgErr) || pgErr.Code != code):
		t.Errorf("%s: claim error %v, want SQLSTATE %s", what, err, code)
	default:
		t.Logf("%s: %v", what, err)
	}
}

// TestFailoverErrors: what a replica meets during a failover surfaces as
// a claim error, never as a skip, and heartbeats retry through it:
//
//   - a server that is (still, or again) a standby: SQLSTATE 25006;
//   - an administrator's pg_terminate_backend, as a fast shutdown sends
//     it: 57P01;
//   - a connection reset, and a connection refused.
//
// A run held through Do meets each of them, in turn, on its heartbeats,
// and keeps its run: its job's context is never cancelled, and after each
// fault a heartbeat succeeds again.
func TestFailoverErrors(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	migrate(t, c)
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, c.primary.dsn())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())

	proxy, err := tcpproxy.Start("127.0.0.1:" + strconv.Itoa(c.primary.port))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxied := "postgres://postgres@" + proxy.Addr().String() + "/postgres?sslmode=disable&connect_timeout=2&application_name=faulty"

	var (
		mu       sync.Mutex // protects hbErrs
		hbErrs   []error
		lost     = make(chan error, 1)
		hbFailed = make(chan struct{}, 1)
	)
	store, err := runclaim.NewPostgresStore(newPool(t, proxied))
	if err != nil {
		t.Fatal(err)
	}
	// A lease under the replicas' so the run's heartbeats come often: a
	// heartbeat every 500 ms, an attempt given up after 1.4 s, a retry
	// 125 ms later, the run given up 4.75 s after its last success. Each
	// fault below lasts until one heartbeat has failed, and the next
	// retry then succeeds.
	holder, err := runclaim.New(store, runclaim.WithLease(6*time.Second), runclaim.WithHeartbeat(500*time.Millisecond),
		runclaim.WithOwner("holder"), runclaim.WithHooks(runclaim.Hooks{
			HeartbeatFailed: func(e runclaim.Event) {
				mu.Lock()
				hbErrs = append(hbErrs, e.Err)
				mu.Unlock()
				select {
				case hbFailed <- struct{}{}:
				default:
				}
			},
		}))
	if err != nil {
		t.Fatal(err)
	}
	runCh := make(chan *runclaim.Run, 1)
	release := make(chan struct{})
	doErr := make(chan error, 1)
	go func() {
		doErr <- holder.Do(context.Background(), "held", func(ctx context.Context, run *runclaim.Run) error {
			runCh <- run
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				lost <- context.Cause(ctx)
				return context.Cause(ctx)
			}
		})
	}()
	var run *runclaim.Run
	select {
	case run = <-runCh:
	case err := <-doErr:
		t.Fatalf("Do: %v", err)
	case <-time.After(wait):
		t.Fatal("no run within the wait")
	}
	defer func() {
		close(release)
		if err := <-doErr; err != nil {
			t.Errorf("Do: %v", err)
		}
	}()
	c.waitCaughtUp()

	// fault starts a fault, waits until a heartbeat has failed, ends the
	// fault and waits until a heartbeat succeeds again.
	fault := func(what string, start, end func()) {
		t.Helper()
		select {
		case <-hbFailed:
		default:
		}
		start()
		select {
		case <-hbFailed:
		case err := <-lost:
			t.Fatalf("%s: the run was lost: %v", what, err)
		case <-time.After(wait):
			t.Fatalf("%s: no heartbeat failed", what)
		}
		before := run.Deadline()
		end()
		deadline := time.After(wait)
		for !run.Deadline().After(before) {
			select {
			case err := <-lost:
				t.Fatalf("%s: the run was lost: %v", what, err)
			case <-deadline:
				t.Fatalf("%s: no heartbeat succeeded after the fault", what)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}

	t.Run("read-only", func(t *testing.T) {
		standby, err := runclaim.NewPostgresStore(newPool(t, c.standby.dsn()))
		if err != nil {
			t.Fatal(err)
		}
		cl, err := runclaim.New(standby)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Claim(ctx, "a")
		checkClaimError(t, "claim on the standby", err, "25006")
		_, err = standby.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: run.ID, Source: run.Source, StartedAt: run.StartedAt, Lease: time.Minute})
		if errors.Is(err, runclaim.ErrLeaseLost) || pgCode(err) != "25006" {
			t.Errorf("heartbeat on the standby: %v, want SQLSTATE 25006 and not ErrLeaseLost", err)
		}
		setReadOnly := func(on bool) func() {
			return func() {
				q := `ALTER SYSTEM SET default_transaction_read_only = on`
				if !on {
					q = `ALTER SYSTEM RESET default_transaction_read_only`
				}
				if _, err := admin.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
				if _, err := admin.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
					t.Fatal(err)
				}
			}
		}
		fault("primary turned read-only", setReadOnly(true), setReadOnly(false))
	})

	t.Run("admin shutdown", func(t *testing.T) {
		cl := newClaimer(t, newPool(t, c.primary.dsn()+"&application_name=victim"), "victim")
		// A claim of source "slow" stays in the server until its session
		// is ended: its insert sleeps.
		if _, err := admin.Exec(ctx, `CREATE FUNCTION public.slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.source = 'slow' THEN
		PERFORM pg_catalog.pg_sleep(600);
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER slow BEFORE INSERT ON runclaim_runs FOR EACH ROW EXECUTE FUNCTION public.slow()`); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if _, err := admin.Exec(context.Background(), `DROP TRIGGER slow ON runclaim_runs; DROP FUNCTION public.slow()`); err != nil {
				t.Error(err)
			}
		}()
		claimErr := make(chan error, 1)
		go func() {
			_, err := cl.Claim(ctx, "slow")
			claimErr <- err
		}()
		// End its session as a fast shutdown would.
		var terminated bool
		deadline := time.After(wait)
		for !terminated {
			err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) > 0 FROM pg_stat_activity
WHERE application_name = 'victim' AND wait_event = 'PgSleep'`).Scan(&terminated)
			if err != nil {
				t.Fatal(err)
			}
			if terminated {
				break
			}
			select {
			case err := <-claimErr:
				t.Fatalf("the claim ended before it could be terminated: %v", err)
			case <-deadline:
				t.Fatal("the claim never reached the server")
			case <-time.After(5 * time.Millisecond):
			}
		}
		checkClaimError(t, "claim terminated by an administrator", <-claimErr, "57P01")
		fault("heartbeat sessions terminated", func() {
			if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'faulty'`); err != nil {
				t.Fatal(err)
			}
		}, func() {})
	})

	t.Run("reset", func(t *testing.T) {
		proxy.Cut()
		cl := newClaimer(t, newPool(t, proxied), "reset")
		_, err := cl.Claim(ctx, "a")
		checkClaimError(t, "claim through a cut link", err, "")
		proxy.Pass()
		fault("link cut", proxy.Cut, proxy.Pass)
	})

	t.Run("refused", func(t *testing.T) {
		port := freePort(t) // nothing listens there
		cl := newClaimer(t, newPool(t, "postgres://postgres@127.0.0.1:"+strconv.Itoa(port)+"/postgres?sslmode=disable&connect_timeout=2"), "refused")
		_, err := cl.Claim(ctx, "a")
		checkClaimError(t, "claim on a closed port", err, "")
	})

	mu.Lock()
	defer mu.Unlock()
	for _, err := range hbErrs {
		t.Logf("heartbeat failed, and was retried: %v", err)
	}
}

// pgCode returns the SQLSTATE of the *pgconn.PgError in err's chain, or "".
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
