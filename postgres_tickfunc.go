package runclaim

// Schema version 4 (sql/004_ticks.up.sql) adds ticks (ForTick):
//
//   - the tick column, the scheduled tick a run serves, NULL for a plain
//     claim and for the runs of releases before it, which do not name it;
//   - a unique index on (source, tick DESC) over the runs that serve their
//     tick (running, succeeded, failed): the claim finds the latest tick
//     served in one index probe, however long the history, and no two
//     such runs can share a tick, the database's own check of "one run
//     per tick" behind the advisory lock, as the running index is of G1;
//   - the claim function with a seventh argument, the tick, and a tenth
//     result, done_tick. It is an overload: the six-argument function of
//     version 3 stays, unchanged, for the replicas of the release before
//     during a rolling deploy.
//
// The function does what the six-argument one does, and, for a tick
// claim, between the running run's probe and the interval's: after a live
// holder or a busy lock has returned, it reads the latest tick served,
// leaving out the source's running run, which has lapsed by then and serves
// no tick; a tick at or before it returns there, with nothing written, so
// that a lost tick claim writes no WAL either. The insert records the
// tick. The store calls the overload of version 9, which serves ticks the
// same way.

// tickFuncVersion is the first schema version with ticks.
const tickFuncVersion = 4

// tickFuncArgs are the argument types of the version 4 claim function.
const tickFuncArgs = "(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz)"

// tickSuffix makes the name of the index of ticks served from the
// table's.
const tickSuffix = "_tick"
