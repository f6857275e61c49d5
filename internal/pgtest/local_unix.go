//go:build linux

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// envBinDir names a directory of PostgreSQL server binaries.
const envBinDir = "PGTEST_BINDIR"

// BinDir returns the directory of the PostgreSQL server binaries that has
// every program of need (postgres and initdb if none is named):
// PGTEST_BINDIR if set, else the newest /usr/lib/postgresql/N/bin (Debian's
// and Ubuntu's layout) that has them, of major version major unless major
// is 0.
func BinDir(major int, need ...string) (string, error) {
	if len(need) == 0 {
		need = []string{"postgres", "initdb"}
	}
	has := func(dir string) error {
		for _, b := range need {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return err
			}
		}
		return nil
	}
	if dir := os.Getenv(envBinDir); dir != "" {
		if err := has(dir); err != nil {
			return "", fmt.Errorf("%s: %w", envBinDir, err)
		}
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return binMajor(dirs[i]) > binMajor(dirs[j]) })
	for _, dir := range dirs {
		if (major == 0 || binMajor(dir) == major) && has(dir) == nil {
			return dir, nil
		}
	}
	if major != 0 {
		return "", fmt.Errorf("no PostgreSQL %d server binaries in /usr/lib/postgresql/%d/bin (Debian: apt-get install postgresql-%d), and %s is not set", major, major, major, envBinDir)
	}
	return "", fmt.Errorf("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (Debian: apt-get install postgresql-15), and %s is not set", envBinDir)
}

// binMajor is the major version of a /usr/lib/postgresql/N/bin directory,
// 0 for another.
func binMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// ServerCredential is the user a server started from the binaries runs
// as: this process's own (nil), or, as root, which postgres refuses to run
// as, the postgres user or else nobody.
func ServerCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("running as root, and there is neither a postgres nor a nobody user to run the server as")
}

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
	bin, err := BinDir(major)
	if err != nil {
		return nil, err
	}
	cred, err := ServerCredential()
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
	port, err := freePort()
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
