package storetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/storetest"
)

// forwardingStore stands for a third-party backend. A real one would keep its
// runs in its own storage; this one forwards to the memory store.
type forwardingStore struct {
	inner runclaim.Store
}

var _ runclaim.Store = (*forwardingStore)(nil)

func (s *forwardingStore) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	return s.inner.Claim(ctx, req)
}

func (s *forwardingStore) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	return s.inner.Heartbeat(ctx, req)
}

func (s *forwardingStore) Finish(ctx context.Context, req runclaim.FinishRequest) error {
	return s.inner.Finish(ctx, req)
}

// newBackend makes a fresh, empty backend for one subtest and returns a
// function that opens one more store on it, as another replica would. A
// backend on a database would create a fresh database, schema or table
// here, run its migrations, and register their removal with t.Cleanup; each
// store it opens would have a connection pool of its own.
func newBackend(t *testing.T) func() runclaim.Store {
	shared := runclaim.NewMemoryStore()
	return func() runclaim.Store { return &forwardingStore{inner: shared} }
}

// A backend's test file runs the suite from a test function of its own:
//
//	func TestConformance(t *testing.T) {
//		storetest.RunReplicas(t, newBackend)
//	}
//
// Run the test with -race: the suite calls the stores from many goroutines.
func Example() {
	testConformance := func(t *testing.T) {
		storetest.RunReplicas(t, newBackend)
	}
	_ = testConformance
}
