//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/tcpproxy"
)

// alive reports whether the process pid exists and is not a zombie.
func alive(pid int) bool {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			return s[i+2] != 'Z' && s[i+2] != 'X'
		}
		return true
	} else if _, statErr := os.Stat("/proc/self/stat"); statErr == nil {
		return false // a /proc without the process
	}
	return syscall.Kill(pid, 0) != syscall.ESRCH
}

// killIfFailed kills what is left of the processes pids that the test
// started, if it failed.
func killIfFailed(t *testing.T, pids ...int) {
	if !t.Failed() {
		return
	}
	for _, pid := range pids {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// waitDead polls until none of pids is alive, failing after testTimeout.
func waitDead(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		var left []int
		for _, pid := range pids {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v still alive %v after their supervisor was killed", left, testTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestExecProcessSupervisorKilled kills runclaim exec with SIGKILL, as the
// OOM killer or a hard stop would, while its command runs with a child of
// its own: both must die with it, while the run's lease still keeps every
// other host out, so that the next host's run, once the lease has ended,
// cannot overlap them.
func TestExecProcessSupervisorKilled(t *testing.T) {
	t.Parallel()
	db, store := setupProcess(t)
	const lease = 4 * time.Second
	p := startProcess(t, db, "exec", "--source", "killed", "--lease", lease.String(), "--",
		"sh", "-c", `sleep 300 & echo "$$ $!"; wait`)
	var child, grandchild int
	select {
	case l, ok := <-p.lines:
		if _, err := fmt.Sscan(l, &child, &grandchild); !ok || err != nil {
			t.Fatalf("first line %q, %v: want two PIDs", l, err)
		}
	case code := <-p.done:
		t.Fatalf("exec exited with %d; stderr:\n%s", code, p.stderr.String())
	case <-time.After(testTimeout):
		t.Fatal("the command did not start")
	}
	t.Cleanup(func() { killIfFailed(t, child, grandchild) })
	if !alive(child) || !alive(grandchild) {
		t.Fatalf("child %d alive %v, grandchild %d alive %v, before the kill", child, alive(child), grandchild, alive(grandchild))
	}

	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, child, grandchild)
	// The lease has not ended yet, so no other host can have started.
	other, err := runclaim.New(store, runclaim.WithOwner("other-host"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Claim(t.Context(), "killed"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("claim right after the command died: %v; want ErrAlreadyRunning (the lease of %v should still hold)", err, lease)
	}

	// The next host's cron runs once the lease has ended.
	deadline := time.Now().Add(lease + testTimeout)
	for {
		next := startProcess(t, db, "exec", "--source", "killed", "--quiet", "--", "echo", "next host ran")
		code := next.wait(t)
		if code == 0 {
			if out := next.drain(t); len(out) != 1 || out[0] != "next host ran" {
				t.Fatalf("next host's output %q", out)
			}
			break
		}
		if code != exitSkipped || time.Now().After(deadline) {
			t.Fatalf("next host: exit code %d; stderr:\n%s", code, next.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	runs := history(t, store, "killed")
	if len(runs) != 2 || runs[1].Status != runclaim.StatusExpired || runs[0].Status != runclaim.StatusSucceeded ||
		runs[0].StartedAt.Before(runs[1].LeaseUntil) {
		t.Fatalf("history %+v; want the killed run expired and the next one succeeded after its lease", runs)
	}
}

// proxiedDSN returns db's DSN with its host and port replaced by p's.
func proxiedDSN(t *testing.T, db *pgtest.DB, p *tcpproxy.Proxy) string {
	t.Helper()
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr().String()
	return u.String()
}

// startProxy starts a proxy to db's server, closed when the test ends.
func startProxy(t *testing.T, db *pgtest.DB) *tcpproxy.Proxy {
	t.Helper()
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tcpproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestExecKilledBeforeLeaseEnds cuts exec off from the database while its
// command ignores SIGTERM: heartbeats fail, exec stops the command before
// the lease ends by its own clock, and the derived kill grace makes the
// SIGKILL land while the lease, by the database clock, still keeps every
// other host out. (The database runs on this machine, so its clock and
// this process's agree.)
func TestExecKilledBeforeLeaseEnds(t *testing.T) {
	db, store := setup(t)
	p := startProxy(t, db)
	clearEnv(t)
	t.Setenv(envDatabaseURL, proxiedDSN(t, db, p))
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	out := readLines(pr)
	var stderr lockedBuffer
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*testTimeout)
	defer cancel()
	// ExpiryMargin is (4s - 2*200ms)/4 = 900ms; the kill grace is half that.
	const lease, heartbeat, grace = 4 * time.Second, 200 * time.Millisecond, 450 * time.Millisecond
	go func() {
		defer pw.Close()
		done <- run(ctx, []string{"exec", "--source", "partitioned", "--lease", lease.String(), "--heartbeat", heartbeat.String(),
			"--", "sh", "-c", `trap '' TERM; echo $$; while :; do sleep 0.05; done`}, nil, pw, &stderr)
	}()
	var pid int
	select {
	case l := <-out:
		if _, err := fmt.Sscan(l, &pid); err != nil {
			t.Fatalf("first line %q: %v", l, err)
		}
	case code := <-done:
		t.Fatalf("exec exited with %d; stderr:\n%s", code, stderr.String())
	case <-ctx.Done():
		t.Fatal("the command did not start")
	}
	t.Cleanup(func() { killIfFailed(t, pid) })

	p.Cut()
	var died time.Time
	for alive(pid) {
		if ctx.Err() != nil {
			t.Fatalf("the command is still running; stderr:\n%s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	died = time.Now()
	if code := <-done; code != exitLeaseLost {
		t.Errorf("exit code %d, want %d", code, exitLeaseLost)
	}
	for _, want := range []string{fmt.Sprintf("SIGKILL in %v\n", grace), "sending SIGKILL\n"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}

	p.Pass()
	runs := history(t, store, "partitioned")
	if len(runs) != 1 || runs[0].Status != runclaim.StatusRunning {
		t.Fatalf("history %+v; want the run, still running until its lease ends", runs)
	}
	if !died.Before(runs[0].LeaseUntil) {
		t.Fatalf("the command died at %v, after its lease ended at %v", died, runs[0].LeaseUntil)
	}
	t.Logf("the command died %v before the lease ended", runs[0].LeaseUntil.Sub(died))
}

// TestExecUnrecorded cuts exec off from the database while its command
// runs: the command ends, its outcome cannot be recorded, and exec exits
// with --unrecorded-exit-code, saying how the command ended.
func TestExecUnrecorded(t *testing.T) {
	db, store := setup(t)
	p := startProxy(t, db)
	clearEnv(t)
	t.Setenv(envDatabaseURL, proxiedDSN(t, db, p))
	for _, tc := range []struct {
		source string
		flags  []string
		script string
		code   int
		status string
	}{
		{"unrecorded-ok", nil, "exit 0", exitUnrecorded, "exit status 0"},
		{"unrecorded-fail", []string{"--unrecorded-exit-code", "42"}, "exit 3", 42, "exit status 3"},
	} {
		t.Run(tc.source, func(t *testing.T) {
			p.Pass()
			inR, inW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer inR.Close()
			defer inW.Close()
			outR, outW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer outR.Close()
			out := readLines(outR)
			var stderr lockedBuffer
			done := make(chan int, 1)
			go func() {
				defer outW.Close()
				args := append([]string{"exec", "--source", tc.source}, tc.flags...)
				done <- run(t.Context(), append(args, "--", "sh", "-c", "echo started; read line; "+tc.script), inR, outW, &stderr)
			}()
			waitLine(t, out, "started", done)
			p.Cut()
			fmt.Fprintln(inW, "go on")
			var code int
			select {
			case code = <-done:
			case <-time.After(testTimeout):
				t.Fatal("exec did not exit")
			}
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if want := "runclaim exec: the outcome was not recorded, so the run stays running until its lease passes; the command ended with " + tc.status; !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
			}
			p.Pass()
			if runs := history(t, store, tc.source); len(runs) != 1 || runs[0].Status != runclaim.StatusRunning {
				t.Errorf("history %+v; want the run, still running", runs)
			}
		})
	}
}

// TestKeeperExecGoneAtStart starts a keeper whose exec has exited already
// (its lifeline closed), as when exec is killed just after starting it:
// the keeper either does not start the command or kills its whole group,
// and exits within testTimeout, leaving no process of the command behind.
func TestKeeperExecGoneAtStart(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	k, _, repR, done := startKeeper(t, time.Now().Add(time.Hour), pidFile, true)
	report, waitErr := waitKeeper(t, k, done, repR, "exit after starting without exec")
	lines := strings.Split(strings.TrimSuffix(string(report), "\n"), "\n")
	if group, ok := strings.CutPrefix(lines[0], "started "); ok {
		g, err := strconv.Atoi(group)
		if err != nil {
			t.Fatalf("report %q", report)
		}
		if syscall.Kill(-g, 0) != syscall.ESRCH {
			_ = syscall.Kill(-g, syscall.SIGKILL)
			t.Fatalf("the keeper exited while processes of the command's group %d still run; report %q", g, report)
		}
		if waitErr != nil {
			t.Fatalf("the keeper: %v; report %q", waitErr, report)
		}
		t.Logf("the command started and was killed: %q", report)
	} else if lines[0] != "keeper-error exec exited before the command started" || k.ProcessState.ExitCode() != 1 {
		t.Fatalf("the keeper: %v; report %q", waitErr, report)
	}
	if b, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command's child %d still runs after the keeper exited", pid)
		}
	}
}

// TestKeeperStopsAtItsTime starts a keeper whose exec is alive (its
// lifeline open) but says nothing more, as a stopped exec does: once the
// time to stop it was given has passed, the keeper reports lease-expired,
// kills the command's whole group and exits, though exec still holds the
// lifeline. Until then, each later time written on the lifeline keeps the
// command running.
func TestKeeperStopsAtItsTime(t *testing.T) {
	// The first time is a step away; it is moved on three times, each a
	// step later, before it passes, and then no more. A machine so busy
	// that the keeper starts only after its first time has passed makes
	// the keeper refuse to start the command (it cannot know the lease
	// held): that is the machine's delay, not a fault, and the case runs
	// again with a longer step.
	for step := 300 * time.Millisecond; step <= 5*time.Second; step *= 4 {
		if keeperStopsAtItsTime(t, step) {
			return
		}
		t.Logf("the keeper started after its first time to stop, %v away; again with a longer step", step)
	}
	t.Fatal("the keeper never started the command, even with its first time to stop 4.8s away")
}

// keeperStopsAtItsTime runs TestKeeperStopsAtItsTime's case with step,
// and reports false, having asserted nothing, if the keeper started too
// late for it.
func keeperStopsAtItsTime(t *testing.T, step time.Duration) bool {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	start := time.Now()
	k, lifeW, repR, done := startKeeper(t, start.Add(step), pidFile, false)
	defer lifeW.Close()
	last := start.Add(step)
	for i := 2; i <= 4; i++ {
		time.Sleep(step / 2)
		last = start.Add(time.Duration(i) * step)
		if _, err := fmt.Fprintf(lifeW, "until %d\n", monoOf(last)); err != nil {
			if strings.Contains(err.Error(), "broken pipe") {
				break // the keeper has exited: its report says why
			}
			t.Fatal(err)
		}
	}
	report, waitErr := waitKeeper(t, k, done, repR, "stop the command after its last time")
	if strings.Contains(string(report), "could not be known held when the command was to start") {
		return false
	}
	if ended := time.Now(); ended.Before(last) {
		t.Errorf("the keeper stopped the command at %v, before its last time to stop, %v", ended.Sub(start), last.Sub(start))
	}
	if !strings.Contains(string(report), "lease-expired\n") || waitErr != nil {
		t.Errorf("the keeper: %v; report %q, want lease-expired", waitErr, report)
	}
	if pid := readPID(t, pidFile); alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the command's child %d still runs after the keeper exited", pid)
	}
	return true
}

// startKeeper starts a keeper, as exec would, with until as its time to
// stop, running a shell whose background child writes its PID to
// pidFile; with execGone, its lifeline is closed before it starts, as
// when exec dies at once. It returns the keeper, the write end of its
// lifeline (exec's; closed with execGone), the read end of its reports,
// and a channel that gets its Wait's error.
func startKeeper(t *testing.T, until time.Time, pidFile string, execGone bool) (k *exec.Cmd, lifeW, repR *os.File, done chan error) {
	t.Helper()
	path, err := keeperPath()
	if err != nil {
		t.Fatal(err)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repR.Close() })
	k = &exec.Cmd{Path: path, Args: []string{keeperName, "until=" + strconv.FormatInt(monoOf(until), 10),
		"/bin/sh", "sh", "-c", `sleep 300 & echo $! > "$1"; wait`, "sh", pidFile},
		ExtraFiles: []*os.File{lifeR, repW}, SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	if execGone {
		lifeW.Close()
	}
	err = k.Start()
	lifeR.Close()
	repW.Close()
	if err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- k.Wait() }()
	return k, lifeW, repR, done
}

// waitKeeper waits for the keeper k that startKeeper started to exit, and
// returns all it reported and its Wait's error. It kills it and fails the
// test if it has not exited within testTimeout; what says what it should
// have done.
func waitKeeper(t *testing.T, k *exec.Cmd, done <-chan error, repR *os.File, what string) ([]byte, error) {
	t.Helper()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-time.After(testTimeout):
		_ = k.Process.Kill()
		<-done
		t.Fatalf("the keeper did not %s within %v", what, testTimeout)
	}
	report, err := io.ReadAll(repR)
	if err != nil {
		t.Fatal(err)
	}
	return report, waitErr
}
