package runclaim

import "time"

// Status is the state of a run: StatusRunning, then one of the other
// Status constants.
type Status string

// The package's constants, in one block: the schema version this release
// speaks, defaults, bounds, and the states of a run. Every input beyond a
// bound is refused with an error, before anything is sent to the store.
const (
	// LatestSchemaVersion is the version of the runs table's schema that
	// this release creates (Migrate) and speaks; docs/schema.md says what
	// each version adds.
	LatestSchemaVersion = 13

	// Claimer options (see New).

	// DefaultLease is the lease a claim takes unless WithLease sets another.
	DefaultLease = 30 * time.Second
	// MinLease is the shortest lease WithLease accepts.
	MinLease = 10 * time.Millisecond
	// MaxLease is the longest lease WithLease accepts.
	MaxLease = 365 * 24 * time.Hour
	// MaxSourceLen is the longest source name, in bytes.
	MaxSourceLen = 512
	// MaxOwnerLen is the longest owner name, in bytes.
	MaxOwnerLen = 512

	// Postgres store options (see NewPostgresStore).

	// DefaultSchema is the schema of the runs table unless WithTable sets another.
	DefaultSchema = "public"
	// DefaultTable is the name of the runs table unless WithTable sets another.
	DefaultTable = "runclaim_runs"
	// DefaultNamespace is mixed into every advisory lock key (see
	// PostgresStore.AdvisoryKey) unless WithNamespace sets another.
	DefaultNamespace = "runclaim"

	// Runs, claims and the operator reads and writes.

	// CheckScanLimit is how many of a source's newest runs Check and
	// SourceStates read, at most, to find its newest succeeded run. It bounds
	// the read whatever the history holds. A source whose last CheckScanLimit
	// runs all failed has no known last success (SourceState.SuccessUnread is
	// set) and counts as overdue.
	CheckScanLimit = 1000
	// MaxSourceStates is the most sources SourceStates reports; with more in
	// the table it returns an error rather than a read whose cost has no bound.
	MaxSourceStates = 10000
	// FinishTimeout bounds how long Finish keeps trying to record an outcome once
	// the caller's context has been cancelled.
	FinishTimeout = 10 * time.Second
	// MaxClaimMany is the most sources one ClaimMany call claims. A longer
	// list is refused, before anything is sent to the store, with an error
	// that says so: call ClaimMany once per slice of at most MaxClaimMany
	// sources.
	//
	// The call is not split into several statements behind the caller's
	// back: one call is one transaction, so that an error claims nothing,
	// and a split would lose that. The bound keeps one transaction's cost
	// bounded: the Postgres store's call holds the advisory lock of every
	// source it is deciding until it commits, and advisory locks live in the
	// server's shared lock table, which holds max_locks_per_transaction ×
	// (max_connections + max_prepared_transactions) locks in all, 6,400 with
	// the defaults; and a call takes about 30 µs of server time per source
	// (see BENCHMARKS.md), so a full call stays in tens of milliseconds.
	MaxClaimMany = 1000
	// MaxClaimManyKeys is the most distinct keys the requests of one
	// ClaimMany call name, all together. More is refused before anything is
	// sent, as MaxClaimMany is. The Postgres store's call holds one advisory
	// lock per source and two per distinct key (the table's, and, while
	// replicas of the previous release may run, the namespace's: see
	// PostgresStore.KeyLocks) until it commits, in the server's shared lock table
	// (MaxClaimMany's doc): with both bounds a call holds at most 1,200
	// locks, under a fifth of a default server's 6,400,
	// where 1,000 sources naming 16 keys each, all distinct, took 17,000
	// and made other sessions of the server fail with "out of shared
	// memory". The lock table is the server's: see docs/many.md for the
	// budget of replicas that batch at once.
	MaxClaimManyKeys = 100
	// MaxErrorLen is the longest error text a run records, in bytes. Longer texts
	// are cut and marked with a trailing "…(truncated)".
	MaxErrorLen = 8 << 10
	// PruneBatchSize is how many rows Prune and PruneRuns look at per
	// statement; they delete those of them that may go.
	PruneBatchSize = 1000
	// MaxKeepLast is the largest PruneOptions.KeepLast: each batch of PruneRuns
	// reads up to that many index entries per run it looks at.
	MaxKeepLast = 100_000
	// MaxPauseNoteLen is the longest note a pause takes, in bytes.
	MaxPauseNoteLen = 1024
	// MaxStateLen is the longest state a source keeps, in bytes.
	MaxStateLen = 64 << 10

	// Keys and their limits (see WithKeys and Limiter).

	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 512
	// MaxKeys is the most keys one claim names.
	MaxKeys = 16
	// MaxLimitPer is the longest window a Limit's MaxStarts counts in.
	MaxLimitPer = 31 * 24 * time.Hour
	// MaxLimitCount bounds MaxRunning and MaxStarts.
	MaxLimitCount = 1_000_000
	// MaxCooldownNoteLen is the longest note a cooldown takes, in bytes.
	MaxCooldownNoteLen = MaxPauseNoteLen
	// MaxKeyStates is the most keys Keys reports.
	MaxKeyStates = 10000

	// The states of a run (Status). A run starts as StatusRunning and ends
	// in one of the others.

	StatusRunning   Status = "running"   // holds its source
	StatusSucceeded Status = "succeeded" // finished without error
	StatusFailed    Status = "failed"    // finished with an error or a panic
	StatusExpired   Status = "expired"   // its lease ended and a claim took over
	StatusReleased  Status = "released"  // ended by an operator
	StatusReplaced  Status = "replaced"  // asked to stop by a claim with Replace, which took over once it finished
)
