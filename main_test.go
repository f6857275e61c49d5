package runclaim_test

import (
	"os"
	"testing"

	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestMain tears down the shared test database server and checks for leaked
// goroutines once all tests have run.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
