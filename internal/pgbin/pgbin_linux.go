//go:build linux

package pgbin

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
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
