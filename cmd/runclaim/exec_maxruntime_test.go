package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestExecMaxRunTime: a command still running at --max-run-time is stopped,
// SIGTERM then SIGKILL after --kill-grace; the run is recorded as failed
// with the timeout in its error, and exec exits with --timeout-exit-code.
// The limits (1 s, 2 s, or five times what exec took here to run a shell
// that prints a line, when that is longer: on a loaded machine exec once
// took more than a second to start one) are far longer than starting the
// command takes, so the signal
// lands once the command runs; what catches a real fault is the exit
// code, the recorded outcome and the messages, not any duration. The
// command that stops on SIGTERM gets a kill grace of 5 s (and so a lease
// of a minute, which bounds it), so that no SIGKILL is needed even when a
// loaded machine is slow to reap it: with 300 ms it was sent once.
func TestExecMaxRunTime(t *testing.T) {
	db, store := setup(t)
	took := execStart(t, db)
	limit := func(d time.Duration) string {
		return max(d, (5 * took).Round(time.Second)).String()
	}
	for _, tc := range []struct {
		name    string
		script  string
		flags   []string
		grace   string // the --kill-grace given
		code    int
		sigkill bool
		ended   string
	}{
		{"stops on SIGTERM", `echo started; exec sleep 60`,
			[]string{"--max-run-time", limit(time.Second), "--lease", "1m", "--kill-grace", "5s"}, "5s", exitTimedOut, false, "signal: terminated"},
		{"ignores SIGTERM", `trap '' TERM; echo started; while :; do sleep 0.05; done`,
			[]string{"--max-run-time", limit(2 * time.Second), "--timeout-exit-code", "99"}, "300ms", 99, true, "signal: killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			source := "timeout-" + strings.Fields(tc.name)[0]
			_, done, stderr := startStopTest(t, db.DSN, source, tc.script, tc.flags)
			var code int
			select {
			case code = <-done:
			case <-time.After(testTimeout):
				t.Fatal("exec did not stop the command past --max-run-time")
			}
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			runs := history(t, store, source)
			if len(runs) != 1 {
				t.Fatalf("history %+v, want one run", runs)
			}
			msgs := stderr.String()
			for _, want := range []string{
				fmt.Sprintf(`runclaim exec: run %d of %q: maximum run time exceeded: run %d of %q ran longer than %s; sending SIGTERM to the command, SIGKILL in %s`,
					runs[0].ID, source, runs[0].ID, source, tc.flags[1], tc.grace),
				"the command ran longer than --max-run-time " + tc.flags[1] + " and was stopped; the command ended with " + tc.ended,
			} {
				if !strings.Contains(msgs, want) {
					t.Errorf("stderr lacks %q:\n%s", want, msgs)
				}
			}
			if got := strings.Contains(msgs, "sending SIGKILL\n"); got != tc.sigkill {
				t.Errorf("SIGKILL sent: %v, want %v:\n%s", got, tc.sigkill, msgs)
			}
			if want := tc.ended + "; stopped because runclaim: maximum run time exceeded"; runs[0].Status != runclaim.StatusFailed || !strings.HasPrefix(runs[0].Error, want) {
				t.Errorf("recorded %s with %q, want failed with %q...", runs[0].Status, runs[0].Error, want)
			}
		})
	}

	t.Run("in time", func(t *testing.T) {
		r := runCLI(t, db, nil, "exec", "--source", "timeout-in-time", "--max-run-time", "1h", "--", "true")
		runs := history(t, store, "timeout-in-time")
		if r.code != 0 || len(runs) != 1 || runs[0].Status != runclaim.StatusSucceeded {
			t.Errorf("%+v, history %+v; want exit 0 and a succeeded run", r, runs)
		}
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"exec", "--source", "timeout-usage", "--max-run-time", "-1s", "--", "true"},
			{"exec", "--source", "timeout-usage", "--timeout-exit-code", "256", "--", "true"},
		} {
			if r := runCLI(t, db, nil, args...); r.code != exitUsage {
				t.Errorf("%q: %+v, want exit 2", args, r)
			}
		}
		if runs := history(t, store, "timeout-usage"); len(runs) != 0 {
			t.Errorf("a bad command line ran: %+v", runs)
		}
	})
}

// execStart returns how long exec takes here now to run a shell that
// prints a line, from its start to its end.
func execStart(t *testing.T, db *pgtest.DB) time.Duration {
	t.Helper()
	start := time.Now()
	if r := runCLI(t, db, nil, "exec", "--source", "timeout-calibration", "--", "sh", "-c", "echo started"); r.code != 0 || r.stdout != "started\n" {
		t.Fatalf("exec of a shell that prints a line: %+v", r)
	}
	return time.Since(start)
}
