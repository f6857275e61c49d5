// Package fanout is a test proxy that does to runclaim what a sharding
// proxy does: it sends each new client connection to the next of several
// databases of one PostgreSQL server, round robin, by rewriting the
// database named in the connection's startup message. Advisory locks are
// per database, so sessions through it do not exclude each other, as
// sessions on different shards do not: the probe of the store must refuse
// it. It speaks only what it must of the protocol (an SSLRequest is
// answered "no", then the StartupMessage is rewritten; the rest is
// copied), and listens on 127.0.0.1.
package fanout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy is a running fan-out proxy.
type Proxy struct {
	ln        net.Listener
	upstream  string   // host:port of the server
	databases []string // where the connections go, in turn
	next      atomic.Uint64
	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

// Start listens on 127.0.0.1 and sends the n-th connection to
// databases[n % len(databases)] on upstream (host:port).
func Start(upstream string, databases ...string) (*Proxy, error) {
	if len(databases) == 0 {
		return nil, errors.New("fanout: no database")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, databases: databases, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is where the proxy listens.
func (p *Proxy) Addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// track keeps c, for Close.
func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		db := p.databases[(p.next.Add(1)-1)%uint64(len(p.databases))]
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer c.Close()
			_ = p.serve(c, db) // on an error the client sees its connection end
		}()
	}
}

const (
	sslRequestCode = 80877103
	gssRequestCode = 80877104
	protocol3      = 196608
)

// serve rewrites c's startup message to name db, and copies the rest both
// ways.
func (p *Proxy) serve(c net.Conn, db string) error {
	var msg []byte
	for {
		var err error
		if msg, err = readStartup(c); err != nil {
			return err
		}
		code := binary.BigEndian.Uint32(msg[:4])
		if code == sslRequestCode || code == gssRequestCode {
			if _, err := c.Write([]byte{'N'}); err != nil {
				return err
			}
			continue
		}
		if code != protocol3 {
			return fmt.Errorf("fanout: startup message of protocol %d", code)
		}
		break
	}
	startup, err := rewrite(msg, db)
	if err != nil {
		return err
	}
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return err
	}
	p.track(up)
	defer up.Close()
	if _, err := up.Write(startup); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		io.Copy(c, up)
		c.Close()
		close(done)
	}()
	io.Copy(up, c)
	up.Close()
	<-done
	return nil
}

// readStartup reads one untyped message: its length, then its body, which
// it returns without the length.
func readStartup(c net.Conn) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size < 8 || size > 10000 {
		return nil, fmt.Errorf("fanout: startup message of %d bytes", size)
	}
	body := make([]byte, size-4)
	_, err := io.ReadFull(c, body)
	return body, err
}

// rewrite returns the startup message (with its length) whose database
// parameter is db.
func rewrite(body []byte, db string) ([]byte, error) {
	params := bytes.Split(body[4:], []byte{0})
	var out bytes.Buffer
	out.Write([]byte{0, 0, 0, 0})
	out.Write(body[:4])
	found := false
	for i := 0; i+1 < len(params); i += 2 {
		k, v := params[i], params[i+1]
		if len(k) == 0 {
			break
		}
		if string(k) == "database" {
			v, found = []byte(db), true
		}
		out.Write(k)
		out.WriteByte(0)
		out.Write(v)
		out.WriteByte(0)
	}
	if !found {
		out.WriteString("database\x00" + db + "\x00")
	}
	out.WriteByte(0)
	b := out.Bytes()
	binary.BigEndian.PutUint32(b[:4], uint32(len(b)))
	return b, nil
}
