package runclaim

import "sync/atomic"

// schemaCache is what a store knows of its table's schema version: 0 until
// it has read it (Migrate, SchemaVersion, or a read after a statement
// found an object of the current version missing). Claims do not depend
// on it: every claim sends the same call, which both versions the store
// speaks answer. A keyed ClaimMany and the operator commands choose their
// statement by it.
type schemaCache struct {
	version atomic.Int64
}

// set records version v.
func (c *schemaCache) set(v int) { c.version.Store(int64(v)) }
