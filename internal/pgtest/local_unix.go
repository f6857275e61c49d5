//go:build linux

package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/runclaim/runclaim/internal/pgbin"
)

// localServer is a server started from the binaries, in a data directory
// of its own that goes with it.
type localServer struct {
	bin  string
	root string // holds the data directory and the log
	cmd  *exec.Cmd
	done chan struct{}
}

// startLocal initialises a throwaway cluster with the binaries of major
// (any, if 0) and starts it on a free port of 127.0.0.1, with the
// password of a container's server (scram-sha-256 over TCP): the server of a machine with PostgreSQL installed and no
// container to be had. Its data directory is under /dev/shm with
// PGTEST_TMPFS=1.
func startLocal(major int) (*Server, error) {
	bin, err := pgbin.BinDir(major)
	if err != nil {
		return nil, err
	}
	cred, err := pgbin.ServerCredential()
	if err != nil {
		return nil, err
	}
	parent := ""
	if os.Getenv(envTmpfs) == "1" {
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			parent = "/dev/shm"
		}
	}
	root, err := os.MkdirTemp(parent, dataDirPrefix())
	if err != nil {
		return nil, err
	}
	ls := &localServer{bin: bin, root: root}
	fail := func(err error) (*Server, error) {
		ls.stop()
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(root, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	data := filepath.Join(root, "data")
	// A password over TCP, as a container's server wants one: the tests
	// of a wrong password must see it refused.
	pwfile := filepath.Join(root, "pwfile")
	if err := os.WriteFile(pwfile, []byte(containerPassword+"\n"), 0o600); err != nil {
		return fail(err)
	}
	if cred != nil {
		if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", containerUser, "--pwfile="+pwfile,
		"--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = root
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb in %s: %v: %s", bin, err, lastLine(string(out))))
	}
	port, err := FreePort()
	if err != nil {
		return fail(err)
	}
	logPath := filepath.Join(root, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return fail(err)
	}
	defer logf.Close()
	ls.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(port), "-c", "unix_socket_directories=",
		"-c", "max_connections=300")
	// Pdeathsig: should the test binary die before Main's teardown, the
	// kernel shuts the server down at once (SIGQUIT: an immediate shutdown).
	ls.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	ls.cmd.Stdout, ls.cmd.Stderr = logf, logf
	if err := ls.cmd.Start(); err != nil {
		return fail(fmt.Errorf("start %s/postgres: %w", bin, err))
	}
	ls.done = make(chan struct{})
	go func() {
		ls.cmd.Wait()
		close(ls.done)
	}()
	dsn := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", containerUser, containerPassword, port, containerDB)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- waitReady(ctx, dsn) }()
	select {
	case err := <-ready:
		if err != nil {
			return fail(err)
		}
	case <-ls.done:
		b, _ := os.ReadFile(logPath)
		return fail(fmt.Errorf("%s/postgres exited while starting: %s", bin, lastLine(string(b))))
	}
	return &Server{AdminDSN: dsn, local: ls}, nil
}

// stop shuts the server down at once and removes its files.
func (ls *localServer) stop() {
	if ls.cmd != nil && ls.cmd.Process != nil {
		select {
		case <-ls.done:
		default:
			ls.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-ls.done:
			case <-time.After(adminTimeout):
				syscall.Kill(-ls.cmd.Process.Pid, syscall.SIGKILL) // the postmaster's group
				<-ls.done
			}
		}
	}
	removeDataDir(ls.root)
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
