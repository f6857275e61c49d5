package runclaim

import (
	"sync/atomic"
	"time"
)

// schemaCache is what a store knows of its table's schema version: 0 until
// it has read it (Migrate, SchemaVersion, or a read after a claim found
// the current claim function missing).
//
// A store claims on the current version with the claim function of
// claimBodyVersion, and on the version before it (oldestClaimVersion)
// with that version's statements. It takes a table to be current until
// a claim finds the function missing: it then reads the version, and, on
// the version before, sends that claim and the next ones in the form of
// that version, until schemaRecheck has passed; the claim after that
// tries the current function again, so that a store that started before
// another replica's Migrate moves to it by itself. A store that reads an
// older version refuses the claim (tooOldError).
type schemaCache struct {
	version atomic.Int64
	read    atomic.Int64 // when version was read, in Unix nanoseconds
	recheck time.Duration
}

// schemaRecheck bounds how long a store that found its table at the
// version before goes on claiming in that version's form after another
// replica's Migrate.
const schemaRecheck = 30 * time.Second

// set records version v, read now.
func (c *schemaCache) set(v int) {
	c.read.Store(time.Now().UnixNano())
	c.version.Store(int64(v))
}

// previous reports whether claims go in the form of the version before
// the current one.
func (c *schemaCache) previous() bool {
	return c.version.Load() == oldestClaimVersion &&
		time.Since(time.Unix(0, c.read.Load())) < c.recheck
}
