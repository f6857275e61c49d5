package storetest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMemoryStore runs the whole suite against a fresh memory store per
// subtest. A memory store is shared within one process by sharing the
// value, so each replica is the same *MemoryStore.
func TestMemoryStore(t *testing.T) {
	storetest.RunReplicas(t, func(t *testing.T) func() runclaim.Store {
		s := runclaim.NewMemoryStore()
		return func() runclaim.Store { return s }
	})
}

// TestSharedMemoryStore runs the suite through Run, with one store shared
// by every subtest, as a backend on a single shared database would be.
func TestSharedMemoryStore(t *testing.T) {
	s := runclaim.NewMemoryStore()
	storetest.Run(t, func(t *testing.T) runclaim.Store { return s })
}
