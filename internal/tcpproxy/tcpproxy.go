// Package tcpproxy is a small TCP proxy for fault-injection tests. It
// accepts connections on a loopback port and forwards each to one target
// address, and on command it delays, black-holes or cuts them.
//
// Why not toxiproxy: its Go packages would bring its server, HTTP API,
// metrics and logging dependencies into go.mod for what is here under 300
// lines of code, and the tests need only these behaviours, on loopback:
//
//   - Pass: forward at once.
//   - Delay: hold every chunk for a fixed time before forwarding it, in
//     both directions (order is kept: one chunk at a time per direction).
//   - BlackHole: stop forwarding but keep every connection open, as a
//     partition does; new connections are accepted and hang. The data read
//     meanwhile is held, and delivered when the mode changes back, as TCP
//     would retransmit it after a partition heals.
//   - Cut: close every connection, and close new ones at once.
//
// CutAfter additionally ends every connection after a given number of
// further bytes have been forwarded to the target, to kill a connection in
// the middle of a request. CutReplyTo ends a connection after a request has
// reached the target and before its answer reaches the client, to lose the
// answer to a request the target has carried out.
package tcpproxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"time"
)

type mode int

const (
	modePass mode = iota
	modeDelay
	modeBlackHole
	modeCut
)

// Stats counts what the proxy has done since it started.
type Stats struct {
	Accepted      int64 // connections accepted
	BytesToServer int64 // bytes forwarded (handed to the connection) to the target
	BytesToClient int64 // bytes forwarded back to clients
	Cuts          int64 // times every connection was closed by Cut or CutAfter
}

// A Proxy forwards connections from Addr to a target. Its methods are safe
// for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup // the accept loop and the forwarding goroutines

	mu       sync.Mutex // protects the fields below
	cond     *sync.Cond // signalled on every change of mode, links or closed
	mode     mode
	delay    time.Duration
	cutAfter int64  // bytes to forward to the target before cutting; -1 when not armed
	replyCut []byte // see CutReplyTo; nil when not armed
	links    map[*link]struct{}
	stats    Stats
	changed  chan struct{} // closed and replaced when stats change
	closed   bool
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	done           chan struct{} // closed when the link is closed
	closed         bool          // guarded by Proxy.mu
	draining       bool          // guarded by Proxy.mu: a drain goroutine owns server
	blackHoled     bool          // guarded by Proxy.mu: set by BlackHoleExisting
	cutReply       bool          // guarded by Proxy.mu: drop the next answer and close (CutReplyTo)
}

// Start listens on 127.0.0.1 at a free port and forwards every connection
// to target, in Pass mode.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, cutAfter: -1, links: map[*link]struct{}{}, changed: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address the proxy listens on.
func (p *Proxy) Addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

// Pass forwards everything at once from now on; data held by BlackHole is
// delivered.
func (p *Proxy) Pass() { p.setMode(modePass, 0) }

// Delay holds every chunk read from now on for d before forwarding it, in
// both directions. A delay under preciseBelow is slept through precisely
// where the platform allows (see hold), so that sub-millisecond delays, as
// between hosts in one data centre, can be modelled.
func (p *Proxy) Delay(d time.Duration) { p.setMode(modeDelay, d) }

// preciseBelow is the delay under which hold sleeps precisely.
const preciseBelow = 2 * time.Millisecond

