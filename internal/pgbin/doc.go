// Package pgbin finds this machine's PostgreSQL server binaries and the
// user a server started from them runs as: what internal/pgtest needs to
// start a throwaway cluster when no container can start, and what
// internal/failover needs for its primary and standby. It is for tests,
// and for Linux (Debian's /usr/lib/postgresql/N/bin layout, or
// PGTEST_BINDIR).
package pgbin
