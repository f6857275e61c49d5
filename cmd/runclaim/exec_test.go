package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

func TestExec(t *testing.T) {
	db, store := setup(t)

	t.Run("exit codes are recorded", func(t *testing.T) {
		for _, tc := range []struct {
			script string
			code   int
			status runclaim.Status
			err    string
		}{
			{"echo hello", 0, runclaim.StatusSucceeded, ""},
			{"exit 3", 3, runclaim.StatusFailed, "exit status 3"},
			{"exit 255", 255, runclaim.StatusFailed, "exit status 255"},
			{"kill -9 $$", 137, runclaim.StatusFailed, "signal: killed"},
			{"kill -TERM $$", 143, runclaim.StatusFailed, "signal: terminated"},
		} {
			source := "codes-" + strings.Fields(tc.script)[0] + fmt.Sprint(tc.code)
			r := runCLI(t, db, nil, "exec", "--source", source, "--", "sh", "-c", tc.script)
			if r.code != tc.code {
				t.Errorf("%q: exit code %d, want %d (%+v)", tc.script, r.code, tc.code, r)
			}
			runs := history(t, store, source)
			if len(runs) != 1 || runs[0].Status != tc.status || runs[0].Error != tc.err || runs[0].FinishedAt.IsZero() {
				t.Errorf("%q: history %+v, want one %s run with error %q", tc.script, runs, tc.status, tc.err)
			}
		}
	})

	t.Run("arguments, stdin and stdout pass through", func(t *testing.T) {
		r := runCLI(t, db, strings.NewReader("from stdin\n"),
			"exec", "--source", "io", "--", "sh", "-c", `cat; echo "$1 $2"; echo oops >&2`, "sh", "first", "second arg")
		if r.code != 0 || r.stdout != "from stdin\nfirst second arg\n" || r.stderr != "oops\n" {
			t.Errorf("%+v", r)
		}
	})

	t.Run("environment", func(t *testing.T) {
		r := runCLI(t, db, nil, "exec", "--source", "env", "--owner", "me", "--", "sh", "-c", `echo "$RUNCLAIM_RUN_ID $RUNCLAIM_SOURCE $RUNCLAIM_OWNER"`)
		runs := history(t, store, "env")
		if r.code != 0 || len(runs) != 1 || r.stdout != fmt.Sprintf("%d env me\n", runs[0].ID) {
			t.Errorf("%+v, history %+v", r, runs)
		}
	})

	t.Run("verbose", func(t *testing.T) {
		r := runCLI(t, db, nil, "exec", "--source", "verbose", "--owner", "me", "--verbose", "--", "true")
		runs := history(t, store, "verbose")
		if r.code != 0 || len(runs) != 1 || runs[0].Owner != "me" {
			t.Fatalf("%+v, history %+v", r, runs)
		}
		for _, want := range []string{fmt.Sprintf(`claimed run %d of "verbose" as me`, runs[0].ID), fmt.Sprintf(`run %d of "verbose" recorded as succeeded`, runs[0].ID)} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr %q lacks %q", r.stderr, want)
			}
		}
	})

	t.Run("command not found", func(t *testing.T) {
		for _, name := range []string{"runclaim-no-such-command", "/no/such/dir/cmd"} {
			r := runCLI(t, db, nil, "exec", "--source", "missing", "--", name)
			if r.code != exitNotFound || !strings.Contains(r.stderr, name) {
				t.Errorf("%s: %+v, want exit 127", name, r)
			}
			if want := "runclaim exec: cannot run \"" + name + "\": "; !strings.HasPrefix(r.stderr, want) || strings.Contains(r.stderr, "exec: exec:") || strings.Contains(r.stderr, "  ") {
				t.Errorf("%s: stderr %q, want one prefix: %q", name, r.stderr, want)
			}
		}
		if runs := history(t, store, "missing"); len(runs) != 0 {
			t.Errorf("a command that does not exist was claimed: %+v", runs)
		}
	})

	t.Run("command not executable", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "script")
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Like a missing command (127), one that is not executable is
		// refused before the claim: no run is recorded.
		for _, name := range []string{path, t.TempDir()} {
			r := runCLI(t, db, nil, "exec", "--source", "noexec", "--", name)
			if r.code != exitCannotRun || r.stdout != "" || !strings.Contains(r.stderr, name) {
				t.Errorf("%s: %+v, want exit 126", name, r)
			}
		}
		if runs := history(t, store, "noexec"); len(runs) != 0 {
			t.Errorf("history %+v, want no run", runs)
		}
	})

	t.Run("interpreter missing", func(t *testing.T) {
		// Executable, so claimed; the kernel's ENOENT for the missing
		// interpreter comes at start: a failed run, and 126, not 127,
		// which says that nothing was recorded.
		path := filepath.Join(t.TempDir(), "script")
		if err := os.WriteFile(path, []byte("#!/no/such/interpreter\necho ran\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, db, nil, "exec", "--source", "badinterp", "--", path)
		if r.code != exitCannotRun || r.stdout != "" {
			t.Errorf("%+v, want exit 126", r)
		}
		if runs := history(t, store, "badinterp"); len(runs) != 1 || runs[0].Status != runclaim.StatusFailed {
			t.Errorf("history %+v, want a failed run", runs)
		}
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"exec", "--", "true"},
			{"exec", "--source", "x"},
			{"exec", "--source", "x", "--"},
			{"exec", "--source", "", "--", "true"},
			{"exec", "--source", "bad\x00source", "--", "true"},
			{"exec", "--source", "x", "--skip-exit-code", "256", "--", "true"},
			{"exec", "--source", "x", "--kill-grace", "-1s", "--", "true"},
			{"exec", "--source", "x", "--kill-grace", "10s", "--", "true"},
			{"exec", "--source", "x", "--lease", "1m", "--heartbeat", "20s", "--kill-grace", "2600ms", "--", "true"},
			{"exec", "--source", "x", "--error-exit-code", "-1", "--", "true"},
			{"exec", "--source", "x", "--lost-exit-code", "256", "--", "true"},
			{"exec", "--source", "x", "--unrecorded-exit-code", "1000", "--", "true"},
			{"exec", "--source", "x", "--lease", "1ms", "--", "true"},
			{"exec", "--source", "x", "--lease", "1s", "--heartbeat", "1s", "--", "true"},
			{"exec", "--source", "x", "--lease", "100ms", "--", "true"},
			{"exec", "--source", "x", "--min-interval", "-1s", "--", "true"},
			{"exec", "--source", "x", "--owner", "a\tb", "--", "true"},
		} {
			if r := runCLI(t, db, nil, args...); r.code != exitUsage {
				t.Errorf("%q: %+v, want exit 2", args, r)
			}
		}
		if runs := history(t, store, "x"); len(runs) != 0 {
			t.Errorf("a bad command line ran: %+v", runs)
		}
	})

	t.Run("database down", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "ran")
		clearEnv(t)
		t.Setenv(envDatabaseURL, "postgres://runclaim:pw@127.0.0.1:1/none?connect_timeout=5")
		r := runInEnv(t, nil, "exec", "--source", "down", "--", "touch", marker)
		if r.code != exitClaimFailed || !strings.Contains(r.stderr, "runclaim exec:") {
			t.Errorf("%+v, want exit %d", r, exitClaimFailed)
		}
		r = runInEnv(t, nil, "exec", "--source", "down", "--error-exit-code", "100", "--", "touch", marker)
		if r.code != 100 {
			t.Errorf("--error-exit-code 100: %+v", r)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("the command ran without a claim")
		}
	})
}

