package tcpproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait for something that should happen promptly.
const wait = 10 * time.Second

// sink is a target server that records what each connection sends and, if
// echo is set, sends it back.
type sink struct {
	ln   net.Listener
	echo bool
	got  chan []byte // everything one connection sent, when it ends
	done chan struct{}
}

func newSink(t *testing.T, echo bool) *sink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{ln: ln, echo: echo, got: make(chan []byte, 16), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var all bytes.Buffer
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					all.Write(buf[:n])
					if n > 0 && s.echo {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				s.got <- all.Bytes()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-s.done
	})
	return s
}

func start(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr().String(), wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads its echo, and returns how long it took.
func roundTrip(t *testing.T, c net.Conn, msg string) time.Duration {
	t.Helper()
	c.SetDeadline(time.Now().Add(wait))
	start := time.Now()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != msg {
		t.Fatalf("echo %q, want %q", got, msg)
	}
	return time.Since(start)
}

func TestPassAndDelay(t *testing.T) {
	s := newSink(t, true)
	p := start(t, s.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "hello")

	const d = 50 * time.Millisecond
	p.Delay(d)
	// Each direction holds the chunk for d: the round trip takes at least
	// 2d (a lower bound set by the proxy's own timers).
	if rt := roundTrip(t, c, "slow"); rt < 2*d {
		t.Errorf("round trip through Delay(%v) took %v, want at least %v", d, rt, 2*d)
	}
	p.Pass()
	roundTrip(t, c, "fast again")
	// Bytes are counted before they are written, so the counters are
	// complete once the echo has been read.
	want := int64(len("hello") + len("slow") + len("fast again"))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := p.Wait(ctx, func(s Stats) bool { return s.BytesToServer == want && s.BytesToClient == want }); err != nil {
		t.Errorf("stats %+v, want %d bytes each way: %v", p.Stats(), want, err)
	}
}

func TestBlackHoleHoldsThenDelivers(t *testing.T) {
	s := newSink(t, true)
	p := start(t, s.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "warm")
	before := p.Stats()

	p.BlackHole()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	// Nothing may come back while black-holed. (A negative check needs a
	// bound; a broken proxy fails it, a working one always passes.)
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 16)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read while black-holed: n=%d err=%v, want a timeout", n, err)
	}
	if st := p.Stats(); st.BytesToServer != before.BytesToServer {
		t.Fatalf("forwarded %d bytes while black-holed", st.BytesToServer-before.BytesToServer)
	}
	// A new connection is accepted but hangs.
	c2 := dial(t, p)
	if _, err := c2.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}

	p.Pass()
	c.SetReadDeadline(time.Now().Add(wait))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("after the black hole: %q, %v", got, err)
	}
	c2.SetReadDeadline(time.Now().Add(wait))
	got = make([]byte, 3)
	if _, err := io.ReadFull(c2, got); err != nil || string(got) != "new" {
		t.Fatalf("new connection after the black hole: %q, %v", got, err)
	}
}

func TestBlackHoleExistingSparesNewConnections(t *testing.T) {
	s := newSink(t, true)
	p := start(t, s.ln.Addr().String())
	old := dial(t, p)
	roundTrip(t, old, "warm")

	p.BlackHoleExisting()
	if _, err := old.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	// A new connection works at once, while the old one stays silent.
	fresh := dial(t, p)
	roundTrip(t, fresh, "fresh")
	old.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := old.Read(make([]byte, 16)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a black-holed connection: n=%d err=%v, want a timeout", n, err)
	}
	// Pass does not revive it: its state is gone for good.
	p.Pass()
	old.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := old.Read(make([]byte, 16)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a black-holed connection after Pass: n=%d err=%v, want a timeout", n, err)
	}
	roundTrip(t, fresh, "still")
}

func TestCutClosesAndRefuses(t *testing.T) {
	s := newSink(t, true)
	p := start(t, s.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "warm")

	p.Cut()
	c.SetReadDeadline(time.Now().Add(wait))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read after Cut succeeded")
	}
	c2 := dial(t, p)
	c2.SetReadDeadline(time.Now().Add(wait))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection made during Cut stayed open")
	}
	if st := p.Stats(); st.Cuts != 1 {
		t.Errorf("Cuts = %d, want 1", st.Cuts)
	}

	p.Pass()
	roundTrip(t, dial(t, p), "back")
}

func TestCutAfter(t *testing.T) {
	for _, n := range []int64{0, 1, 5, 9, 10} {
		s := newSink(t, false)
		p := start(t, s.ln.Addr().String())
		c := dial(t, p)
		p.CutAfter(n)
		if _, err := c.Write([]byte("0123456789")); err != nil {
			t.Fatal(err)
		}
		var got []byte
		select {
		case got = <-s.got:
		case <-time.After(wait):
			t.Fatalf("CutAfter(%d): the target's connection was not closed", n)
		}
		if string(got) != "0123456789"[:n] {
			t.Errorf("CutAfter(%d): target got %q", n, got)
		}
		c.SetReadDeadline(time.Now().Add(wait))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("CutAfter(%d): client connection still open", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		if err := p.Wait(ctx, func(s Stats) bool { return s.Cuts == 1 }); err != nil {
			t.Errorf("CutAfter(%d): %v; stats %+v", n, err, p.Stats())
		}
		cancel()
	}
}

// TestCutReplyTo: the request that holds the pattern reaches the target
// whole, its answer is never delivered, and the client's connection ends;
// requests before it pass, and so do connections after it.
func TestCutReplyTo(t *testing.T) {
	s := newSink(t, true)
	p := start(t, s.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "warm")
	p.CutReplyTo([]byte("commit"))
	roundTrip(t, c, "not yet")
	if _, err := c.Write([]byte("please commit this")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	if n, err := c.Read(make([]byte, 64)); err == nil {
		t.Fatalf("the client read %d bytes of the answer", n)
	}
	select {
	case got := <-s.got:
		if string(got) != "warmnot yetplease commit this" {
			t.Errorf("the target got %q", got)
		}
	case <-time.After(wait):
		t.Fatal("the target's connection was not closed")
	}
	if st := p.Stats(); st.Cuts != 1 {
		t.Errorf("Cuts = %d, want 1", st.Cuts)
	}
	roundTrip(t, dial(t, p), "commit again") // fired once
}
