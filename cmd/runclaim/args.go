package main

import (
	"context"
	"time"

	"github.com/runclaim/runclaim"
)

// The checks of the arguments that name a key or carry a note, made
// before the CLI connects: by the library's own rules, asked of what
// refuses them first (a claim's request, an in-memory store), so that the
// CLI refuses exactly what a store would.

// checkKey returns the error a store gives for key, or nil.
func checkKey(key string) error {
	return runclaim.ClaimRequest{Source: "s", Owner: "o", Lease: time.Minute, Keys: []string{key}}.Validate()
}

// checkNote returns the error a store gives for the note of a pause or a
// cooldown (kind), or nil.
func checkNote(kind, note string) error {
	ctx := context.Background()
	if kind == "pause" {
		return runclaim.NewMemoryStore().Pause(ctx, "s", time.Time{}, note)
	}
	return runclaim.NewMemoryStore().Cooldown(ctx, "k", time.Now().Add(time.Hour), note)
}
