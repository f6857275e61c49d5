//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// The tests below check the rule that a run ends only when no process of
// the command's process group is left. Their command is the one that
// showed the fault: a shell whose background child ignores SIGTERM,
//
//	sh -c 'sh -c "trap \"\" TERM; exec sleep 41" & wait'
//
// with the child writing its PID to a file first, so that the test can
// check that it is dead at the moment exec returns.

// groupScript is the shell script of that command: $1 is the file the
// background child writes its PID to; the script prints "started" once
// the child is ready, then does end ("wait" or "exit 0").
func groupScript(end string) string {
	return `sh -c 'trap "" TERM; echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 41' child "$1" &
until [ -s "$1" ]; do sleep 0.01; done
echo started
` + end
}

// readPID reads the PID that the command's background child wrote to file.
func readPID(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s holds %q: %v", file, b, err)
	}
	return pid
}

// outFile is a file for exec's stdout or stderr. Each test gives exec
// files, not pipes or buffers, so that exec's return is not delayed by
// copying output that the background child holds open (a pipe's copy waits
// up to the kill grace for it, which would hide the fault behind a race).
func outFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// contents is what was written to f.
func contents(t *testing.T, f *os.File) string {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFile waits until the command's child has written file, failing if
// exec returns first or after testTimeout.
func waitFile(t *testing.T, file string, done <-chan int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		if _, err := os.Stat(file); err == nil {
			return
		}
		select {
		case code := <-done:
			t.Fatalf("exec exited with %d before the command's child started", code)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command's child did not start within %v", testTimeout)
		}
	}
}

// TestExecGroupLostRun releases the run while the command's background
// child ignores SIGTERM: the command's shell dies at the SIGTERM, and exec
// must still send SIGKILL to the group and wait for the child before it
// returns.
func TestExecGroupLostRun(t *testing.T) {
	db, store := setup(t)
	clearEnv(t)
	t.Setenv(envDatabaseURL, db.DSN)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	stdout, stderr := outFile(t, "stdout"), outFile(t, "stderr")
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*testTimeout)
	defer cancel()
	go func() {
		// A lease of 3 s with a heartbeat every 100 ms allows a kill grace
		// of up to (3s - 2*100ms)/8 = 350ms.
		done <- run(ctx, []string{"exec", "--source", "group-lost", "--lease", "3s", "--heartbeat", "100ms", "--kill-grace", "300ms",
			"--", "sh", "-c", groupScript("wait"), "sh", pidFile}, nil, stdout, stderr)
	}()
	waitFile(t, pidFile, done)
	child := readPID(t, pidFile)
	t.Cleanup(func() { killIfFailed(t, child) })

	if _, err := store.Release(t.Context(), 0, "group-lost"); err != nil {
		t.Fatal(err)
	}
	var code int
	select {
	case code = <-done:
	case <-ctx.Done():
		t.Fatal("exec did not return after the run was released")
	}
	if alive(child) {
		t.Fatalf("exec returned (exit code %d) while the command's background child %d still runs; stderr:\n%s", code, child, contents(t, stderr))
	}
	if code != exitLeaseLost {
		t.Errorf("exit code %d, want %d; stderr:\n%s", code, exitLeaseLost, contents(t, stderr))
	}
	if msgs := contents(t, stderr); !strings.Contains(msgs, "sending SIGKILL") {
		t.Errorf("stderr does not say SIGKILL was sent:\n%s", msgs)
	}
}

