package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

var (
	binBuild *exec.Cmd // the go build started by startBuild
	binDir   string    // where it builds
	binErr   error     // why there is no binary
	binOnce  sync.Once // waits for binBuild
)

// startBuild starts building the runclaim binary in the background, so
// that the build overlaps the in-process tests. TestMain calls it. Its
// output goes to a file, so that no goroutine copies it (goleak checks
// for goroutines when the tests end, maybe before the build does).
func startBuild() {
	goTool, err := exec.LookPath("go")
	if err != nil {
		binErr = fmt.Errorf("the go tool is not on $PATH: %w", err)
		return
	}
	if binDir, binErr = os.MkdirTemp("", "runclaim-bin-"); binErr != nil {
		return
	}
	log, err := os.Create(filepath.Join(binDir, "build.log"))
	if err != nil {
		binErr = err
		return
	}
	defer log.Close()
	binBuild = exec.Command(goTool, "build", "-o", filepath.Join(binDir, "runclaim"), ".")
	binBuild.Stdout, binBuild.Stderr = log, log
	if err := binBuild.Start(); err != nil {
		binErr, binBuild = fmt.Errorf("go build: %w", err), nil
	}
}

// waitBuild waits for the build startBuild started.
func waitBuild() {
	binOnce.Do(func() {
		if binBuild == nil {
			return
		}
		if err := binBuild.Wait(); err != nil {
			out, _ := os.ReadFile(filepath.Join(binDir, "build.log"))
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
}

// binary returns the path of the built binary.
func binary(t *testing.T) string {
	t.Helper()
	waitBuild()
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "runclaim")
}

// removeBinary waits for the build and removes what it built.
func removeBinary() {
	waitBuild()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// setupProcess is setup for tests that run only the binary: it migrates
// with the library, so that they need no t.Setenv and may run in parallel.
func setupProcess(t *testing.T) (*pgtest.DB, *runclaim.PostgresStore) {
	t.Helper()
	db := pgtest.New(t)
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return db, store
}

// process is the runclaim binary running as a subprocess.
type process struct {
	cmd    *exec.Cmd
	stdin  *os.File // write end of its stdin
	lines  <-chan string
	stderr bytes.Buffer
	done   chan int
}

// startProcess starts "runclaim args..." against db. Its stdout is a pipe
// whose lines arrive on p.lines, which closes only when every process that
// inherited it (the command's children too) has exited.
func startProcess(t *testing.T, db *pgtest.DB, args ...string) *process {
	t.Helper()
	return startCommand(t, db, exec.Command(binary(t), args...))
}

// startCommand is startProcess for a command that runs the runclaim
// binary (under a wrapper such as timeout, or with its own SysProcAttr):
// it sets the command's environment and standard streams and starts it.
func startCommand(t *testing.T, db *pgtest.DB, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{cmd: cmd, done: make(chan int, 1)}
	p.cmd.Env = append(os.Environ(), envDatabaseURL+"="+db.DSN, envTable+"=", envNamespace+"=")
	p.cmd.Stderr = &p.stderr
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdin, p.cmd.Stdout, p.stdin = inR, outW, inW
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	p.lines = readLines(outR)
	go func() {
		err := p.cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
		}
		p.done <- code
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		p.cmd.Process.Kill()
		outR.Close()
	})
	return p
}

// wait returns the exit code, failing after testTimeout.
func (p *process) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-p.done:
		return code
	case <-time.After(testTimeout):
		t.Fatalf("runclaim %v did not exit within %v; stderr:\n%s", p.cmd.Args[1:], testTimeout, p.stderr.String())
		return 0
	}
}

// drain returns the remaining output lines once stdout is closed by all
// its holders, failing after testTimeout (a process of the command still
// running).
func (p *process) drain(t *testing.T) []string {
	t.Helper()
	var out []string
	timeout := time.After(testTimeout)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return out
			}
			out = append(out, l)
		case <-timeout:
			t.Fatalf("stdout still open after %v: a process of the command is still running", testTimeout)
		}
	}
}

