package storetest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMemoryStore runs the suite against a fresh memory store per subtest.
func TestMemoryStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) runclaim.Store { return runclaim.NewMemoryStore() })
}

// TestSharedMemoryStore runs the suite with one store shared by every
// subtest, as a backend on a single shared database would.
func TestSharedMemoryStore(t *testing.T) {
	s := runclaim.NewMemoryStore()
	storetest.Run(t, func(t *testing.T) runclaim.Store { return s })
}
