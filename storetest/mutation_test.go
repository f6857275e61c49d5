package storetest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/storetest"
)

// The suite's power is shown the way mutation testing shows it: each wrong
// Store in wrongstores_test.go must fail the subtest meant to catch it.
// Since a failing suite fails the test that runs it, each wrong Store runs in
// a child process of this test binary, which TestWrongStoresFail starts
// with envWrongStore naming the store, and whose output it reads.
const (
	// envWrongStore names the wrong Store a child process runs the suite
	// on.
	envWrongStore = "STORETEST_WRONG_STORE"
	// envWholeSuite, set to 1, makes TestWrongStoresFail run the whole
	// suite on each wrong Store and log every subtest it fails, instead of
	// the one subtest meant to catch it.
	envWholeSuite = "STORETEST_WHOLE_SUITE"
)

// childTimeout bounds a child process. A store that hangs makes each
// subtest wait until its own timeout, so the whole suite on skip-waits
// takes several minutes; wholeSuiteTimeout allows for that.
const childTimeout, wholeSuiteTimeout = 3 * time.Minute, 15 * time.Minute

// TestWrongStoreChild runs the suite on the wrong Store that envWrongStore
// names. It is run by TestWrongStoresFail, in a child process; run directly,
// it has nothing to check and says so.
func TestWrongStoreChild(t *testing.T) {
	name := os.Getenv(envWrongStore)
	if name == "" {
		t.Skip("runs only in the child processes of TestWrongStoresFail, which set " + envWrongStore)
	}
	for _, w := range append([]wrongStore{correctCopy}, wrongStores...) {
		if w.name == name {
			ignoreRecorded = name == "recorded-interval-ignored"
			storetest.RunReplicas(t, func(t *testing.T) func() runclaim.Store { return w.newBackend() })
			return
		}
	}
	t.Fatalf("no wrong Store is named %q", name)
}

// TestWrongStoresFail checks that each wrong Store fails the subtest of the
// suite meant to catch it, and that the copy of the memory store they are
// made from, without a bug, passes the whole suite through the same
// machinery. The child processes are this test binary, so they have the
// race detector if it has.
func TestWrongStoresFail(t *testing.T) {
	whole := os.Getenv(envWholeSuite) == "1"

	t.Run(correctCopy.name, func(t *testing.T) {
		t.Parallel()
		out, err := runChild(t, correctCopy.name, "")
		if err != nil || !strings.Contains(out, "\n--- PASS: TestWrongStoreChild ") {
			t.Fatalf("the suite on the correct copy: %v\n%s", err, out)
		}
		if strings.Contains(out, "--- SKIP") || strings.Contains(out, "--- FAIL") {
			t.Fatalf("the suite on the correct copy skipped or failed a subtest:\n%s", out)
		}
	})
	for _, w := range wrongStores {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			only := "^" + regexp.QuoteMeta(w.caughtBy) + "$"
			if whole {
				only = ""
			}
			out, err := runChild(t, w.name, only)
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("wrong Store %q (%s) passed the suite, or its run did not end with a failure: %v\n%s", w.name, w.bug, err, out)
			}
			failedCases := failedSubtests(out)
			t.Logf("%s (%s): fails %s", w.name, w.bug, strings.Join(failedCases, ", "))
			if !slices.Contains(failedCases, w.caughtBy) {
				t.Errorf("wrong Store %q (%s) did not fail %s\n%s", w.name, w.bug, w.caughtBy, out)
			}
			// It must fail for what it does, not because the run broke.
			for _, broken := range []string{"WARNING: DATA RACE", "panic: ", "test timed out"} {
				if strings.Contains(out, broken) {
					t.Errorf("the run of wrong Store %q reported %q:\n%s", w.name, broken, out)
				}
			}
		})
	}
}

// runChild runs the suite on the named store in a child process, only the
// subtests that match only if it is not empty, and returns its output.
func runChild(t *testing.T, name, only string) (string, error) {
	t.Helper()
	run, timeout := "^TestWrongStoreChild$", wholeSuiteTimeout
	if only != "" {
		run, timeout = run+"/"+only, childTimeout
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+run, "-test.v", "-test.count=1", "-test.timeout="+timeout.String())
	cmd.Env = append(os.Environ(), envWrongStore+"="+name)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: TestWrongStoreChild/(\S+) `)

// failedSubtests lists the subtests of the suite a child's output reports
// as failed.
func failedSubtests(out string) []string {
	var names []string
	for _, m := range failLine.FindAllStringSubmatch(out, -1) {
		names = append(names, m[1])
	}
	return names
}