// TestExecProcessSignals runs the built binary and signals it as cron,
// systemd or an operator would: the signal reaches the command's whole
// process group, and exec exits with the command's code.
func TestExecProcessSignals(t *testing.T) {
	t.Parallel()
	db, store := setupProcess(t)
	const loop = `while :; do sleep 0.05; done`
	for _, tc := range []struct {
		name    string
		script  string
		signals []syscall.Signal
		acks    []string // a line the command prints after each signal, if any
		code    int
		status  runclaim.Status
		err     string
	}{
		{"SIGTERM trapped", `trap 'echo got TERM; exit 3' TERM; echo ready; ` + loop,
			[]syscall.Signal{syscall.SIGTERM}, []string{"got TERM"}, 3, runclaim.StatusFailed, "exit status 3"},
		{"SIGINT kills", `echo ready; exec sleep 30`,
			[]syscall.Signal{syscall.SIGINT}, nil, 130, runclaim.StatusFailed, "signal: interrupt"},
		{"SIGHUP then SIGQUIT", `trap 'echo got HUP' HUP; trap 'echo got QUIT; exit 0' QUIT; echo ready; ` + loop,
			[]syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT}, []string{"got HUP", "got QUIT"}, 0, runclaim.StatusSucceeded, ""},
		{"SIGTERM reaches grandchildren", `sleep 30 & echo ready; wait`,
			[]syscall.Signal{syscall.SIGTERM}, nil, 143, runclaim.StatusFailed, "signal: terminated"},
		{"killed by itself", `echo ready; kill -9 $$`, nil, nil, 137, runclaim.StatusFailed, "signal: killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			source := strings.ReplaceAll(tc.name, " ", "-")
			p := startProcess(t, db, "exec", "--source", source, "--", "sh", "-c", tc.script)
			waitLine(t, p.lines, "ready", p.done)
			for i, sig := range tc.signals {
				if err := p.cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				if tc.acks != nil {
					waitLine(t, p.lines, tc.acks[i], p.done)
				}
			}
			if code := p.wait(t); code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, p.stderr.String())
			}
			p.drain(t) // every process of the command has exited
			runs := history(t, store, source)
			if len(runs) != 1 || runs[0].Status != tc.status || runs[0].Error != tc.err {
				t.Errorf("history %+v, want one %s run with error %q", runs, tc.status, tc.err)
			}
		})
	}
}

// TestExecProcessRace runs two binaries for one source, as two hosts' cron
// would: the second is skipped while the first runs, and its command does
// not run.
func TestExecProcessRace(t *testing.T) {
	t.Parallel()
	db, store := setupProcess(t)
	first := startProcess(t, db, "exec", "--source", "nightly", "--", "sh", "-c", "echo first; read line; echo done")
	waitLine(t, first.lines, "first", first.done)

	second := startProcess(t, db, "exec", "--source", "nightly", "--", "echo", "second ran")
	if code := second.wait(t); code != exitSkipped {
		t.Errorf("second: exit code %d, want %d", code, exitSkipped)
	}
	if out := second.drain(t); len(out) != 0 {
		t.Errorf("second's command ran: %q", out)
	}
	if !strings.Contains(second.stderr.String(), `runclaim exec: skipped: "nightly" is held by run`) {
		t.Errorf("second's stderr: %q", second.stderr.String())
	}

	fmt.Fprintln(first.stdin, "go on")
	if code := first.wait(t); code != 0 {
		t.Errorf("first: exit code %d; stderr:\n%s", code, first.stderr.String())
	}
	if out := first.drain(t); len(out) != 1 || out[0] != "done" {
		t.Errorf("first's output %q", out)
	}
	if runs := history(t, store, "nightly"); len(runs) != 1 || runs[0].Status != runclaim.StatusSucceeded {
		t.Errorf("history %+v, want one succeeded run", runs)
	}
}

// TestExecProcessSignalBeforeStart signals exec while it is still
// claiming: exec stops without running the command and exits 128+N.
func TestExecProcessSignalBeforeStart(t *testing.T) {
	t.Parallel()
	// A server that accepts connections and never answers, so that the
	// claim hangs in the connection's startup.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if conn, err := l.Accept(); err == nil {
			accepted <- conn
		}
	}()

	p := startProcess(t, &pgtest.DB{DSN: "postgres://u:p@" + l.Addr().String() + "/db?sslmode=disable&connect_timeout=60"},
		"exec", "--source", "early", "--", "echo", "ran")
	select {
	case conn := <-accepted:
		defer conn.Close()
	case code := <-p.done:
		t.Fatalf("exec exited with %d before connecting; stderr:\n%s", code, p.stderr.String())
	case <-time.After(testTimeout):
		t.Fatal("exec did not connect")
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code %d, want 143; stderr:\n%s", code, p.stderr.String())
	}
	if out := p.drain(t); len(out) != 0 {
		t.Errorf("the command ran: %q", out)
	}
	if want := "runclaim exec: interrupted by SIGTERM before the command started"; !strings.Contains(p.stderr.String(), want) {
		t.Errorf("stderr %q lacks %q", p.stderr.String(), want)
	}
}
