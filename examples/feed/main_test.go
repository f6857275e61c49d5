package main

import (
	"io"
	"testing"

	"github.com/runclaim/runclaim"
)

// TestFeedResumesAfterKill: replica-b resumes from replica-a's cursor
// after replica-a is killed: replica-a copied the first three pages,
// replica-b the rest, each item once, and replica-a's late save is
// refused (run returns an error otherwise).
func TestFeedResumesAfterKill(t *testing.T) {
	copied, err := run(t.Context(), runclaim.NewMemoryStore(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for it := 1; it <= items; it++ {
		want := "replica-b"
		if it <= 3*pageSize {
			want = "replica-a"
		}
		if copied[it] != want {
			t.Errorf("item %d copied by %q, want %s", it, copied[it], want)
		}
	}
}
