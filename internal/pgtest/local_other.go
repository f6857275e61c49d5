//go:build !linux

package pgtest

import "errors"

// localServer is a server started from the binaries: on Linux only.
type localServer struct{ bin string }

func (ls *localServer) stop() {}

// startLocal starts a server from the binaries: on Linux only.
func startLocal(major int) (*Server, error) {
	return nil, errors.New("a server from the local binaries is started on Linux only")
}