// TestExecGroupLeaseLapsed cuts exec off from the database while the
// command's background child ignores SIGTERM: heartbeats fail, exec stops
// the group before the lease ends by its own clock, and the child must be
// dead when exec returns, while the lease, by the database clock, still
// keeps every other host out. (The database runs on this machine, so its
// clock and this process's agree.)
func TestExecGroupLeaseLapsed(t *testing.T) {
	db, store := setup(t)
	proxy := startProxy(t, db)
	clearEnv(t)
	t.Setenv(envDatabaseURL, proxiedDSN(t, db, proxy))
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	stdout, stderr := outFile(t, "stdout"), outFile(t, "stderr")
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*testTimeout)
	defer cancel()
	// ExpiryMargin is (4s - 2*200ms)/4 = 900ms; the kill grace is half that.
	go func() {
		done <- run(ctx, []string{"exec", "--source", "group-lapsed", "--lease", "4s", "--heartbeat", "200ms",
			"--", "sh", "-c", groupScript("wait"), "sh", pidFile}, nil, stdout, stderr)
	}()
	waitFile(t, pidFile, done)
	child := readPID(t, pidFile)
	t.Cleanup(func() { killIfFailed(t, child) })

	proxy.Cut()
	var code int
	select {
	case code = <-done:
	case <-ctx.Done():
		t.Fatal("exec did not return after its heartbeats failed")
	}
	returned := time.Now()
	if alive(child) {
		t.Fatalf("exec returned (exit code %d) while the command's background child %d still runs; stderr:\n%s", code, child, contents(t, stderr))
	}
	if code != exitLeaseLost {
		t.Errorf("exit code %d, want %d; stderr:\n%s", code, exitLeaseLost, contents(t, stderr))
	}
	proxy.Pass()
	runs := history(t, store, "group-lapsed")
	if len(runs) != 1 || runs[0].Status != runclaim.StatusRunning {
		t.Fatalf("history %+v; want the run, still running until its lease ends", runs)
	}
	if !returned.Before(runs[0].LeaseUntil) {
		t.Fatalf("exec returned, its command's group gone, at %v, after the lease ended at %v", returned, runs[0].LeaseUntil)
	}
	t.Logf("exec returned, the command's group gone, %v before the lease ended", runs[0].LeaseUntil.Sub(returned))
}

// TestExecGroupExitWithChild lets the command exit 0 while its background
// child runs on, ignoring SIGTERM: exec stops the child (SIGTERM, then
// SIGKILL after the kill grace) before it records the outcome and returns.
func TestExecGroupExitWithChild(t *testing.T) {
	db, store := setup(t)
	clearEnv(t)
	t.Setenv(envDatabaseURL, db.DSN)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	stdout, stderr := outFile(t, "stdout"), outFile(t, "stderr")
	ctx, cancel := context.WithTimeout(t.Context(), 2*testTimeout)
	defer cancel()
	code := run(ctx, []string{"exec", "--source", "group-exit", "--kill-grace", "300ms",
		"--", "sh", "-c", groupScript("exit 0"), "sh", pidFile}, nil, stdout, stderr)
	child := readPID(t, pidFile)
	t.Cleanup(func() { killIfFailed(t, child) })
	msgs := contents(t, stderr)
	if alive(child) {
		t.Fatalf("exec returned (exit code %d) while the command's background child %d still runs; stderr:\n%s", code, child, msgs)
	}
	if code != 0 {
		t.Errorf("exit code %d, want 0; stderr:\n%s", code, msgs)
	}
	for _, want := range []string{
		"the command ended with exit status 0, but processes of its group still run; sending SIGTERM to them, SIGKILL in 300ms\n",
		"sending SIGKILL\n",
	} {
		if !strings.Contains(msgs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, msgs)
		}
	}
	if runs := history(t, store, "group-exit"); len(runs) != 1 || runs[0].Status != runclaim.StatusSucceeded {
		t.Errorf("history %+v, want one succeeded run", runs)
	}
}

// TestExecGroupNothingLeft checks the common case stays quiet: a command
// whose background child ends before it does gets no signal.
func TestExecGroupNothingLeft(t *testing.T) {
	db, _ := setup(t)
	r := runCLI(t, db, nil, "exec", "--source", "group-none", "--", "sh", "-c", "sleep 0.01 & wait; echo done")
	if r.code != 0 || r.stdout != "done\n" || r.stderr != "" {
		t.Errorf("exit code %d, stdout %q, stderr %q; want 0, done, nothing", r.code, r.stdout, r.stderr)
	}
}

// TestExecProcessGroupSIGTERM sends SIGTERM to exec, as systemd or an
// operator stopping it would, while the command's background child
// ignores SIGTERM: the shell dies, and exec exits only once the child is
// gone too.
func TestExecProcessGroupSIGTERM(t *testing.T) {
	t.Parallel()
	db, store := setupProcess(t)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	stderr := outFile(t, "stderr")
	// Not startProcess: its pipes would make the wait for exec last as
	// long as the child holds them.
	cmd := exec.Command(binary(t), "exec", "--source", "group-sigterm", "--", "sh", "-c", groupScript("wait"), "sh", pidFile)
	cmd.Env = append(os.Environ(), envDatabaseURL+"="+db.DSN, envTable+"=", envNamespace+"=")
	cmd.Stdout, cmd.Stderr = outFile(t, "stdout"), stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		_ = cmd.Wait()
		done <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	waitFile(t, pidFile, done)
	child := readPID(t, pidFile)
	t.Cleanup(func() { killIfFailed(t, child) })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var code int
	select {
	case code = <-done:
		done <- code // for the cleanup
	case <-time.After(testTimeout):
		t.Fatalf("exec did not exit within %v of SIGTERM; stderr:\n%s", testTimeout, contents(t, stderr))
	}
	if alive(child) {
		t.Fatalf("exec exited (exit code %d) while the command's background child %d still runs; stderr:\n%s", code, child, contents(t, stderr))
	}
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code %d, want 143; stderr:\n%s", code, contents(t, stderr))
	}
	if runs := history(t, store, "group-sigterm"); len(runs) != 1 || runs[0].Status != runclaim.StatusFailed || runs[0].Error != "signal: terminated" {
		t.Errorf("history %+v, want one failed run with error %q", runs, "signal: terminated")
	}
}