// hold waits d, and reports false if done is closed first. The Go
// runtime's timers may fire only about once a millisecond (on the 2-core
// VM the benchmarks ran on, a 250 µs timer fired after 1.09 ms), so a delay
// under preciseBelow is slept by preciseSleep instead: it cannot be cut
// short by done, which is checked after it.
func hold(d time.Duration, done <-chan struct{}) bool {
	if d < preciseBelow {
		preciseSleep(d)
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// BlackHole stops forwarding, keeping every connection open.
func (p *Proxy) BlackHole() { p.setMode(modeBlackHole, 0) }

// BlackHoleExisting stops forwarding on every connection open now, for good,
// keeping them open, while new connections pass as the mode says: a
// firewall or NAT that silently dropped the state of established
// connections. The data of those connections is never delivered.
func (p *Proxy) BlackHoleExisting() {
	p.mu.Lock()
	for l := range p.links {
		l.blackHoled = true
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Cut closes every connection and, until the mode changes, every new one
// as soon as it is accepted.
func (p *Proxy) Cut() {
	p.setMode(modeCut, 0)
	p.cutAll(true, false)
}

// CutAfter arms a cut: once n more bytes have been forwarded to the target
// (counted over all connections), every connection ends; a chunk that
// crosses the limit is forwarded only up to it. n = 0 cuts at the next
// chunk without forwarding any of it. The clients' connections are closed;
// the target's are half-closed, so that the target reads exactly the bytes
// forwarded and then end-of-file, whatever it sends meanwhile (which is
// read and dropped). A full close could instead reach the target as a
// reset, racing with the bytes before it. The mode does not change, so new
// connections are accepted afterwards.
func (p *Proxy) CutAfter(n int64) {
	if n < 0 {
		panic("tcpproxy: CutAfter with a negative byte count")
	}
	p.mu.Lock()
	p.cutAfter = n
	p.mu.Unlock()
}

// Disarm cancels a cut that CutAfter armed and that has not happened.
func (p *Proxy) Disarm() {
	p.mu.Lock()
	p.cutAfter = -1
	p.mu.Unlock()
}

// CutReplyTo arms a cut of the answer to a request: once a chunk that
// contains pattern has been forwarded to the target, the next chunk the
// target sends back on that connection is dropped, never delivered, and
// the connection is closed on both sides. The target has then received the
// whole request and answered it (a database has committed it), while the
// client sees its connection end before any of the answer. It fires once;
// the mode does not change. pattern must not be empty.
func (p *Proxy) CutReplyTo(pattern []byte) {
	if len(pattern) == 0 {
		panic("tcpproxy: CutReplyTo with an empty pattern")
	}
	p.mu.Lock()
	p.replyCut = bytes.Clone(pattern)
	p.mu.Unlock()
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Wait waits until cond holds for the counters, or ctx ends.
func (p *Proxy) Wait(ctx context.Context, cond func(Stats) bool) error {
	for {
		p.mu.Lock()
		s, ch := p.stats, p.changed
		p.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end (for a connection half-closed by CutAfter, until
// the target closes it, at most 10 s). It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	var err error
	if !already {
		err = p.ln.Close()
	}
	p.cutAll(false, false)
	p.wg.Wait()
	return err
}

func (p *Proxy) setMode(m mode, d time.Duration) {
	p.mu.Lock()
	p.mode, p.delay = m, d
	p.cond.Broadcast()
	p.mu.Unlock()
}

// bump records a change of the counters; p.mu must be held.
func (p *Proxy) bump() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		p.stats.Accepted++
		p.bump()
		refuse := p.mode == modeCut || p.closed
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.mode == modeCut {
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(2)
	go p.pipe(l, server, client, true)
	go p.pipe(l, client, server, false)
}

// pipe forwards from src to dst until either side fails or the link is
// closed, then closes the link.
func (p *Proxy) pipe(l *link, dst, src net.Conn, toServer bool) {
	defer p.wg.Done()
	defer p.closeLink(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.forward(l, dst, buf[:n], toServer) {
			return
		}
		if err != nil {
			return
		}
	}
}

// forward applies the mode to one chunk and writes it. It reports whether
// the link is still open.
func (p *Proxy) forward(l *link, dst net.Conn, b []byte, toServer bool) bool {
	delayed := false
	for {
		p.mu.Lock()
		for (p.mode == modeBlackHole || l.blackHoled) && !l.closed && !p.closed {
			p.cond.Wait()
		}
		if l.closed || p.closed {
			p.mu.Unlock()
			return false
		}
		d := p.delay
		if p.mode != modeDelay || delayed {
			d = 0
		}
		if d == 0 {
			break // with p.mu held
		}
		p.mu.Unlock()
		if !hold(d, l.done) {
			return false
		}
		delayed = true // and look at the mode again: it may be a black hole now
	}
	if !toServer && l.cutReply {
		p.stats.Cuts++
		p.bump()
		p.mu.Unlock()
		return false // the caller closes the link, dropping b
	}
	if toServer && p.replyCut != nil && bytes.Contains(b, p.replyCut) {
		l.cutReply, p.replyCut = true, nil
	}
	cut := false
	if toServer && p.cutAfter >= 0 {
		if int64(len(b)) >= p.cutAfter {
			b, cut, p.cutAfter = b[:p.cutAfter], true, -1
		} else {
			p.cutAfter -= int64(len(b))
		}
	}
	// Count the bytes before writing them, so that whoever sees the peer's
	// answer to them also sees them counted.
	if toServer {
		p.stats.BytesToServer += int64(len(b))
	} else {
		p.stats.BytesToClient += int64(len(b))
	}
	p.bump()
	p.mu.Unlock()

	var err error
	if len(b) > 0 {
		_, err = dst.Write(b)
	}
	if cut {
		p.cutAll(true, true)
		return false
	}
	return err == nil
}

// cutAll closes every open connection; count says whether it is a cut to
// count in Stats, halfClose whether to half-close the target's connections
// (see CutAfter).
func (p *Proxy) cutAll(count, halfClose bool) {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	if count {
		p.stats.Cuts++
		p.bump()
	}
	p.mu.Unlock()
	for _, l := range links {
		if !halfClose {
			p.closeLink(l)
			continue
		}
		server, ok := l.server.(*net.TCPConn)
		if !ok {
			p.closeLink(l)
			continue
		}
		p.mu.Lock()
		l.draining = true
		p.mu.Unlock()
		p.closeClient(l)
		_ = server.CloseWrite()
		// Drain what the target still sends until it closes, then close.
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.Copy(io.Discard, server)
			server.Close()
		}()
	}
}

// closeClient closes the client's side of a link and marks the link closed,
// leaving the target's connection to whoever drains it.
func (p *Proxy) closeClient(l *link) {
	p.mu.Lock()
	if !l.closed {
		l.closed = true
		delete(p.links, l)
		close(l.done)
		p.cond.Broadcast()
	}
	p.mu.Unlock()
	l.client.Close()
}

func (p *Proxy) closeLink(l *link) {
	p.closeClient(l)
	p.mu.Lock()
	draining := l.draining
	p.mu.Unlock()
	if !draining {
		l.server.Close()
	}
}
