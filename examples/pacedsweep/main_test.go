package main

import (
	"io"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// TestSweepIsPaced: two replicas sweeping the same sources under a key
// with a MinGap run each source once, and no two starts come less than
// MinGap apart (sweep returns an error otherwise); both replicas took part.
func TestSweepIsPaced(t *testing.T) {
	starts, err := sweep(t.Context(), runclaim.NewMemoryStore(), time.Now().Truncate(time.Second), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	by := make(map[string]int)
	for _, s := range starts {
		by[s.replica]++
	}
	if len(starts) != sources || by["replica-a"] == 0 || by["replica-b"] == 0 {
		t.Errorf("%d starts, by replica %v; want %d, from both", len(starts), by, sources)
	}
}
