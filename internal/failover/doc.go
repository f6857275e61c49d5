// Package failover holds runclaim's database failover tests: a primary and
// a streaming standby, run from the PostgreSQL server binaries on this
// machine, replicas that claim and heartbeat through a multi-host DSN with
// target_session_attrs=read-write, and a promotion of the standby after
// the primary stops with an immediate shutdown while runs are held. It has
// no code of its own; see the _test.go files and docs/failover.md.
//
// The servers are started from the binaries in PGTEST_BINDIR, or else the
// newest /usr/lib/postgresql/*/bin holding postgres, initdb and
// pg_basebackup (Debian's postgresql-NN package), whatever
// PGTEST_SERVER_MAJOR says: CI installs postgresql-15 for them, while its
// containers run other versions. PostgreSQL refuses to run
// as root, so a test running as root starts them as the user postgres (or
// nobody). Without binaries the tests are skipped with a message saying how
// to run them, or fail when PGTEST_REQUIRED=1, as internal/pgtest's are.
// They run on Linux only.
package failover