func TestExecSkipped(t *testing.T) {
	db, store := setup(t)
	holder := hold(t, store, "busy", "other-host")
	marker := filepath.Join(t.TempDir(), "ran")
	touch := []string{"--", "touch", marker}

	r := runCLI(t, db, nil, append([]string{"exec", "--source", "busy"}, touch...)...)
	if r.code != exitSkipped || r.stdout != "" {
		t.Errorf("%+v, want exit 75", r)
	}
	if want := fmt.Sprintf(`runclaim exec: skipped: "busy" is held by run %d of other-host since `, holder.ID); !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q lacks %q", r.stderr, want)
	}
	r = runCLI(t, db, nil, append([]string{"exec", "--source", "busy", "--quiet"}, touch...)...)
	if r.code != exitSkipped || r.stderr != "" {
		t.Errorf("--quiet: %+v, want exit 75 and nothing printed", r)
	}
	r = runCLI(t, db, nil, append([]string{"exec", "--source", "busy", "--skip-exit-code", "0", "--quiet"}, touch...)...)
	if r.code != 0 || r.stderr != "" {
		t.Errorf("--skip-exit-code 0: %+v", r)
	}
	r = runCLI(t, db, nil, append([]string{"exec", "--source", "busy", "--skip-exit-code", "3", "--quiet"}, touch...)...)
	if r.code != 3 || r.stderr != "" {
		t.Errorf("--skip-exit-code 3: %+v", r)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran while another holder had the source")
	}
	if runs := history(t, store, "busy"); len(runs) != 1 || runs[0].ID != holder.ID || runs[0].Status != runclaim.StatusRunning {
		t.Errorf("history %+v, want only the holder's run, running", runs)
	}

	// The minimum interval.
	mustRun(t, db, 0, "exec", "--source", "tick", "--", "true")
	r = runCLI(t, db, nil, append([]string{"exec", "--source", "tick", "--min-interval", "1h"}, touch...)...)
	if r.code != exitSkipped || !strings.Contains(r.stderr, `too soon: the minimum interval since the last run of "tick" started has not passed (the longer of --min-interval, 1h0m0s,`) {
		t.Errorf("--min-interval: %+v", r)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran too soon")
	}
	if runs := history(t, store, "tick"); len(runs) != 1 {
		t.Errorf("history %+v, want one run", runs)
	}
}

