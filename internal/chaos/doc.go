// Package chaos holds runclaim's fault-injection tests: processes killed
// while they hold runs, network partitions, slow links and lost answers
// between a replica and Postgres (through internal/tcpproxy), and a
// Postgres restart.
// It has no code of its own; see the _test.go files.
//
// The restart test stops and starts the container shared by the tests of
// this package's test binary, so these tests never run in parallel and
// stay in a package of their own.
package chaos