// TestExecHelpGroupRule checks that exec's help states the group rule and
// what is out of its reach.
func TestExecHelpGroupRule(t *testing.T) {
	r := runCLI(t, nil, nil, "exec", "--help")
	help := strings.Join(strings.Fields(r.stdout), " ")
	for _, want := range []string{
		"The run ends only when no process of the command's process group is left.",
		"Out of reach: a process that leaves the group (setsid, setpgid, a daemon)",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestExecProcessGroupKilled kills runclaim exec together with its process
// group, as "timeout -s KILL" does when its time is up and as a supervisor
// does with kill -9 -- -PGID, while the command runs with a background
// child: the keeper must survive the kill, kill the command's whole group,
// and only then exit, while the lease still keeps every other host out.
func TestExecProcessGroupKilled(t *testing.T) {
	t.Parallel()
	db, store := setupProcess(t)
	// A lease long enough that a busy machine's delays do not reach its
	// end; a run that lasted longer would fail the test anyway.
	const lease = 10 * time.Second
	const script = `sleep 300 & echo "$$ $!"; wait`
	for _, tc := range []struct {
		name  string
		start func(args ...string) *exec.Cmd
		kill  func(t *testing.T, p *process)
	}{
		{
			// exec leads a group of its own, as under a supervisor that
			// starts each job so, and the group gets SIGKILL.
			name: "kill -9 -- -PGID",
			start: func(args ...string) *exec.Cmd {
				cmd := exec.Command(binary(t), args...)
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				return cmd
			},
			kill: func(t *testing.T, p *process) {
				if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			// GNU timeout puts itself and exec in a group of its own, and
			// when its time is up (SIGALRM) sends the signal to exec and
			// then to that group, itself included.
			name: "timeout -s KILL",
			start: func(args ...string) *exec.Cmd {
				path, err := exec.LookPath("timeout")
				if err != nil {
					t.Skip("no timeout(1) on $PATH")
				}
				return exec.Command(path, append([]string{"-s", "KILL", "1h", binary(t)}, args...)...)
			},
			kill: func(t *testing.T, p *process) {
				if err := p.cmd.Process.Signal(syscall.SIGALRM); err != nil {
					t.Fatal(err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			source := "group-killed-" + strings.NewReplacer(" ", "", "-", "").Replace(tc.name)
			p := startCommand(t, db, tc.start("exec", "--source", source, "--lease", lease.String(), "--", "sh", "-c", script))
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
			group, err := syscall.Getpgid(child)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if t.Failed() {
					_ = syscall.Kill(-group, syscall.SIGKILL)
				}
				killIfFailed(t, child, grandchild)
			})
			if !alive(child) || !alive(grandchild) {
				t.Fatalf("child %d alive %v, grandchild %d alive %v, before the kill", child, alive(child), grandchild, alive(grandchild))
			}

			tc.kill(t, p)
			waitDead(t, child, grandchild)
			deadline := time.Now().Add(testTimeout)
			for syscall.Kill(-group, 0) != syscall.ESRCH {
				if time.Now().After(deadline) {
					t.Fatalf("processes of the command's group %d still run %v after exec was killed", group, testTimeout)
				}
				time.Sleep(10 * time.Millisecond)
			}
			gone := time.Now()
			// Every process that held exec's stdout, the keeper included,
			// has exited.
			p.drain(t)

			runs := history(t, store, source)
			if len(runs) != 1 || runs[0].Status != runclaim.StatusRunning {
				t.Fatalf("history %+v; want the run, still running until its lease ends", runs)
			}
			if !gone.Before(runs[0].LeaseUntil) {
				t.Fatalf("the command's group was gone at %v, after the lease ended at %v", gone, runs[0].LeaseUntil)
			}
			t.Logf("the command's group was gone %v before the lease ended", runs[0].LeaseUntil.Sub(gone))
		})
	}
}