// TestExecLeaseLost releases the run while the command runs: exec stops
// the command (SIGTERM, then SIGKILL if it ignores that) and exits 70.
func TestExecLeaseLost(t *testing.T) {
	db, store := setup(t)
	for _, tc := range []struct {
		name     string
		script   string
		flags    []string
		grace    string // the --kill-grace given
		code     int
		sigkill  bool
		wantOut  string
		wantLeft string
	}{
		// A kill grace of 5 s (and so a lease of a minute, which bounds
		// it) for the command that stops on SIGTERM: no SIGKILL is
		// needed even when a loaded machine is slow to run its trap.
		{"stops on SIGTERM", `trap 'echo bye; exit 0' TERM; echo started; while :; do sleep 0.05; done`,
			[]string{"--lease", "1m", "--kill-grace", "5s"}, "5s", exitLeaseLost, false, "bye", "exit status 0"},
		{"ignores SIGTERM", `trap '' TERM; echo started; while :; do sleep 0.05; done`,
			[]string{"--lost-exit-code", "99"}, "300ms", 99, true, "", "signal: killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			source := "lost-" + strings.Fields(tc.name)[0]
			out, done, stderr := startStopTest(t, db.DSN, source, tc.script, tc.flags)

			released, err := store.Release(t.Context(), 0, source)
			if err != nil {
				t.Fatal(err)
			}
			var code int
			select {
			case code = <-done:
			case <-time.After(testTimeout):
				t.Fatal("exec did not stop the command after the run was released")
			}
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if tc.wantOut != "" {
				waitLine(t, out, tc.wantOut, nil)
			}
			msgs := stderr.String()
			for _, want := range []string{
				fmt.Sprintf(`runclaim exec: run %d of %q: `, released.ID, source),
				"lease lost; sending SIGTERM to the command, SIGKILL in " + tc.grace + "\n",
				fmt.Sprintf(`the run of %q was lost while the command ran`, source),
				"the command ended with " + tc.wantLeft,
			} {
				if !strings.Contains(msgs, want) {
					t.Errorf("stderr lacks %q:\n%s", want, msgs)
				}
			}
			// Said once: not "run 11 of ...: runclaim: heartbeat run 11:
			// runclaim: lease lost".
			if want := fmt.Sprintf(`runclaim exec: run %d of %q: heartbeat: lease lost;`, released.ID, source); !strings.Contains(msgs, want) ||
				strings.Contains(msgs, "runclaim: ") || strings.Contains(msgs, fmt.Sprintf("heartbeat run %d", released.ID)) {
				t.Errorf("stderr lacks %q, or repeats a prefix:\n%s", want, msgs)
			}
			if got := strings.Contains(msgs, "sending SIGKILL\n"); got != tc.sigkill {
				t.Errorf("SIGKILL sent: %v, want %v:\n%s", got, tc.sigkill, msgs)
			}
			if runs := history(t, store, source); len(runs) != 1 || runs[0].Status != runclaim.StatusReleased {
				t.Errorf("history %+v, want the released run", runs)
			}
		})
	}
}

