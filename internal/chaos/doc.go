// Package chaos holds runclaim's fault-injection tests: processes killed
// while they hold runs, network partitions, slow links and lost answers
// between a replica and Postgres (through internal/tcpproxy), and a
// Postgres restart.
// It has no code of its own; see the _test.go files.
//
// The restart test stops and starts the container shared by the tests of
// this package's test binary, so these tests never run in parallel and
// stay in a package of their own.
//
// Every test here runs in real time against a real server, so each asserts
// outcomes and orderings by the database clock, with leases long enough
// that a busy machine cannot lose a healthy run; TESTING.md at the
// module's root lists what each depends on and why it holds under load
// (bash .ci/load-test checks that it does).
package chaos
