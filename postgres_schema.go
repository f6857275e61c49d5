package runclaim

import (
	"sync/atomic"
	"time"
)

// schemaCache is what a store knows of its table's schema version.
type schemaCache struct {
	base    time.Time     // monotonic origin of checked
	recheck time.Duration // schemaRecheck; tests change it
	version atomic.Int64  // 0: not known
	checked atomic.Int64  // when version was read, as nanoseconds since base
}

// useStateFunc reports whether claims should call the function of
// version 9: when the version is not known yet, or has it, or when a
// version with the claim function but before 9 was read at least
// schemaRecheck ago (a store on the batch learns it from the batch's own
// recheck), so that a store
// that started before another replica's Migrate finds the function within
// schemaRecheck.
func (c *schemaCache) useStateFunc() bool {
	v := c.version.Load()
	if v == 0 || v >= stateFuncVersion {
		return true
	}
	if v < claimFuncVersion {
		return false // the batch's own recheck reads the version
	}
	return time.Duration(int64(time.Since(c.base))-c.checked.Load()) >= c.recheck
}

// noStateFunc records that a call found the function of version 9
// missing: claims go by the version before it (or the older one already
// known) until the next recheck.
func (c *schemaCache) noStateFunc() {
	v := c.version.Load()
	if v == 0 || v >= stateFuncVersion {
		v = stateFuncVersion - 1
	}
	c.set(int(v))
}

// useFunc reports whether claims should call the function: when the
// version is not known yet, or has it.
func (c *schemaCache) useFunc() bool {
	v := c.version.Load()
	return v == 0 || v >= claimFuncVersion
}

// useTickFunc reports whether plain claims should call the function of
// version 4: when the version is not known yet, or has it. Tick claims
// always do.
func (c *schemaCache) useTickFunc() bool {
	v := c.version.Load()
	return v == 0 || v >= tickFuncVersion
}

// stale reports whether a batch claim should read the schema state too.
func (c *schemaCache) stale() bool {
	if v := c.version.Load(); v == 0 || v >= claimFuncVersion {
		return v == 0
	}
	return time.Duration(int64(time.Since(c.base))-c.checked.Load()) >= c.recheck
}

// set records version v as read now.
func (c *schemaCache) set(v int) {
	c.checked.Store(int64(time.Since(c.base)))
	c.version.Store(int64(v))
}

// noFunc records that a call found the function missing: claims go by the
// version before it until the next recheck.
func (c *schemaCache) noFunc() { c.set(claimFuncVersion - 1) }