// readLines sends r's lines on the returned channel, closing it at EOF.
// startStopTest runs 'runclaim exec' on source with the shell script,
// which prints "started" once it runs, and extra flags, on a lease of 3 s
// with a heartbeat every 100 ms and a kill grace of 300 ms (the most that
// lease allows is (3s - 2*100ms)/8 = 350ms). It returns once the script has
// started: the script's output lines, exec's exit code once it returns, and
// exec's standard error.
func startStopTest(t *testing.T, dsn, source, script string, flags []string) (out <-chan string, done chan int, stderr *lockedBuffer) {
	t.Helper()
	clearEnv(t)
	t.Setenv(envDatabaseURL, dsn)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	out = readLines(pr)
	stderr = new(lockedBuffer)
	codes := make(chan int, 1)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	go func() {
		defer pw.Close()
		args := append([]string{"exec", "--source", source, "--lease", "3s", "--heartbeat", "100ms", "--kill-grace", "300ms"}, flags...)
		codes <- run(ctx, append(args, "--", "sh", "-c", script), nil, pw, stderr)
	}()
	waitLine(t, out, "started", codes)
	return out, codes, stderr
}

func readLines(r *os.File) <-chan string {
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// waitLine waits for the line want, failing if lines end first, if the
// command ends without printing it, or after testTimeout. done delivers
// exec's exit code (it may be nil, and must be buffered): when the code
// comes first, the lines the command printed before it ended may still be
// on their way, so they are read to their end, and the code is put back
// for the caller once want is among them.
func waitLine(t *testing.T, lines <-chan string, want string, done chan int) {
	t.Helper()
	timeout := time.NewTimer(testTimeout)
	defer timeout.Stop()
	exited, code, wait := false, 0, done
	for {
		select {
		case l, ok := <-lines:
			switch {
			case ok && l == want:
				if exited {
					done <- code
				}
				return
			case !ok && exited:
				t.Fatalf("exec exited with %d before printing %q", code, want)
			case !ok:
				t.Fatalf("output ended before %q", want)
			}
		case code = <-wait:
			exited, wait = true, nil // a nil channel: no second receive
		case <-timeout.C:
			t.Fatalf("no %q within %v", want, testTimeout)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestExecEnvironment checks what reaches the command's environment: by
// default, and with --no-db-env, exec's own without DATABASE_URL (which may
// hold a password), the PG* variables, RUNCLAIM_TABLE, RUNCLAIM_NAMESPACE
// and RUNCLAIM_SYNCHRONOUS_COMMIT, plus the run's variables; with
// --pass-db-env, exec's own unchanged, plus the run's variables.
func TestExecEnvironment(t *testing.T) {
	db, store := setup(t)
	clearEnv(t) // RUNCLAIM_TABLE and RUNCLAIM_NAMESPACE, set empty
	t.Setenv(envDatabaseURL, db.DSN)
	t.Setenv(envSynchronousCommit, "local")
	t.Setenv("PGPASSWORD", "not-the-password") // the DSN's own wins
	t.Setenv("PGAPPNAME", "cron")
	t.Setenv("JOB_SETTING", "kept")

	envOf := func(out string) map[string]string {
		m := map[string]string{}
		for _, l := range lines(out) {
			k, v, _ := strings.Cut(l, "=")
			m[k] = v
		}
		return m
	}
	base := envOf(strings.Join(os.Environ(), "\n"))
	for i, tc := range []struct {
		flags []string
		pass  bool // the database settings reach the command
	}{
		{nil, false},
		{[]string{"--no-db-env"}, false},
		{[]string{"--pass-db-env"}, true},
	} {
		source := fmt.Sprintf("env-%d", i)
		args := append([]string{"exec", "--source", source, "--owner", "me"}, tc.flags...)
		r := runInEnv(t, nil, append(args, "--", "env")...)
		runs := history(t, store, source)
		if r.code != 0 || len(runs) != 1 {
			t.Fatalf("%q: %+v, history %+v", tc.flags, r, runs)
		}
		want := map[string]string{}
		for k, v := range base {
			removed := strings.HasPrefix(k, "PG") || k == envDatabaseURL || k == envTable || k == envNamespace || k == envSynchronousCommit
			if tc.pass || !removed {
				want[k] = v
			}
		}
		want["RUNCLAIM_RUN_ID"] = fmt.Sprint(runs[0].ID)
		want["RUNCLAIM_SOURCE"] = runs[0].Source
		want["RUNCLAIM_OWNER"] = "me"
		got := envOf(r.stdout)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%q: %s=%q in the command's environment, want %q", tc.flags, k, got[k], v)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%q: %s=%q in the command's environment, want it absent", tc.flags, k, got[k])
			}
		}
		for _, k := range []string{envDatabaseURL, "PGPASSWORD"} {
			if _, ok := got[k]; ok != tc.pass {
				t.Errorf("%q: %s passed: %v, want %v", tc.flags, k, ok, tc.pass)
			}
		}
	}
}

// TestExecDBEnvFlagsConflict: --no-db-env and --pass-db-env together are a
// usage error, and nothing is run.
func TestExecDBEnvFlagsConflict(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	r := runCLI(t, nil, nil, "exec", "--source", "x", "--no-db-env", "--pass-db-env", "--", "touch", marker)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--no-db-env and --pass-db-env") {
		t.Errorf("%+v, want exit %d naming both flags", r, exitUsage)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}
}

// TestExecHelpDocumentsExitCodes checks that --help names every exit code
// flag with its default, and the defaults in the exit code table.
func TestExecHelpDocumentsExitCodes(t *testing.T) {
	r := runCLI(t, nil, nil, "exec", "--help")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	for flag, code := range map[string]int{
		"skip-exit-code":       exitSkipped,
		"error-exit-code":      exitClaimFailed,
		"lost-exit-code":       exitLeaseLost,
		"unrecorded-exit-code": exitUnrecorded,
		"timeout-exit-code":    exitTimedOut,
	} {
		if !regexp.MustCompile(`(?m)^ +--` + flag + ` code +.*\(default ` + fmt.Sprint(code) + `\)$`).MatchString(r.stdout) {
			t.Errorf("--help lacks --%s with its default %d", flag, code)
		}
		if !regexp.MustCompile(`(?m)^  ` + fmt.Sprint(code) + `  .*\n(.*\n)*?.*--` + flag).MatchString(r.stdout) {
			t.Errorf("the exit code table lacks %d with --%s", code, flag)
		}
	}
	for _, want := range []string{"--kill-grace", "at most (lease - 2*heartbeat)/8", "--no-db-env", "--pass-db-env", "runclaim-exec-keeper", "docs/cli.md"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	// The details the help leaves to docs/cli.md are there.
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PR_SET_PDEATHSIG", "runclaim-exec-keeper", "--kill-grace", "setsid"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/cli.md lacks %q, which exec --help leaves to it", want)
		}
	}
}

// TestExecSkipReasonEveryReason: exec says, for every reason runclaim
// lists (runclaim.SkipReasons), a line of its own, never the line of a
// claim in flight that a reason exec does not know would get.
func TestExecSkipReasonEveryReason(t *testing.T) {
	inFlight := skipReason(&runclaim.NotClaimedError{Source: "s", Reason: runclaim.ErrAlreadyRunning}, 0)
	seen := map[string]bool{inFlight: true}
	for _, r := range runclaim.SkipReasons {
		nc := &runclaim.NotClaimedError{Source: "s", Reason: r.Err, Key: "k"}
		if r.Err == runclaim.ErrAlreadyRunning {
			nc.Holder = &runclaim.RunInfo{ID: 1, Source: "s", Owner: "o"}
		}
		line := skipReason(nc, 0)
		if seen[line] {
			t.Errorf("a skip for %v (%s) says %q, as another reason does", r.Err, r.Label, line)
		}
		seen[line] = true
	}
}
